"""The rule that skips Stage 2's verifying recompile, checked against real recompiles."""

import pytest

from aoizora.cost import CostModel, Q2Options
from aoizora.placement import enumerate_placements
from aoizora.stage2.compiling import compile_strategy
from aoizora.stage2.verify import recompile_cannot_change_q2
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

CFG = TransformerConfig(layers=2, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2)
# on v5e:2x4 this strategy compiles to another program over its other placements: its context
# all-gathers keep a reordering map there (experiments/order_dependence.py)
KEYS = ("context=4,tensor=2 | weights=replicated | attn=dense",)


@pytest.fixture(scope="module")
def recompiles(tmp_path_factory):
    """(strategy, placement, rule's answer per ring order, Q2 on the shared program, Q2 on its own) per pair."""
    from aoizora.stage2 import CompileCache, CompileWorkers

    space, topo = TransformerSpace(CFG), get_topology("v5e:2x4")
    cache = CompileCache(tmp_path_factory.mktemp("compiled"))
    models = {order: CostModel(topo, Q2Options(ring_order=order)) for order in ("auto", "listed", "best")}
    rows = []
    workers = CompileWorkers(1)  # one child for every compile
    for key in KEYS:
        strategy = next(c.strategy for c in space.candidates(topo.num_devices) if c.key == key)
        placements = enumerate_placements(topo, space.mesh_spec(strategy)).placements[:3]
        shared = compile_strategy(space, strategy, key, topo, placements[0], 600, cache, executor=workers).program
        for p in placements[1:]:
            own = compile_strategy(space, strategy, key, topo, p, 600, cache, executor=workers).program
            for order, model in models.items():
                rows.append((key, p.name, order, recompile_cannot_change_q2(model, shared, p),
                             model.evaluate(shared, p).step_seconds, model.evaluate(own, p).step_seconds))
    workers.close()
    return rows


def test_a_skipped_recompile_would_not_have_changed_q2(recompiles):
    skipped = [r for r in recompiles if r[3]]
    assert {r[2] for r in skipped} >= {"listed", "best"}, "the rule skips where the ring order is forced"
    for key, placement, order, _, shared_q2, own_q2 in skipped:
        assert own_q2 == shared_q2, (key, placement, order)


def test_the_rule_keeps_the_recompiles_that_change_q2(recompiles):
    changed = [r for r in recompiles if r[4] != r[5]]
    assert changed, "some recompile changes Q2 on this slice (the reordering map flips)"
    assert not any(r[3] for r in changed)


def test_no_recompile_is_skipped_on_tpu7x():
    model = CostModel(get_topology("tpu7x:2x2x1"))
    assert not recompile_cannot_change_q2(model, program=None, placement=None)

