"""Programs a plan costs besides the step (a video's VAE decode): compiled once beside Stage 2 in
its executor, through the compile cache (a re-plan reads them back), and cut by the time budget
like a step's compile (listed, never cached as full)."""

from __future__ import annotations

import pytest

from aoizora.plan import plan_space
from aoizora.stage2 import companions
from aoizora.stage2.budget import NOT_COMPILED, STOPPED, TimeBudget
from aoizora.stage2.companions import CompanionCompiles
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compile_workers import CompileTimeout, CompileWorkers
from aoizora.stage2.compiling import shared_compile_placement
from aoizora.topology import get_topology
from aoizora.workload import CompanionProgram
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

CFG = TransformerConfig(layers=2, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2)
#: any program serves as a companion: another small transformer's
OTHER = TransformerConfig(layers=1, dim=128, heads=2, head_dim=64, mlp=256, seq=128, batch=2)
SEEN: list[dict] = []  # what `plan_totals` was given, per plan


def _program(topology) -> CompanionProgram:
    other = TransformerSpace(OTHER)
    strategy = next(c.strategy for c in other.candidates(topology.num_devices) if c.legal)
    return CompanionProgram("extra", "extra program", other, strategy,
                            shared_compile_placement(other, topology, strategy))


class WithCompanion(TransformerSpace):
    """The small transformer with one companion program."""

    def companion_programs(self, topology):
        return [_program(topology)]

    def plan_totals(self, strategy, topology, step_seconds, companions):
        SEEN.append({"step_seconds": step_seconds, **companions})
        return {}


@pytest.mark.tpu_compile
def test_a_companion_compiles_once_beside_stage2_and_a_replan_reads_it_back(tmp_path):
    topo = get_topology("v5e:2x2")
    cache = CompileCache(tmp_path)
    kwargs = dict(top_k=1, verify_top=0, progress=False, use_cache=False, compile_cache=cache)
    with CompileWorkers(1) as pool:
        first = plan_space(WithCompanion(CFG), topo, executor=pool, **kwargs)
    extra = SEEN[-1]["extra"]
    assert extra["label"] == "extra program" and extra["seconds"] > 0 and not extra["cached"]
    assert extra["compile_seconds"] > 0 and extra["sim_seconds"] > 0
    assert SEEN[-1]["step_seconds"] == first.plan.predicted_step_seconds
    assert first.plan.data["request"]["companions"] == ["extra program"]
    assert first.plan.data["timings"]["companions"] >= 0
    with CompileWorkers(1) as pool:
        plan_space(WithCompanion(CFG), topo, executor=pool, **kwargs)
    again = SEEN[-1]["extra"]
    assert again["cached"] and again["seconds"] == extra["seconds"]


def test_a_companion_the_budget_leaves_no_time_for_is_listed_and_not_compiled(tmp_path, monkeypatch):
    now = [100.0]
    budget = TimeBudget(10, clock=lambda: now[0])
    now[0] += 11
    called = []
    monkeypatch.setattr(companions, "compile_companion", lambda *a, **k: called.append(a))
    topo = get_topology("v5e:2x2")
    with CompileWorkers(1) as pool, \
            CompanionCompiles([_program(topo)], topo, 900, budget, CompileCache(tmp_path), None, pool) as c:
        c.start()
        costs = c.costs()
    assert costs == {"extra": {"label": "extra program", "dropped": NOT_COMPILED}}
    assert called == [] and budget.record.companions_not_costed == ["extra program"] and budget.record.cut
    assert budget.record.not_compiled == []  # a companion is not a strategy
    assert not list(tmp_path.iterdir())  # nothing cached


def test_a_companion_compile_the_budget_stops_is_listed_as_stopped(monkeypatch):
    budget = TimeBudget(30)

    def stopped(program, topology, timeout_s, *args):
        # what was left of the budget on the clock, beside the compile's own 900 CPU seconds
        assert timeout_s.wall_s <= 30 and timeout_s.cpu_s == 900
        raise CompileTimeout("compile did not finish", wall_clock=True)

    monkeypatch.setattr(companions, "compile_companion", stopped)
    topo = get_topology("v5e:2x2")
    with CompileWorkers(1) as pool, CompanionCompiles([_program(topo)], topo, 900, budget, None, None, pool) as c:
        c.start()
        costs = c.costs()
    assert costs["extra"]["dropped"] == STOPPED and budget.record.companions_not_costed == ["extra program"]


def test_a_companion_the_compiler_refuses_says_why(monkeypatch):
    def refused(*args):
        raise RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory in memory space hbm")

    monkeypatch.setattr(companions, "compile_companion", refused)
    topo = get_topology("v5e:2x2")
    with CompileWorkers(1) as pool, CompanionCompiles([_program(topo)], topo, 900, None, None, None, pool) as c:
        c.start()
        dropped = c.costs()["extra"]["dropped"]
    assert "RESOURCE_EXHAUSTED" in dropped or "HBM" in dropped


def test_the_plan_waits_for_a_companion_no_longer_than_the_budget(monkeypatch):
    """A companion compile that waited for a free compile process may outlast the budget: the plan
    lists it as stopped at the budget's end and does not wait for it."""
    import time

    monkeypatch.setattr(companions, "compile_companion", lambda *args: time.sleep(4))
    topo = get_topology("v5e:2x2")
    # The program is lowered and the pool is up before the budget starts: on a loaded host either
    # may take longer than the budget, and a compile begun after the budget's end is never started.
    program = _program(topo)
    with CompileWorkers(1) as pool:
        budget = TimeBudget(1.0)
        t0 = time.perf_counter()
        with CompanionCompiles([program], topo, 900, budget, None, None, pool) as c:
            c.start()
            assert c.waiting() == ["extra program"]
            costs = c.costs()
        waited = time.perf_counter() - t0
    assert waited < 3.0
    assert costs["extra"]["dropped"] == STOPPED and budget.record.companions_not_costed == ["extra program"]


def test_the_budget_note_counts_a_companion_apart_from_the_strategies():
    from aoizora.plan.planner import _budget_notes

    budget = TimeBudget(30)
    budget.record.companions_not_costed.append("extra program")
    (note,) = _budget_notes(budget)
    assert "0 strategies not compiled, 0 compiles stopped" in note and "not costed: extra program" in note
