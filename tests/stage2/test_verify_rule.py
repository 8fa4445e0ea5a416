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
def programs(tmp_path_factory):
    """(key, placement, program compiled over the strategy's first placement, program compiled over
    this one) for the first placements after the first."""
    from aoizora.stage2 import CompileCache, CompileWorkers

    space, topo = TransformerSpace(CFG), get_topology("v5e:2x4")
    cache = CompileCache(tmp_path_factory.mktemp("compiled"))
    out = []
    workers = CompileWorkers(1)  # one child for every compile
    for key in KEYS:
        strategy = next(c.strategy for c in space.candidates(topo.num_devices) if c.key == key)
        placements = enumerate_placements(topo, space.mesh_spec(strategy)).placements[:3]
        shared = compile_strategy(space, strategy, key, topo, placements[0], 600, cache, executor=workers).program
        for p in placements[1:]:
            own = compile_strategy(space, strategy, key, topo, p, 600, cache, executor=workers).program
            out.append((key, p, shared, own))
    workers.close()
    return out


@pytest.fixture(scope="module")
def recompiles(programs):
    """(strategy, placement, rule's answer per ring order, Q2 on the shared program, Q2 on its own) per pair."""
    topo = get_topology("v5e:2x4")
    models = {order: CostModel(topo, Q2Options(ring_order=order)) for order in ("reordering-map", "listed", "best")}
    rows = []
    for key, p, shared, own in programs:
        for order, model in models.items():
            rows.append((key, p.name, order, recompile_cannot_change_q2(model, shared, p),
                         model.evaluate(shared, p).step_seconds, model.evaluate(own, p).step_seconds))
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


@pytest.mark.slow
def test_a_leading_pair_is_verified_by_its_own_compile(tmp_path):
    from aoizora.stage2 import CompileCache, CompileWorkers
    from aoizora.stage2.outcomes import Compiled, Scored, StrategyOutcome
    from aoizora.stage2.verify import verify_leading_pairs

    space, topo = TransformerSpace(CFG), get_topology("v5e:2x4")
    model = CostModel(topo)
    cache = CompileCache(tmp_path)
    key = KEYS[0]
    strategy = next(c.strategy for c in space.candidates(topo.num_devices) if c.key == key)
    shared_p, *others = enumerate_placements(topo, space.mesh_spec(strategy)).placements[:3]
    with CompileWorkers(1) as workers:
        shared = compile_strategy(space, strategy, key, topo, shared_p, 600, cache, executor=workers)
        # a placement whose own compile changes Q2 (its reordering maps differ)
        for own_p in others:
            own = compile_strategy(space, strategy, key, topo, own_p, 600, cache, executor=workers).program
            if model.evaluate(own, own_p).step_seconds != model.evaluate(shared.program, own_p).step_seconds:
                break
        else:
            pytest.fail("no placement's own compile changes Q2")
        outcome = StrategyOutcome(key, strategy, compiled=Compiled(key, shared.program, None, 0.0, shared_p.name))
        pair = Scored(key, own_p, model.evaluate(shared.program, own_p), shared.program)
        outcome.scored.append(pair)
        notes: list[str] = []
        verify_leading_pairs(space, topo, model, [outcome], 1, set(), 600, cache, lambda _: None, {}, notes, workers)
    assert pair.verified and pair.program.collectives == own.collectives
    assert any("compiling with this device order changed Q2" in n for n in notes)
    assert pair.q2.step_seconds == model.evaluate(own, own_p).step_seconds
