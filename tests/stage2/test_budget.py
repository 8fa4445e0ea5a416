"""The planning time budget (`aoizora plan --time-budget`): Stage 2 stops compiling and verifying
when it runs out, answers with the best pair found, records what it cut, and is never cached."""

from __future__ import annotations

import pytest

from aoizora.errors import PlanningError
from aoizora.plan import cache, plan_space
from aoizora.stage2 import compiling
from aoizora.stage2.budget import NOT_COMPILED, STOPPED, TimeBudget, compile_timeout
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compile_limits import CompileLimit
from aoizora.stage2.compile_workers import CompileTimeout
from aoizora.stage2.search import Stage2Config, run_stage2
from aoizora.stage2.sweep import BoundedSweep
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

CFG = TransformerConfig(layers=2, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2)


class _Clock:
    """A clock that stands still until moved."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_budget_gives_each_compile_what_is_left_of_it_on_the_clock_beside_its_own_cpu_limit():
    clock = _Clock()
    budget = TimeBudget(60, clock=clock)
    assert budget.remaining() == 60 and not budget.expired()
    assert compile_timeout(budget, 900) == CompileLimit(cpu_s=900, wall_s=60)
    clock.now += 45
    assert compile_timeout(budget, None) == CompileLimit(cpu_s=None, wall_s=15)
    clock.now += 20
    assert budget.expired() and compile_timeout(budget, 900).spent
    assert compile_timeout(None, 900) == CompileLimit(cpu_s=900) and not compile_timeout(None, 900).spent
    assert not budget.record.cut


@pytest.mark.parametrize("seconds", [0, -1, float("nan")])
def test_a_budget_that_is_not_positive_is_refused(seconds):
    with pytest.raises(ValueError, match="positive"):
        TimeBudget(seconds)


def test_once_the_budget_is_spent_no_strategy_starts_and_each_pending_one_is_reported():
    clock = _Clock()
    budget = TimeBudget(10, clock=clock)
    compiled, cut, finished = [], [], []

    def compile_one(key, _strategy):
        compiled.append(key)
        clock.now += 11  # the first compile spends the budget
        return key

    sweep = BoundedSweep([(k, None) for k in "abcd"], {}, (), 1, compile_one,
                         lambda i, outcome: finished.append(outcome.key), None,
                         expired=budget.expired, on_out_of_time=lambda i, entry: cut.append(entry[0]))
    sweep.run(abort=lambda: None)
    assert compiled == ["a"] and finished == ["a"]
    assert cut == ["b", "c", "d"]
    assert sweep.summary.compiled == ["a"]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """A small transformer's Top-3 on v5e:2x2, compiled once into a cache the budgeted runs read."""
    from aoizora.stage1 import run_stage1

    space = TransformerSpace(CFG)
    topo = get_topology("v5e:2x2")
    stage1 = run_stage1(space, topo, top_k=3, progress=False)
    kept = [(e.key, e.candidate.strategy) for e in stage1.kept]
    compile_cache = CompileCache(tmp_path_factory.mktemp("compiled"))
    full = run_stage2(space, kept, topo, Stage2Config(compile_cache=compile_cache, verify_top=0))
    return space, topo, kept, compile_cache, full


def _spending(monkeypatch, clock: _Clock, seconds: float) -> None:
    """Each compile of Stage 2 moves `clock` on by `seconds`."""
    real = compiling.compile_strategy

    def compile_strategy(*args, **kwargs):
        result = real(*args, **kwargs)
        clock.now += seconds
        return result

    monkeypatch.setattr(compiling, "compile_strategy", compile_strategy)


@pytest.mark.slow
def test_stage2_answers_with_what_it_compiled_within_the_budget(small, monkeypatch):
    space, topo, kept, compile_cache, full = small
    assert len(kept) == 3
    clock = _Clock()
    budget = TimeBudget(30, clock=clock)
    _spending(monkeypatch, clock, 31.0)
    result = run_stage2(space, kept, topo, Stage2Config(compile_cache=compile_cache, verify_top=1, budget=budget))
    compiled = [o for o in result.outcomes if o.compiled is not None]
    cut = [o for o in result.outcomes if o.dropped]
    assert [o.key for o in compiled] == [kept[0][0]]
    assert [(o.key, o.dropped) for o in cut] == [(k, NOT_COMPILED) for k, _ in kept[1:]]
    assert budget.record.not_compiled == [k for k, _ in kept[1:]] and budget.record.cut
    # the scores of what was compiled are those of the full sweep
    full_first = next(o for o in full.outcomes if o.key == kept[0][0])
    assert min(s.q2.step_seconds for s in compiled[0].scored) == min(s.q2.step_seconds for s in full_first.scored)


def test_a_compile_the_budget_stops_is_dropped_as_stopped(small, monkeypatch):
    space, topo, kept, _, _ = small
    budget = TimeBudget(5)
    given = []

    def stopped(*args, **kwargs):
        given.append(args[5])  # the limits it was given
        raise CompileTimeout("compile did not finish within 5 s", wall_clock=True)

    monkeypatch.setattr(compiling, "compile_strategy", stopped)
    result = run_stage2(space, kept[:1], topo, Stage2Config(verify_top=0, budget=budget, compile_timeout_s=900))
    assert [o.dropped for o in result.outcomes] == [STOPPED]
    assert budget.record.stopped == [kept[0][0]]
    assert given[0].cpu_s == 900 and 0 < given[0].wall_s <= 5


def test_a_compile_stopped_by_its_own_timeout_is_not_charged_to_the_budget(small, monkeypatch):
    space, topo, kept, _, _ = small
    budget = TimeBudget(3600)

    def timed_out(*args, **kwargs):
        raise CompileTimeout("compile did not finish within 5 s")

    monkeypatch.setattr(compiling, "compile_strategy", timed_out)
    result = run_stage2(space, kept[:1], topo, Stage2Config(verify_top=0, budget=budget, compile_timeout_s=5))
    assert [o.dropped for o in result.outcomes] == ["compile did not finish within 5 s"]
    assert not budget.record.cut


@pytest.mark.slow
def test_a_budgeted_plan_says_what_it_cut_and_is_not_cached(small, monkeypatch, tmp_path):
    from aoizora.plan import planner

    space, topo, _, compile_cache, _ = small
    monkeypatch.setenv("AOIZORA_CACHE_DIR", str(tmp_path / "cache"))
    clock = _Clock()
    monkeypatch.setattr(planner, "TimeBudget", lambda seconds: TimeBudget(seconds, clock=clock))
    _spending(monkeypatch, clock, 31.0)
    result = plan_space(space, topo, top_k=3, compile_cache=compile_cache, progress=False, time_budget_s=30,
                        include_experts=False)
    section = result.plan.data["stage2"]["time_budget"]
    # the first compiles (one per worker) start before the clock moves; the rest are cut
    compiled = result.plan.data["stage2"]["compiled_strategies"]
    assert section["seconds"] == 30 and section["cut"] and section["not_compiled"]
    assert len(compiled) + len(section["not_compiled"]) == 3
    assert any(n.startswith("the time budget of 30 s cut Stage 2 short") for n in result.plan.data["notes"])
    assert cache.degraded(result.plan.data).startswith("the time budget")
    assert cache.lookup(result.plan.data["request"]) is None


def test_with_no_compile_within_the_budget_the_plan_is_stage1s_best_marked_not_compiled_and_not_cached(
        small, monkeypatch, tmp_path):
    from aoizora.plan.plan import Plan
    from aoizora.plan.planner import stage1_fallback_note

    space, topo, _, _, _ = small
    monkeypatch.setenv("AOIZORA_CACHE_DIR", str(tmp_path / "cache"))

    def stopped(*args, **kwargs):
        raise CompileTimeout("compile did not finish", wall_clock=True)

    monkeypatch.setattr(compiling, "compile_strategy", stopped)
    result = plan_space(space, topo, top_k=2, progress=False, time_budget_s=1, include_experts=False)
    d = result.plan.data
    first = result.stage1.kept[0]
    assert d["strategy"]["key"] == first.key  # Stage 1's rank 1
    assert d["prediction"]["basis"] == "q1"
    assert d["prediction"]["step_seconds"] == first.q1.seconds
    assert d["prediction"]["compute_seconds"] == first.q1.compute_seconds
    assert d["prediction"]["collectives"] == [] and len(d["prediction"]["link_bytes"]) == len(topo.links)
    assert d["placement"]["verified_compile"] is False
    assert d["notes"][0] == stage1_fallback_note(1)
    assert d["stage2"]["time_budget"]["nothing_compiled"] and d["stage2"]["time_budget"]["cut"]
    assert all(a["dropped"] for a in d["alternatives"])
    assert cache.degraded(d) and cache.lookup(d["request"]) is None
    assert cache.store(d["request"], result.plan) is None  # refused even when offered
    Plan(d)  # a valid plan (the schema, the consistency checks)
    import io

    from rich.console import Console

    from aoizora.report.tables import print_plan

    out = io.StringIO()
    print_plan(result.plan, console=Console(file=out, width=400))
    assert "(not compiled: Stage 1's Q1 bound; see the note)" in out.getvalue()
    assert "note: not compiled: the time budget of 1 s ran out" in out.getvalue()


def test_without_a_budget_no_compile_is_still_a_planning_error(small, monkeypatch):
    space, topo, _, _, _ = small

    def failed(*args, **kwargs):
        raise CompileTimeout("compile did not finish within 5 s")

    monkeypatch.setattr(compiling, "compile_strategy", failed)
    with pytest.raises(PlanningError, match="none of the 1 strategies compiled"):
        plan_space(space, topo, top_k=1, progress=False, include_experts=False, use_cache=False)


def test_stage2s_progress_line_says_the_time_left_at_the_pace_so_far_within_the_budget(monkeypatch):
    import io

    from rich.console import Console

    from aoizora.plan import planner
    from aoizora.progress import _LineCounter

    now = [0.0]
    monkeypatch.setattr(planner.time, "monotonic", lambda: now[0])
    out = io.StringIO()
    lines = _LineCounter(Console(file=out, force_terminal=False, width=120), "Stage 2", 4, every_s=0.0,
                         clock=lambda: now[0])
    pace = planner._Pace(lines, 4, TimeBudget(100, clock=lambda: now[0]))
    now[0] = 20.0
    pace.done()  # 20 s a compile, 3 left: 60 s
    now[0] = 90.0
    pace.done()  # 45 s a compile, 2 left: 90 s, but 10 s of budget left
    assert out.getvalue().splitlines() == ["Stage 2: 1/4 (20 s, about 60 s left)",
                                           "Stage 2: 2/4 (90 s, about 10 s left)"]
