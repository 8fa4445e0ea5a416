"""The hardware reference suite's entries and runner (benchmarks/hardware), without compiling."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "hardware"
sys.path.insert(0, str(SUITE))

import run  # noqa: E402
from common import Config, PipelineEntry, Prediction, Source, TimedEntry, entry_configs  # noqa: E402


def test_every_entry_cites_its_source_and_setup():
    entries = run.all_entries()
    keys = [e.key for e in entries]
    assert len(keys) == len(set(keys))
    for e in entries:
        s = e.source
        assert s.url or (s.repository and s.path and s.commit and len(s.commit) == 40), e.key
        configs = list(entry_configs(e))
        assert all(c.setup for c in configs), e.key
        if isinstance(e, TimedEntry):
            assert e.measured_s > 0
        elif isinstance(e, PipelineEntry):
            assert len(e.measured_total_s) == len(e.configs) >= 2 and e.steps > 0
        else:
            assert len(e.measured) == len(e.configs) >= 2


def test_a_pipeline_entry_compares_step_differences(monkeypatch):
    """Generation times T_i = outside + steps x s_i: the runner recovers the step differences, the
    time outside the steps and the measured step ratios from the predicted step of the fastest."""
    steps, outside, step_times = 40, 20.0, {"a": 4.0, "b": 4.5, "c": 5.0}
    predicted = {"a": 4.0, "b": 4.2, "c": 5.2}

    def fake_predict(config, cache):
        t = predicted[config.name]
        return Prediction(q2_s=t, sim_s=t, q2_comm_s=0.0, sim_comm_s=0.0, compute_s=t, collectives=[],
                          compile_seconds=0.0, from_cache=True)

    monkeypatch.setattr(run, "predict", fake_predict)
    configs = tuple(Config(n, "v5e:2x2", (("x", 4),), build=lambda mesh: (None, ()), setup=n) for n in "bca")
    totals = tuple(outside + steps * step_times[c.name] for c in configs)
    entry = PipelineEntry("t/pipe", "t", Source(url="https://example.org"), configs, totals, steps)
    out = run.run_pipeline(entry, None)
    assert out["measured_fastest"] == "a" and out["measured_order_fastest_first"] == ["a", "b", "c"]
    assert out["q2_order_fastest_first"] == ["a", "b", "c"]
    assert out["q2_implied_outside_steps_seconds"] == pytest.approx(outside)  # the fastest is predicted exactly
    rows = {r["name"]: r for r in out["configs"]}
    assert rows["b"]["measured_step_difference_seconds"] == pytest.approx(0.5)
    assert rows["b"]["q2_step_difference_seconds"] == pytest.approx(0.2)
    assert rows["c"]["measured_step_ratio_to_fastest_given_q2"] == pytest.approx(5.0 / 4.0)
    assert rows["c"]["q2_step_ratio_to_fastest"] == pytest.approx(5.2 / 4.0)


def test_ironwood_times_follow_the_benchmarks_own_bandwidth_formula():
    # accelerator-microbenchmarks: bandwidth = input bytes x (rank - 1) x 2 / time for its
    # "parallel" replica groups of rank 4; its table lists 0.402653184 GB for N = 16384
    import ironwood_all_gather

    big = [e for e in ironwood_all_gather.entries() if e.key.endswith("N16384")][0]
    assert big.measured_s == pytest.approx(0.402653184e9 / 178.7714158e9, rel=1e-9)


def test_an_entry_the_tree_cannot_build_is_reported_and_the_run_goes_on():
    cfg = Config("nowhere", "v99:2x2", (("x", 4),), build=lambda mesh: (None, ()), setup="a slice no one makes")
    entry = TimedEntry("test/unknown-slice", "unknown slice", Source(url="https://example.org"), cfg, 1e-6)
    result = run.run_entry(entry, cache=None)
    assert result["runnable"] is False and "v99" in result["reason"]
    json.dumps(run._json_safe(result), allow_nan=False)


def test_json_has_no_nan():
    doc = run._json_safe({"a": math.nan, "b": [math.inf, 1.0], "c": {"d": -math.inf}})
    assert json.loads(json.dumps(doc, allow_nan=False)) == {"a": None, "b": [None, 1.0], "c": {"d": None}}




def test_the_wan_table_in_results_is_the_generators_output_on_the_committed_data():
    import wan_table

    root = SUITE.parents[1]
    data = json.loads((root / "docs" / "data" / "hardware" / "wan_on_tpu.json").read_text())
    totals = wan_table.load_totals(root / "docs" / "data" / "hardware" / "wan_totals.json")
    programs = wan_table.load_programs(root / "docs" / "data" / "hardware" / "maxdiffusion_programs.json")
    expected = wan_table.table(wan_table.load([root / "docs" / "data" / "hardware" / "wan_on_tpu.json"]), totals,
                               programs)
    assert expected.count("\n") >= 10
    assert expected in (root / "docs" / "results" / "fidelity.md").read_text()
    # every Wan entry of the suite is in the committed run, and the run says which were fitted
    keys = {e["key"] for e in data["entries"]}
    assert {e.key for e in run.all_entries() if e.key.startswith(wan_table.WAN_SOURCES)} <= keys
    assert {e["basis"] for e in data["entries"]} <= {"held out", "in-sample"}


def test_the_wan_table_reads_each_entry_kind():
    import wan_table

    pipeline = {"key": "maxdiffusion/p", "runnable": True, "kind": "pipeline", "basis": "held out",
                "measured_fastest": "a", "configs": [
                    {"name": "a", "kernel_profile": "jax-splash", "measured_step_ratio_to_fastest_given_q2": 1.0,
                     "q2_step_ratio_to_fastest": 1.0, "sim_step_ratio_to_fastest": 1.0},
                    {"name": "b", "kernel_profile": "tokamax-splash", "measured_step_ratio_to_fastest_given_q2": 1.2,
                     "q2_step_ratio_to_fastest": 1.1, "sim_step_ratio_to_fastest": 1.05}]}
    timed = {"key": "gpu-tpu-pedia/t", "runnable": True, "kind": "timed", "basis": "in-sample",
             "measured_seconds": 4.0, "q2_seconds": 5.0, "sim_seconds": 4.0, "kernel_profile": ""}
    (row,) = wan_table.rows(pipeline)
    assert "step b / a" in row and "| 1.200 | 1.100 | 1.050 | -10.0 pt | tokamax-splash | held out |" in row
    (row,) = wan_table.rows(timed)
    assert "| 4.00 s | 5.00 s | 4.00 s | +25.0 % | jax-splash | in-sample |" in row
    # the totals column: a row per configuration with a total, the prediction or why there is none
    total = {"key": "maxdiffusion/p", "total_published": True, "configs": [
        {"config": "a", "measured_total_seconds": 200.0, "predicted_total_seconds": 210.0, "error": 0.05},
        {"config": "b", "measured_total_seconds": 240.0, "predicted_total_seconds": None,
         "reason": "not predicted: the decode not compiled"}]}
    _, row_a, row_b = wan_table.rows(pipeline, total)
    assert row_a.endswith("| total, a | 200.0 s | | | | jax-splash | held out | 210.0 s (+5.0 %) |")
    assert row_b.endswith("| tokamax-splash | held out | not predicted: the decode not compiled |")
    (row,) = wan_table.rows(timed, {"key": "gpu-tpu-pedia/t", "total_published": False, "reason": "per step"})
    assert row.endswith("| in-sample | per step |")
