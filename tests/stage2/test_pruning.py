"""Stage 2 pruned by Stage 1's bound: the same choice as compiling every kept strategy, fewer compiles."""

import json
from types import SimpleNamespace

import pytest

from aoizora.plan import load_plan, plan_space
from aoizora.plan.planner import compile_record
from aoizora.stage1 import run_stage1
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compile_workers import CompileWorkers
from aoizora.stage2.search import Stage2Config, run_stage2
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

CFG = TransformerConfig(layers=2, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2)


def _best(outcomes):
    pair = min((s for o in outcomes for s in o.scored), key=lambda s: (s.q2.step_seconds, not s.verified))
    return pair.key, pair.placement.name, pair.q2.step_seconds


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """Every legal strategy of a small transformer on v5e:2x2, compiled once (the compile cache
    then serves the pruned runs)."""
    space = TransformerSpace(CFG)
    topo = get_topology("v5e:2x2")
    stage1 = run_stage1(space, topo, top_k=64, progress=False)
    kept = [(e.key, e.candidate.strategy) for e in stage1.kept]
    bounds = {e.key: e.q1.seconds for e in stage1.ranked}
    cache = CompileCache(tmp_path_factory.mktemp("compiled"))
    full = run_stage2(space, kept, topo, Stage2Config(compile_cache=cache, verify_top=1))
    return SimpleNamespace(space=space, topo=topo, stage1=stage1, kept=kept, bounds=bounds, cache=cache, full=full)


@pytest.mark.slow
def test_pruned_stage2_chooses_what_compiling_every_kept_strategy_chooses(small):
    result = run_stage2(small.space, small.kept, small.topo,
                        Stage2Config(compile_cache=small.cache, verify_top=1, lower_bounds=small.bounds))
    outcomes, notes, summary = result.outcomes, result.notes, result.summary
    full_outcomes, full_summary = small.full.outcomes, small.full.summary
    assert not full_summary.pruned and len(full_summary.compiled) == len(small.kept)
    assert _best(outcomes) == _best(full_outcomes)
    assert summary.pruned and len(summary.compiled) < len(small.kept), "the bound prunes on this space"
    assert set(summary.compiled) | set(summary.pruned) == {k for k, _ in small.kept}
    assert not summary.bound_violations
    # compiled in ascending Q1, and everything below the first pruned strategy's Q1 was compiled
    q1 = [small.bounds[k] for k in summary.compiled]
    assert q1 == sorted(q1)
    cut = min(why["q1_seconds"] for why in summary.pruned.values())
    assert all(k in summary.compiled for k, v in small.bounds.items() if v < cut)
    best_q2 = {o.key: min(s.q2.step_seconds for s in o.scored) for o in full_outcomes if o.scored}
    for key, why in summary.pruned.items():
        assert why["q1_seconds"] == small.bounds[key] >= why["best_q2_seconds"] >= _best(full_outcomes)[2]
        assert best_q2[key] >= small.bounds[key]  # the bound held for the strategy that was not compiled
    assert any("not compiled" in n for n in notes)
    assert [o.key for o in outcomes] == [k for k, _ in small.kept if k in summary.compiled]  # kept's order


@pytest.mark.slow
def test_a_violated_bound_prunes_nothing(small):
    """Should a compiled strategy's Q1 exceed its best Q2, the bound is not trusted: nothing more is pruned."""
    full_outcomes = small.full.outcomes
    first = min(small.bounds, key=small.bounds.get)  # compiled first
    own = min(s.q2.step_seconds for o in full_outcomes if o.key == first for s in o.scored)
    # every bound raised by the same amount (the order stays), the first one's above its own Q2
    lift = own * 1.01 - small.bounds[first]
    raised = {k: v + lift for k, v in small.bounds.items()}
    result = run_stage2(small.space, small.kept, small.topo,
                        Stage2Config(compile_cache=small.cache, verify_top=1, lower_bounds=raised))
    notes, summary = result.notes, result.summary
    assert next(iter(summary.bound_violations)) == first  # the first compile shows it
    assert not summary.pruned and len(summary.compiled) == len(small.kept)
    assert any("not trusted" in n for n in notes)


@pytest.mark.slow
def test_baselines_are_compiled_first_and_never_pruned(small):
    """The expert deployments are baselines: compiled whatever their bound, and their Q2 prunes the rest."""
    worst = max(small.bounds, key=small.bounds.get)
    result = run_stage2(small.space, small.kept, small.topo,
                        Stage2Config(compile_cache=small.cache, verify_top=0, lower_bounds=small.bounds,
                                     baselines=[worst]))
    outcomes, summary = result.outcomes, result.summary
    assert summary.compiled[0] == worst and worst not in summary.pruned
    assert any(o.key == worst and o.scored for o in outcomes)


@pytest.mark.slow
def test_a_refused_strategy_gives_its_place_to_the_next_under_pruning(small, monkeypatch):
    """The HBM backfill keeps working with the bound: the next of Stage 1's ranking is compiled in a
    refused strategy's place (and is itself subject to the bound)."""
    import aoizora.stage2.compiling as stage2

    ranked = [e.key for e in small.stage1.ranked]
    real = stage2.compile_strategy

    def refusing(space, strategy, key, *args, **kw):
        if key == ranked[0]:
            raise RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory on HBM (test)")
        return real(space, strategy, key, *args, **kw)

    monkeypatch.setattr(stage2, "compile_strategy", refusing)
    by_key = dict(small.kept)
    result = run_stage2(
        small.space, [(k, by_key[k]) for k in ranked[:2]], small.topo,
        Stage2Config(compile_cache=small.cache, verify_top=0, lower_bounds=small.bounds,
                     reserve=[(k, by_key[k]) for k in ranked[2:]]))
    outcomes, notes, summary = result.outcomes, result.notes, result.summary
    assert summary.compiled[:3] == ranked[:3]
    assert any(f"{ranked[2]}, next in Stage 1's ranking" in n for n in notes)
    assert [o.key for o in outcomes][:3] == ranked[:3] and outcomes[0].dropped.startswith("out of HBM")


@pytest.mark.slow
def test_the_plan_records_what_was_compiled_and_pruned(small, tmp_path):
    result = plan_space(small.space, small.topo, top_k=64, verify_top=1, use_cache=False, progress=False,
                        compile_cache=small.cache, stage1=small.stage1)
    section = result.plan.data["stage2"]
    assert section == json.loads(json.dumps({**result.stage2.to_json(), **compile_record(result.outcomes)}))
    assert section["compile_placements"] and set(section["compile_placements"]) <= set(section["compiled_strategies"])
    assert section["compiles"] + len(section["pruned_by_q1"]) == len(small.kept)
    assert section["pruned_by_q1"] and not section["q1_bound_violations"]
    chosen = (result.plan.strategy["key"], result.plan.data["placement"]["name"], result.plan.predicted_step_seconds)
    assert chosen[:2] == _best(small.full.outcomes)[:2]
    assert chosen[2] == pytest.approx(_best(small.full.outcomes)[2], rel=1e-12)
    again = load_plan(result.plan.save(tmp_path / "plan.json"))  # the schema takes the section
    assert again.data["stage2"] == section


@pytest.mark.slow
def test_parallel_compiles_give_the_sequential_result(small, tmp_path):
    """Two compiles in flight (in child processes, on an empty compile cache): the same chosen pair
    and Q2 as one at a time; anything compiled beyond the sequential set has a Q1 that cannot win."""
    sequential = run_stage2(small.space, small.kept, small.topo,
                            Stage2Config(compile_cache=small.cache, verify_top=1, lower_bounds=small.bounds))
    with CompileWorkers(2) as two:
        parallel = run_stage2(small.space, small.kept, small.topo,
                              Stage2Config(compile_cache=CompileCache(tmp_path), verify_top=1,
                                           lower_bounds=small.bounds),
                              executor=two)
    assert _best(parallel.outcomes) == _best(sequential.outcomes)
    seq, par = sequential.summary, parallel.summary
    assert par.workers == 2 and set(seq.compiled) <= set(par.compiled)
    assert all(small.bounds[k] >= _best(sequential.outcomes)[2] for k in set(par.compiled) - set(seq.compiled))
    assert set(par.pruned) <= set(seq.pruned)
    assert [o.key for o in parallel.outcomes] == [k for k, _ in small.kept if k in par.compiled]  # kept's order
    assert all(not o.compiled.from_cache for o in parallel.outcomes)  # compiled here, not read back


@pytest.mark.slow
def test_ctrl_c_during_parallel_compiles_stops_every_child(small, tmp_path):
    """Interrupted while two compiles are in flight: run_stage2 returns at once (it does not wait
    for the compiles) and no child process is left compiling."""
    import os
    import signal
    import threading
    import time

    class Interrupted(Exception):
        pass

    def interrupt(*_):
        raise Interrupted

    compiling = threading.Semaphore(0)

    class Watched(CompileWorkers):
        def compile(self, job, timeout_s):
            compiling.release()
            return super().compile(job, timeout_s)

    def interrupt_when_two_compile():
        # both threads have handed a job to a fresh child, which still has its imports (seconds)
        # and the compile ahead of it: the interrupt lands while both children work, on any host
        for _ in range(2):
            if not compiling.acquire(timeout=120):
                return
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    workers = Watched(2)
    previous = signal.signal(signal.SIGINT, interrupt)
    timer = threading.Thread(target=interrupt_when_two_compile, daemon=True)
    try:
        timer.start()
        t0 = time.perf_counter()
        with pytest.raises(Interrupted):
            run_stage2(small.space, small.kept, small.topo,
                       Stage2Config(compile_cache=CompileCache(tmp_path), verify_top=0), executor=workers)
        assert time.perf_counter() - t0 < 60
    finally:
        timer.join(130)
        signal.signal(signal.SIGINT, previous)
    assert workers.pids
    for pid in workers.pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.slow
def test_compile_cache_hits_start_no_child_process(small, monkeypatch):
    """The parent looks a program up in the compile cache before any child is started."""
    import aoizora.stage2.compile_workers as compile_workers

    def no_child():
        pytest.fail("a compile process was started for a program in the compile cache")

    monkeypatch.setattr(compile_workers, "_Child", no_child)
    with CompileWorkers(2) as two:
        outcomes = run_stage2(small.space, small.kept, small.topo,
                              Stage2Config(compile_cache=small.cache, verify_top=1, lower_bounds=small.bounds),
                              executor=two).outcomes
    assert outcomes and all(o.compiled.from_cache for o in outcomes)


def test_a_freed_worker_starts_the_next_strategy_while_the_finished_one_is_scored():
    """The bench simulates every placement of a compiled strategy when its compile finishes (a
    minute on a 4x4 slice): with two workers, the next compile starts before that scoring, so
    both workers stay busy. The scoring of the first finished strategy here waits for the third
    strategy's compile to start; a sweep that scores before refilling the freed worker never
    starts it, and the wait times out."""
    import threading

    from aoizora.stage2.sweep import BoundedSweep

    third_started = threading.Event()
    started_during_scoring = []

    def compile_one(key, _strategy):
        if key == "c":
            third_started.set()
        return key

    def finish(i, outcome):
        if not started_during_scoring:
            started_during_scoring.append(third_started.wait(timeout=10))

    sweep = BoundedSweep([(k, None) for k in "abcd"], {}, (), 2, compile_one, finish, None)
    sweep.run(abort=lambda: None)
    assert started_during_scoring == [True]
    assert sweep.summary.compiled == list("abcd")
