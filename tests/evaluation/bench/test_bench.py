"""The bench harness on a small transformer (compiles in about a second per strategy)."""

import json

import numpy as np
import pytest
from click.testing import CliRunner

from aoizora.cli import cli
from aoizora.errors import BenchError
from aoizora.evaluation.bench import BenchOptions, Cell, logical_search, markdown, parse_cell, run_bench, run_cell
from aoizora.evaluation.bench.baselines import AlphaBeta
from aoizora.stage1 import run_stage1
from aoizora.stage2.compile_cache import CompileCache
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

CFG = TransformerConfig(layers=2, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2)
CELL = Cell("v5e:2x2", "480p", 21, model="small-transformer")


@pytest.fixture(scope="module")
def stage1():
    return run_stage1(TransformerSpace(CFG), get_topology("v5e:2x2"), top_k=2, keep_predictions=True, progress=False)


def test_logical_search_minimises_alpha_beta_cost(stage1):
    topo = stage1.topology
    choice = logical_search(stage1, topo)
    costs = dict(choice.ranking)
    assert choice.key == min(costs, key=costs.get)
    assert set(costs) == {e.key for e in stage1.ranked}
    # A slower channel makes communication dominate: the choice moves to the least-communicating strategy.
    slow = logical_search(stage1, topo, AlphaBeta(alpha_s=1e-6, beta_Bps=1e3))
    comm = {e.key: sum(c.recv_bytes * c.multiplicity for c in e.prediction.comms) for e in stage1.ranked}
    assert comm[slow.key] == min(comm.values())


@pytest.fixture(scope="module")
def compile_cache(tmp_path_factory):
    return CompileCache(tmp_path_factory.mktemp("compiled"))


@pytest.fixture(scope="module")
def cell_doc(compile_cache):
    return run_cell(CELL, BenchOptions(top_k=2, oracle=True), compile_cache, progress=False,
                    space=TransformerSpace(CFG))


@pytest.fixture(scope="module")
def exhaustive_doc(compile_cache, cell_doc):
    opts = BenchOptions(top_k=2, oracle=True, oracle_bound=False)
    return run_cell(CELL, opts, compile_cache, progress=False, space=TransformerSpace(CFG))


@pytest.mark.slow
def test_oracle_cell_is_consistent(cell_doc):
    m = cell_doc["metrics"]
    lat = m["latency_seconds"]
    assert lat["expert"] is None  # the generic transformer names no expert deployment
    best = min(cell_doc["pairs"], key=lambda p: p["sim_seconds"])
    assert (m["oracle"]["strategy"], m["oracle"]["placement"]) == (best["strategy"], best["placement"])
    own = cell_doc["oracle_own_compile"]
    if best["placement"] == "jax-default":
        assert own is None and lat["oracle"] == best["sim_seconds"]
    else:  # the oracle's pair is simulated on the program compiled with its own device order
        assert lat["oracle"] == own["sim_seconds"]
    shared = {(p["strategy"], p["placement"]): p["sim_seconds"] for p in cell_doc["pairs"]}
    assert lat["logical"] == shared[(cell_doc["logical"]["strategy"], "jax-default")] >= best["sim_seconds"]
    assert m["oracle_over_aoizora"] == pytest.approx(lat["aoizora"] / lat["oracle"])
    compiled = [s for s in cell_doc["strategies"].values() if "dropped" not in s]
    assert m["pairs_scored"] == sum(s["placements"] for s in compiled) == len(cell_doc["pairs"])
    # every strategy Stage 1 could lower was given to the compiler
    lowered = [k for k, v in cell_doc["stage1"]["verdicts"].items() if v not in ("illegal", "lowering-failed")]
    assert set(cell_doc["strategies"]) | set(cell_doc["pruned_by_q1"]) == set(lowered) - set(cell_doc["skipped"])
    assert m["k_for_full_recall"] == cell_doc["stage1"]["ranks"][m["oracle"]["strategy"]]
    assert m["top1_recall"] is (m["k_for_full_recall"] <= cell_doc["top_k"])
    # Spearman's rho recomputed here as Pearson's r of mid-ranks (ties share their mean rank)
    pairs = cell_doc["pairs"]
    q2 = np.array([p["q2_seconds"] for p in pairs])
    sim = np.array([p["sim_seconds"] for p in pairs])

    def mid_ranks(x):
        return np.array([np.sum(x < v) + (np.sum(x == v) + 1) / 2 for v in x])

    assert m["spearman_q2_sim"] == pytest.approx(np.corrcoef(mid_ranks(q2), mid_ranks(sim))[0, 1], abs=1e-9)
    chosen = [p["sim_seconds"] for p in pairs if p["strategy"] == cell_doc["aoizora"]["strategy"]]
    assert m["placement_spread"] == pytest.approx(max(chosen) / min(chosen))
    assert set(cell_doc["planning_seconds"]) >= {"stage1", "compile", "score", "total"}


@pytest.mark.slow
def test_the_q1_bound_prunes_only_strategies_that_cannot_win(cell_doc, exhaustive_doc):
    """The bounded oracle finds the exhaustive oracle's best pair without compiling what Q1 rules out."""
    bounded, full = cell_doc["metrics"], exhaustive_doc["metrics"]
    assert cell_doc["oracle_bounded"] and not exhaustive_doc["oracle_bounded"]
    assert not exhaustive_doc["pruned_by_q1"] and not cell_doc["q1_bound_violations"]
    pruned = cell_doc["pruned_by_q1"]
    assert pruned and bounded["strategies_pruned_by_q1"] == len(pruned)
    assert bounded["oracle"] == full["oracle"]
    assert bounded["latency_seconds"]["oracle"] == full["latency_seconds"]["oracle"]
    best = {}
    for p in exhaustive_doc["pairs"]:
        best[p["strategy"]] = min(best.get(p["strategy"], float("inf")), p["sim_seconds"])
    q1 = cell_doc["stage1"]["q1_seconds"]
    oracle = min(best.values())
    for key, why in pruned.items():
        assert why["q1_seconds"] == q1[key] >= why["best_sim_seconds"] >= oracle
        assert best[key] >= q1[key]  # the bound held for the strategy that was not compiled
    # everything with a lower Q1 than the first pruned strategy was compiled
    cut = min(why["q1_seconds"] for why in pruned.values())
    assert all(k in cell_doc["strategies"] for k, v in q1.items() if v < cut and k not in cell_doc["skipped"])


def test_a_violated_bound_prunes_nothing(compile_cache, monkeypatch):
    """Should Q1 exceed a compiled strategy's simulated latency, the bound is not trusted."""
    import dataclasses

    from aoizora.evaluation.bench import harness

    real = harness.run_stage1

    def inflated(*args, **kwargs):
        result = real(*args, **kwargs)
        top = result.kept[0]  # compiled by the planner, so scored before any pruning
        top.q1 = dataclasses.replace(top.q1, seconds=top.q1.seconds * 100)
        return result

    monkeypatch.setattr(harness, "run_stage1", inflated)
    doc = run_cell(CELL, BenchOptions(top_k=2, oracle=True), compile_cache, progress=False, space=TransformerSpace(CFG))
    assert doc["q1_bound_violations"] and not doc["pruned_by_q1"]
    lowered = [k for k, v in doc["stage1"]["verdicts"].items() if v not in ("illegal", "lowering-failed")]
    assert set(doc["strategies"]) == set(lowered) - set(doc["skipped"])


@pytest.mark.slow
def test_run_bench_writes_outputs_and_resumes(tmp_path, cell_doc, monkeypatch):
    import aoizora.evaluation.bench.grid_run as bench_run

    calls = []

    def fake_run(cell, opts, cache, **kw):  # the cell computed above stands in for a second run
        calls.append(cell)
        return json.loads(json.dumps(cell_doc))

    monkeypatch.setattr(bench_run, "run_cell_with_fallback", fake_run)
    opts = BenchOptions(top_k=2, oracle=True)
    docs = run_bench([CELL], opts, tmp_path, compile_cache=CompileCache(tmp_path / "c"), progress=False)
    for name in ("results.json", "results.csv", "table.md", "speedups.png", "q2_vs_sim.png", f"cells/{CELL.id}.json"):
        assert (tmp_path / name).stat().st_size > 0
    again = run_bench([CELL], opts, tmp_path, compile_cache=CompileCache(tmp_path / "c"), progress=False)
    assert len(calls) == 1 and again[0]["pairs"] == docs[0]["pairs"]  # reused, not recomputed
    run_bench([CELL], BenchOptions(top_k=3, oracle=True), tmp_path, compile_cache=CompileCache(tmp_path / "c"),
              progress=False)
    assert len(calls) == 2  # other options: recomputed
    run_bench([CELL], BenchOptions(top_k=2, oracle=True, oracle_bound=False), tmp_path,
              compile_cache=CompileCache(tmp_path / "c"), progress=False)
    assert len(calls) == 3  # a bounded oracle does not answer an exhaustive one
    only = run_bench([CELL, Cell("v5e:2x4", "720p", 81)], opts, tmp_path, progress=False, run_missing=False)
    assert len(calls) == 3 and len(only) == 1  # the unfinished cell is left out, nothing runs
    # a report takes the finished cell whichever oracle option it was run with; a run does not
    assert len(run_bench([CELL], BenchOptions(top_k=2, oracle=False), tmp_path, progress=False, run_missing=False)) == 1
    assert len(run_bench([CELL], BenchOptions(top_k=5, oracle=True), tmp_path, progress=False, run_missing=False)) == 1
    with pytest.raises(BenchError, match="no finished cell"):
        run_bench([Cell("v5e:4x4", "720p", 81)], opts, tmp_path, progress=False, run_missing=False)
    table = markdown(docs)
    assert "v5e:2x2 480p 21f" in table and "geomean" in table
    summary = json.loads((tmp_path / "results.json").read_text())["summary"]
    assert summary["cells"] == 1 and summary["cells_with_complete_oracle"] == 1


def test_the_held_out_grid_shares_no_cell_and_no_slice_model_pair_with_the_tuning_grid():
    from aoizora.evaluation.bench import held_out_grid
    from aoizora.evaluation.bench.grid import full_grid

    tuned = {(c.topology, c.model) for c in full_grid()}
    held = held_out_grid()
    assert len(held) >= 6 and not {(c.topology, c.model) for c in held} & tuned
    assert parse_cell("v5e:2x4/480p/81/wan2.1-t2v-1.3b") in held


def test_bad_cells_are_refused():
    with pytest.raises(BenchError, match="TOPOLOGY/RESOLUTION/FRAMES"):
        parse_cell("v5e:2x2-480p")
    result = CliRunner().invoke(cli, ["bench", "--cell", "v5e:9x9/480p/21", "--out", "/tmp/unused-bench"])
    assert result.exit_code == 2 and "v5e:9x9" in result.output


@pytest.mark.slow
def test_a_cell_where_14b_does_not_fit_falls_back_to_1_3b(monkeypatch, cell_doc):
    import aoizora.evaluation.bench.harness as harness
    from aoizora.evaluation.bench.harness import NoStrategyFits, run_cell_with_fallback

    seen = []

    def fake(cell, opts, cache, **kw):
        seen.append(cell.model)
        if cell.model == "wan2.1-t2v-14b":
            raise NoStrategyFits("no wan2.1-t2v-14b strategy fits on v5e:2x2 (arguments alone need ~27 GiB)")
        return json.loads(json.dumps(cell_doc))

    monkeypatch.setattr(harness, "run_cell", fake)
    doc = run_cell_with_fallback(Cell("v5e:2x2", "720p", 81), BenchOptions(top_k=2), CompileCache("/nonexistent"))
    assert seen == ["wan2.1-t2v-14b", "wan2.1-t2v-1.3b"]
    assert "27 GiB" in doc["fallback_reason"]
    assert "(14B does not fit)" in markdown([doc])


@pytest.mark.slow
def test_a_logical_choice_the_compiler_refuses_gives_way_to_the_next(tmp_path, monkeypatch, stage1):
    import aoizora.evaluation.bench.harness as harness

    first, second = [k for k, _ in logical_search(stage1, stage1.topology).ranking[:2]]
    real = harness.compile_strategy  # the same function as aoizora.stage2.compiling.compile_strategy

    def refusing(space, strategy, key, *args, **kw):
        if key == first:
            raise RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory on HBM (test)")
        return real(space, strategy, key, *args, **kw)

    import aoizora.stage2.compiling as stage2

    monkeypatch.setattr(stage2, "compile_strategy", refusing)  # the planner's compiles
    monkeypatch.setattr(harness, "compile_strategy", refusing)  # the bench's own
    doc = run_cell(CELL, BenchOptions(top_k=2, oracle=False), CompileCache(tmp_path), progress=False,
                   space=TransformerSpace(CFG))
    assert doc["logical"]["first_choice"] == first and doc["logical"]["strategy"] == second
    assert doc["strategies"][first]["dropped"].startswith("out of HBM")
    assert doc["metrics"]["latency_seconds"]["logical"] is not None


@pytest.mark.slow
def test_a_compile_that_timed_out_leaves_the_oracle_partial(cell_doc):
    """A refusal for HBM is a verdict (that strategy cannot run); a timeout is a hole in the oracle:
    no recall is claimed, and the contender it hits reads "did not compile", not "does not fit"."""
    import copy

    from aoizora.evaluation.bench.harness import cell_metrics
    from aoizora.evaluation.bench.report import row

    doc = copy.deepcopy(cell_doc)
    assert doc["metrics"]["top1_recall"] is not None
    victim = doc["logical"]["strategy"]
    if victim == doc["aoizora"]["strategy"]:  # keep aoizora's own pairs: time out another strategy
        victim = next(k for k, s in doc["strategies"].items() if "dropped" not in s and k != victim)
    doc["strategies"][victim] = {"dropped": "compile did not finish within 900 s"}
    doc["pairs"] = [p for p in doc["pairs"] if p["strategy"] != victim]
    doc["metrics"] = m = cell_metrics(doc)
    assert m["strategies_failed_to_compile"] == [victim] and m["strategies_refused_by_compiler"] == 0
    assert m["top1_recall"] is None and m["k_for_full_recall"] is None and not m["oracle"]["complete"]
    r = row(doc)
    assert r["oracle_ms"].endswith("*") and r["recall"].startswith("– (oracle partial")
    if victim == doc["logical"]["strategy"]:
        assert r["logical_ms"] == "did not compile"
    assert "1 strategy did not compile" in markdown([doc])


@pytest.mark.slow
def test_report_only_tabulates_published_cells_and_marks_other_code(tmp_path, cell_doc):
    """`bench --report-only` regenerates the table, CSV and plots from committed cells alone (no
    --cell: every file in cells/), and marks a cell another aoizora source computed instead of
    refusing it."""
    import csv
    import math

    from aoizora.evaluation.bench.report import CSV_NUMERIC_COLUMNS, current_source

    cells = tmp_path / "cells"
    cells.mkdir()
    ours = json.loads(json.dumps(cell_doc))
    theirs = json.loads(json.dumps(cell_doc))
    theirs["cell"]["topology"] = "v5e:2x4"
    theirs["aoizora_source"] = "0123456789abcdef"
    (cells / f"{CELL.id}.json").write_text(json.dumps(ours))
    (cells / f"{Cell('v5e:2x4', '480p', 21, model=CELL.model).id}.json").write_text(json.dumps(theirs))

    result = CliRunner().invoke(cli, ["bench", "--report-only", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    table = (tmp_path / "table.md").read_text()
    assert "| v5e:2x2 480p 21f |" in table and "| v5e:2x4 480p 21f † |" in table
    assert "0123456789abcdef" in table and current_source() in table
    for plot in ("speedups.png", "q2_vs_sim.png"):
        assert (tmp_path / plot).stat().st_size > 0

    with (tmp_path / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert [r["topology"] for r in rows] == ["v5e:2x2", "v5e:2x4"]  # grid order, not file order
    assert [r["other_code"] for r in rows] == ["0", "1"]
    for r in rows:
        for column in CSV_NUMERIC_COLUMNS:
            assert r[column] == "" or math.isfinite(float(r[column])), (column, r[column])
    lat = cell_doc["metrics"]["latency_seconds"]
    assert float(rows[0]["aoizora_ms"]) == pytest.approx(lat["aoizora"] * 1e3)
    assert float(rows[0]["oracle_ms"]) == pytest.approx(lat["oracle"] * 1e3)
    assert rows[0]["expert_ms"] == "" and rows[0]["expert_status"] == "absent"  # no expert for this workload
    assert int(rows[0]["top1_recall"]) == int(cell_doc["metrics"]["top1_recall"])
    assert int(rows[0]["pairs_scored"]) == len(cell_doc["pairs"])
    assert int(rows[0]["frames"]) == 21 and int(rows[0]["top_k"]) == cell_doc["top_k"]


def test_a_run_needs_its_cells(tmp_path):
    with pytest.raises(BenchError, match="needs its cells"):
        run_bench(None, BenchOptions(top_k=2), tmp_path, progress=False)


def test_every_expert_deployment_is_scored_against_the_plan(compile_cache, stage1):
    """A generation with two documented deployments: the cell scores both and reports each speedup."""
    from aoizora.workload import ExpertDeployment

    first, second = [e.candidate.strategy for e in stage1.ranked[-2:]]

    class WithExperts(TransformerSpace):
        def expert_deployments(self, topology):
            return [ExpertDeployment("primary", first, ("--xla_enable_async_all_reduce=true",), "repo a @ commit"),
                    ExpertDeployment("other", second, (), "repo b @ commit")]

    doc = run_cell(CELL, BenchOptions(top_k=2, oracle=False), compile_cache, progress=False, space=WithExperts(CFG))
    assert [e["name"] for e in doc["experts"]] == ["primary", "other"]
    assert doc["experts"][0]["libtpu_args"] == ["--xla_enable_async_all_reduce=true"]
    # compiled with its own flags: another program than the strategy without them
    assert doc["expert"]["strategy"] == doc["experts"][0]["strategy"] == f"{first.key} | primary flags"
    m = doc["metrics"]
    assert set(m["expert_latency_seconds"]) == {"primary", "other"}
    assert all(t is not None and t > 0 for t in m["expert_latency_seconds"].values())
    assert m["expert_latency_seconds"]["primary"] == m["latency_seconds"]["expert"]
    assert m["speedup_over_experts"]["primary"] == m["speedup_over_expert"]
    assert m["speedup_over_experts"]["other"] == m["expert_latency_seconds"]["other"] / m["latency_seconds"]["aoizora"]


@pytest.mark.slow
def test_the_search_alone_is_reported_beside_the_shipped_planner(cell_doc):
    """The shipped planner adds the expert deployment to its candidates; the cell also records what
    Stage 1's Top-K alone leads to, scored on the same simulated pairs."""
    alone = cell_doc["aoizora_search_only"]
    m = cell_doc["metrics"]
    shared = {(p["strategy"], p["placement"]): p["sim_seconds"] for p in cell_doc["pairs"]}
    assert m["search_only_latency_seconds"] == shared[(alone["strategy"], alone["placement"])]
    if m["latency_seconds"]["expert"] is not None:
        assert m["speedup_over_expert_search_only"] == pytest.approx(
            m["latency_seconds"]["expert"] / m["search_only_latency_seconds"])
    # the search alone never competes with a deployment it did not see: its choice is a Top-K strategy
    assert cell_doc["stage1"]["ranks"][alone["strategy"]] <= cell_doc["top_k"]


def test_the_search_alone_compiles_what_the_planner_pruned_because_of_an_expert(compile_cache, stage1):
    """The planner prunes by the best Q2 found, the experts' included; the search-only choice is
    the best of Stage 1's strategies alone, so a strategy pruned below that best is compiled for it."""
    from types import SimpleNamespace

    from aoizora.cost import Q2Options
    from aoizora.evaluation.bench.harness import search_only_choice
    from aoizora.stage2.compile_workers import CompileWorkers
    from aoizora.stage2.search import Stage2Config, run_stage2
    from aoizora.stage2.sweep import Stage2Summary

    first, last = stage1.ranked[0], stage1.ranked[-1]
    topo = stage1.topology
    space = TransformerSpace(CFG)
    config = Stage2Config(compile_cache=compile_cache, verify_top=0)
    outcomes = run_stage2(space, [(last.key, last.candidate.strategy)], topo, config).outcomes
    both = run_stage2(space, [(first.key, first.candidate.strategy), (last.key, last.candidate.strategy)], topo,
                      config).outcomes
    expected = min((s for o in both for s in o.scored), key=lambda s: s.q2.step_seconds)
    assert expected.key == first.key  # else this test would not see a missing compile
    # as if an expert's Q2 had pruned Stage 1's first strategy
    planned = SimpleNamespace(outcomes=outcomes, stage2=Stage2Summary(
        pruned={first.key: {"q1_seconds": first.q1.seconds, "best_q2_seconds": first.q1.seconds}}))
    with CompileWorkers(1) as workers:
        alone = search_only_choice(planned, stage1, space, topo, Q2Options(), BenchOptions(top_k=1), compile_cache,
                                   workers)
    assert (alone.key, alone.placement.name) == (expected.key, expected.placement.name)
    assert alone.q2.step_seconds == expected.q2.step_seconds


@pytest.mark.slow
def test_the_logical_baseline_is_simulated_on_its_own_compile_when_it_has_one(cell_doc):
    """On a generation whose program depends on the device order, the logical search's strategy may
    have been compiled over another placement than the JAX order it deploys on: its latency is then
    the simulation of its own compile, not of the shared program on JAX's order."""
    import copy

    from aoizora.evaluation.bench import cell_metrics

    doc = copy.deepcopy(cell_doc)
    key = doc["logical"]["strategy"]
    shared = next(p["sim_seconds"] for p in doc["pairs"] if p["strategy"] == key and p["placement"] == "jax-default")
    assert cell_metrics(doc)["latency_seconds"]["logical"] == shared
    doc["logical"]["own_compile"] = {"strategy": key, "placement": "jax-default", "sim_seconds": 2.5 * shared}
    metrics = cell_metrics(doc)
    assert metrics["latency_seconds"]["logical"] == 2.5 * shared
    assert metrics["speedup_over_logical"] == pytest.approx(2.5 * shared / metrics["latency_seconds"]["aoizora"])
