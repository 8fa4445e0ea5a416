"""The Wan 2.1 model through the Stage 1 protocol (lowering only, small video)."""

import pytest

from aoizora.models.wan.config import PRESETS, VideoShape
from aoizora.models.wan.strategy import Strategy
from aoizora.stage1 import analyse
from aoizora.stage1.wan_space import WanSpace, strategy_key

VIDEO = VideoShape(5, 128, 128)  # 2 latent frames x 8 x 8 tokens after patchify = 128 tokens


@pytest.fixture(scope="module")
def space():
    return WanSpace(PRESETS["t2v-1.3b"], VIDEO)


def test_candidates_and_reasons(space):
    cands = {c.key: c for c in space.candidates(8)}
    assert len(cands) == 20 * 3 * 4
    assert cands[strategy_key(Strategy(context=8, attention="ulysses", weights="replicated"))].legal is False  # 12 heads
    dup = cands[strategy_key(Strategy(data=2, tensor=4, attention="ring", weights="tensor"))]
    assert any("duplicate" in r for r in dup.reasons)
    assert cands[strategy_key(Strategy(data=2, context=4, attention="allgather", weights="replicated"))].legal


def test_allgather_context_lowers_with_explicit_gathers_and_costed_splash(space, topo_2x4):
    st = Strategy(data=2, context=4, attention="allgather", weights="replicated")
    pred, res, mem, _, _ = analyse(space, st, topo_2x4)
    explicit = [c for c in pred.comms if c.explicit]
    # K and V all-gathered over context in every one of the 30 layers
    assert {(c.kind, c.axes) for c in explicit} == {("all-gather", ("context",))}
    assert sum(c.multiplicity for c in explicit) == 2 * 30
    kernels = [n for n in pred.ops if n.opaque]
    assert kernels and all(n.flops > 0 for n in kernels)  # splash self- and cross-attention, costed
    assert res.seconds > 0 and mem.fits


def test_ulysses_uses_all_to_all(space, topo_2x4):
    st = Strategy(data=2, context=4, attention="ulysses", weights="replicated")
    pred, _, _, _, _ = analyse(space, st, topo_2x4)
    kinds = {(c.kind, c.axes) for c in pred.comms if c.explicit}
    assert kinds == {("all-to-all", ("context",))}
