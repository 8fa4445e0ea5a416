import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from small_transformer import SMALL  # noqa: E402,F401  (re-exported for fixtures)

from aoizora.topology import get_topology  # noqa: E402


@pytest.fixture(scope="session")
def topo_2x4():
    return get_topology("v5e:2x4")


@pytest.fixture(scope="session")
def micro(topo_2x4):
    from micro import micro_cases, splash_case

    cases = {c.name: c for c in micro_cases(topo_2x4)}
    cases["kernel-boundary"] = splash_case(topo_2x4)
    return cases


@pytest.fixture(scope="session")
def transformer_cases(topo_2x4):
    """The small transformer lowered under three strategies (compiled lazily by the tests that need it)."""
    from micro import Case

    from aoizora.stage1 import predict, read_module
    from aoizora.workload import lowering_inputs_on
    from aoizora.workloads import TransformerSpace

    space = TransformerSpace(SMALL)
    wanted = {
        "data=2,context=2,tensor=2 | weights=replicated | attn=dense",
        "data=2,tensor=4 | weights=replicated | attn=dense",
        "context=8 | weights=replicated | attn=dense",
    }
    out = {}
    for c in space.candidates(topo_2x4.num_devices):
        if c.key in wanted:
            lowered = lowering_inputs_on(space, c.strategy, topo_2x4).lower()
            module = read_module(lowered)
            out[c.key] = Case(c.key, lowered, module, predict(module))
    assert set(out) == wanted
    return out
