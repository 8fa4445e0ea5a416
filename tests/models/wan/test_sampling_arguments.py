"""The jitted step builders refuse a strategy given without the mesh it runs on."""

from __future__ import annotations

import pytest
from wan_testutil import TINY_T2V

from aoizora.errors import StrategyError
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.models.wan.video.sampling import make_denoise_step, make_forward


def test_a_strategy_without_its_mesh_is_refused():
    with pytest.raises(StrategyError, match="pass the mesh"):
        make_forward(TINY_T2V, Strategy(), None)
    with pytest.raises(StrategyError, match="pass the mesh"):
        make_denoise_step(TINY_T2V, None, Strategy(), None)
