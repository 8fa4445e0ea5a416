"""benchmarks/memory_estimate.py: the strategies a committed bench cell compiled are found (without
lowering) as they were compiled, whatever the current space plans for them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from aoizora.models.registry import wan_space
from aoizora.plan.planner import expert_entries
from aoizora.toolchain import environment_flags
from aoizora.topology import get_topology

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from memory_estimate import compiled_strategy  # noqa: E402

CELLS = sorted((ROOT / "docs" / "data" / "bench" / "tuning" / "cells").glob("*.json"))


@pytest.mark.parametrize("path", CELLS[:1] + CELLS[-1:], ids=lambda p: p.stem)
def test_every_compiled_strategy_of_a_tuning_cell_is_found_as_compiled(path):
    doc = json.loads(path.read_text())
    cell = doc["cell"]
    topo = get_topology(cell["topology"])
    space = wan_space(cell["model"], cell["resolution"], int(cell["frames"]), generation=topo.generation)
    experts = {e.key: e.deployment.strategy for e in expert_entries(space, topo, environment_flags())}
    compiled = [k for k, s in doc["strategies"].items() if s.get("memory_bytes")]
    assert len(compiled) > 1
    for key in compiled:
        st = compiled_strategy(key, experts, space.kernel)
        assert key in experts or st.key() == key
