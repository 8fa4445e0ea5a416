"""The hardware suite's column of MaxDiffusion's own programs (benchmarks/hardware/maxdiffusion_programs.py
and `wan_table.py --maxdiffusion-programs`), without MaxDiffusion and without compiling."""

from __future__ import annotations

import json
import sys
from pathlib import Path

SUITE = Path(__file__).resolve().parents[2] / "benchmarks" / "hardware"
sys.path.insert(0, str(SUITE))

import maxdiffusion_programs  # noqa: E402
import run  # noqa: E402
import wan_table  # noqa: E402
from common import entry_configs  # noqa: E402

ROOT = SUITE.parents[1]
PARENT = "4e694cebe7ab75a633ee818819f59b842a128cce"  # 226ed266's parent: its all-to-all Ulysses


def _program_configs():
    for entry in run.all_entries():
        for config in entry_configs(entry):
            if config.program is not None:
                yield entry, config


def test_each_run_names_a_commit_of_its_source_and_the_strategy_it_lowers():
    found = list(_program_configs())
    assert len(found) >= 10
    for entry, config in found:
        repository, commit, settings = config.program
        assert repository == maxdiffusion_programs.REPOSITORY and len(commit) == 40
        # the source's commit or, for 226ed266's first form, its parent (a pull request names its head or merge)
        assert commit in (entry.source.commit, PARENT) or entry.source.commit is None, entry.key
        assert config.workload is not None and dict(settings)["attention"], entry.key


def test_the_runs_of_one_commit_are_compiled_together_and_the_others_listed():
    here, elsewhere = maxdiffusion_programs.configs_to_compile(PARENT)
    assert {k for k, _ in here} >= {"maxdiffusion/wan22-v7-8-no-flags", "maxdiffusion/wan22-v7-8-flags"}
    assert ("maxdiffusion/wan22-v7-8-ulysses-forms", "ulysses-all-to-all") in {(k, c.name) for k, c in here}
    assert all(c.program[1] != PARENT for _, c in elsewhere) and elsewhere
    # the 226ed266 entry's other forms are that commit's, not its parent's
    assert ("maxdiffusion/wan22-v7-8-ulysses-forms", "ulysses-constraint") in {(k, c.name) for k, c in elsewhere}


def test_a_run_replaces_the_records_of_its_configurations_and_keeps_the_others(tmp_path):
    path = tmp_path / "programs.json"
    old = {"runs": [{"maxdiffusion_commit": "a"}, {"maxdiffusion_commit": "b"}],
           "records": [{"entry": "e", "config": "x", "q2_seconds": 1.0},
                       {"entry": "e", "config": "y", "q2_seconds": 2.0}]}
    path.write_text(json.dumps(old))
    doc = maxdiffusion_programs.merge(path, [{"entry": "e", "config": "y", "q2_seconds": 3.0}],
                                      {"maxdiffusion_commit": "b", "aoizora_commit": "new"})
    assert [r["q2_seconds"] for r in doc["records"]] == [1.0, 3.0]
    assert doc["runs"] == [{"maxdiffusion_commit": "a"}, {"maxdiffusion_commit": "b", "aoizora_commit": "new"}]


PIPELINE = {"key": "maxdiffusion/p", "runnable": True, "kind": "pipeline", "basis": "held out", "steps": 40,
            "measured_fastest": "a", "configs": [
                {"name": "a", "kernel_profile": "jax-splash", "measured_total_seconds": 200.0,
                 "measured_step_ratio_to_fastest_given_q2": 1.0, "q2_step_ratio_to_fastest": 1.0,
                 "sim_step_ratio_to_fastest": 1.0},
                {"name": "b", "kernel_profile": "jax-splash", "measured_total_seconds": 240.0,
                 "measured_step_ratio_to_fastest_given_q2": 1.2, "q2_step_ratio_to_fastest": 1.1,
                 "sim_step_ratio_to_fastest": 1.05}]}


def test_the_column_compares_ratios_on_maxdiffusions_programs_with_the_measured_ones():
    programs = {("maxdiffusion/p", "a"): {"compiled": True, "q2_seconds": 4.0, "commit": PARENT},
                ("maxdiffusion/p", "b"): {"compiled": True, "q2_seconds": 5.0, "commit": PARENT}}
    (row,) = wan_table.rows(PIPELINE, None, programs)
    # measured: 1 + (240 - 200) / (40 x 4.0) = 1.25 with this program's step of the fastest
    assert row.endswith("| held out | | 1.250 (+0.0 pt) |")
    table = wan_table.table([PIPELINE], None, programs)
    assert table.splitlines()[0].endswith(f"| {wan_table.PROGRAM_COLUMN[0]} |")
    assert table.splitlines()[1].count("|") == table.splitlines()[2].count("|")


def test_a_figure_whose_programs_did_not_compile_says_so_and_one_not_tried_is_blank():
    failed = {("maxdiffusion/p", "b"): {"compiled": False, "reason": "libtpu refused", "commit": PARENT}}
    (row,) = wan_table.rows(PIPELINE, None, failed)
    assert row.endswith(f"| not compiled at {PARENT[:8]} |")
    (row,) = wan_table.rows(PIPELINE, None, {})
    assert row.endswith("| held out | | |")
    (row,) = wan_table.rows(PIPELINE)  # no column without the records
    assert row.endswith("| held out | |")


def test_the_committed_records_are_configurations_of_the_suite_compiled_at_their_commits():
    # the table in docs/results/fidelity.md is checked with this column in test_hardware_suite.py
    programs = wan_table.load_programs(ROOT / "docs" / "data" / "hardware" / "maxdiffusion_programs.json")
    compiled = [r for r in programs.values() if r["compiled"]]
    assert compiled and all(r["q2_seconds"] > 0 and r["commit"] for r in compiled)
    suite = {(e.key, c.name): c.program[1] for e, c in _program_configs()}
    assert set(programs) <= set(suite)  # every record is a configuration of the suite, at its commit
    assert all(r["commit"] == suite[key] for key, r in programs.items())
    # each compiled program's attention calls are costed by its kernel profile (other custom calls, such
    # as the SparseCore relayouts, from their I/O)
    assert all(r["kernel_calls"].get("by_profile", 0) > 0 for r in compiled)
    # the rotary-table adjustment is recorded where the commit's step takes the (complex) table, whose
    # halves then enter through custom calls, and not where the step computes the table itself
    assert all(bool(r["adjustments"]) == ("from_io" in r["kernel_calls"]) for r in compiled)
