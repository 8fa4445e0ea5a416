"""Stage 2 compiles over the placement predicted best where the program depends on the device order."""

import numpy as np
import pytest

from aoizora.cost import CostModel
from aoizora.placement import JAX_DEFAULT, MeshSpec, enumerate_placements
from aoizora.plan import plan_space
from aoizora.stage1 import run_stage1
from aoizora.stage2 import CompileCache, CompileWorkers
from aoizora.stage2.compile_order import (
    CompilePlacements,
    predicted_compile_placement,
    rank_by_traffic,
    replica_groups,
    synthetic_program,
    traffic_of,
)
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

CFG = TransformerConfig(layers=2, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2)
# on tpu7x:2x2x1 its context all-gathers are the traffic a chip's two cores should carry
KEY = "context=2,tensor=4 | weights=replicated | attn=dense"


class OneStrategy(TransformerSpace):
    """The small transformer restricted to the strategy `KEY` (a one-strategy plan)."""

    def candidates(self, num_devices):
        return [c for c in super().candidates(num_devices) if c.key == KEY]


@pytest.fixture(scope="module")
def tpu7x():
    topo = get_topology("tpu7x:2x2x1")
    space = TransformerSpace(CFG)
    stage1 = run_stage1(space, topo, top_k=4, progress=False, workers=1)
    return space, topo, {e.key: e for e in stage1.ranked}


def test_replica_groups_are_the_mesh_axes_over_logical_positions():
    ids = np.arange(8).reshape(2, 2, 2)
    mesh = MeshSpec(("a", "b", "c"), (2, 2, 2))
    assert replica_groups(mesh, ["b"]) == sorted(ids.transpose(0, 2, 1).reshape(4, 2).tolist())
    assert replica_groups(mesh, ["a", "c"]) == [ids[:, j, :].ravel().tolist() for j in range(2)]
    assert replica_groups(mesh, ["c", "a"]) == [ids[:, j, :].T.ravel().tolist() for j in range(2)]
    # a Shardy sub-axis name:pre_size:size is the middle digit of an axis of 8 split 2 x 2 x 2
    line = MeshSpec(("x",), (8,))
    assert replica_groups(line, ["x:2:2"]) == sorted(ids.transpose(0, 2, 1).reshape(4, 2).tolist())
    assert replica_groups(line, ["y"]) is None


def test_the_predicted_placement_puts_the_context_axis_on_the_cores_of_a_chip(tpu7x):
    space, topo, entries = tpu7x
    entry = entries[KEY]
    strategy = entry.candidate.strategy
    placement = predicted_compile_placement(space, topo, strategy, entry.summary)
    mesh = space.mesh_spec(strategy)
    coords = placement.coords(topo)  # chip coordinates, then the core
    context = mesh.axis_names.index("context")
    for t in range(mesh.axis_sizes[1 - context]):
        pair = np.take(coords, t, axis=1 - context)  # the two positions along context
        assert (pair[0][:-1] == pair[1][:-1]).all() and pair[0][-1] != pair[1][-1], placement.name
    # the argmin of Q2 on Stage 1's collectives, strictly better than JAX's order there
    program = synthetic_program(mesh, traffic_of(entry.summary))
    model = CostModel(topo)
    placements = enumerate_placements(topo, mesh).placements
    q2 = {p.name: model.evaluate(program, p).step_seconds for p in placements}
    assert q2[placement.name] == min(q2.values()) < q2[JAX_DEFAULT]


def test_a_leading_pair_on_its_compile_placement_is_verified_without_a_recompile(tpu7x, tmp_path, monkeypatch):
    import aoizora.stage2.compiling as stage2

    space, topo, entries = tpu7x
    predicted = predicted_compile_placement(space, topo, entries[KEY].candidate.strategy, entries[KEY].summary)
    calls = []
    real = stage2.compile_strategy

    def recorded(space, strategy, key, topology, placement, *args, **kwargs):
        calls.append((key, placement.name))
        return real(space, strategy, key, topology, placement, *args, **kwargs)

    monkeypatch.setattr(stage2, "compile_strategy", recorded)
    result = plan_space(OneStrategy(CFG), topo, top_k=1, verify_top=1, include_experts=False, progress=False,
                        use_cache=False, compile_cache=CompileCache(tmp_path), executor=CompileWorkers(1))
    plan = result.plan.data
    assert calls == [(KEY, predicted.name)], "compiled once, over the predicted placement"
    assert plan["placement"]["name"] == predicted.name and plan["placement"]["verified_compile"]
    assert plan["stage2"]["compile_placements"] == {KEY: predicted.name}
    assert plan["stage2"]["verify_recompiles"] == []
    assert any("1 of 1 strategies compiled over the placement Q2 ranks first" in n for n in plan["notes"])
    # Q2 on the compiled program ranks the compile placement first (equal Q2 elsewhere ranks after it)
    outcome = result.outcomes[0]
    assert min(s.q2.step_seconds for s in outcome.scored) == plan["prediction"]["step_seconds"]


def test_v5e_still_compiles_over_jax_default():
    topo = get_topology("v5e:2x4")
    space = TransformerSpace(CFG)
    ranked = run_stage1(space, topo, top_k=4, progress=False, workers=1).ranked
    chosen = CompilePlacements(space, topo, {e.key: e.summary for e in ranked})
    model = CostModel(topo)
    elsewhere = 0  # strategies whose collectives alone would rank another placement first
    for e in ranked:
        strategy = e.candidate.strategy
        placements = enumerate_placements(topo, space.mesh_spec(strategy)).placements
        assert chosen(e.key, strategy).name == JAX_DEFAULT == placements[0].name
        program = synthetic_program(space.mesh_spec(strategy), traffic_of(e.summary))
        elsewhere += rank_by_traffic(program, placements, model).name != JAX_DEFAULT
    assert elsewhere, "the generation, not the traffic, keeps v5e on JAX's order"


class OneStrategyAsExpert(OneStrategy):
    """`OneStrategy` whose strategy is also its documented deployment."""

    def expert_strategy(self, num_devices):
        return self.candidates(num_devices)[0].strategy


@pytest.mark.slow
def test_an_expert_deployment_compiles_over_jax_default_on_tpu7x(tmp_path):
    topo = get_topology("tpu7x:2x2x1")
    result = plan_space(OneStrategyAsExpert(CFG), topo, top_k=1, verify_top=1, progress=False, use_cache=False,
                        compile_cache=CompileCache(tmp_path), executor=CompileWorkers(1))
    stage2 = result.plan.data["stage2"]
    # a baseline as deployed: its reported time is its own compile's; a leading pair elsewhere is recompiled
    assert stage2["compile_placements"] == {KEY: JAX_DEFAULT}
    expert = result.plan.data["baselines"]["experts"][0]
    chosen = result.plan.data["placement"]
    assert expert["placement"] == JAX_DEFAULT and expert["verified_compile"] is (chosen["name"] == JAX_DEFAULT)
    if chosen["name"] != JAX_DEFAULT:
        assert stage2["verify_recompiles"] == [{"strategy": KEY, "placement": chosen["name"]}]
        assert chosen["verified_compile"]
