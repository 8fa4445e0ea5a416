"""The plans of today's planner are the plans of `cdef60c`, the commit before the planning-speed
changes (the order probe in place of the verifying recompile, the time budget, the companion
compiles): on the demo's request and three held-out cells, the same strategy (tile and scoped-VMEM
limit are in its key), placement and compiler flags, and a step within 1 %. The demo's plan is also
that of `8ff930f`, the commit before the ring's two layouts and the splash calls' cost estimate
(`planning_speed_ring_layouts.json`), whose timing `docs/results/planning-speed.md` reports.

Each file is one `benchmarks/planning_speed.py` run of a request, planned cold by each tree in turn
(`docs/data/planning/planning_speed.json` and `planning_speed_three_trees.json`: the demo;
`docs/data/planning/plan_equality/`: held-out cells); the tests re-read them with the benchmark's
own check. A file's trees are named by the commit they were checked out at (`trees`); regenerate
it with the benchmark and checkouts of them.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLANNING = ROOT / "docs" / "data" / "planning"
RING_LAYOUTS = PLANNING / "planning_speed_ring_layouts.json"
FILES = [PLANNING / "planning_speed.json", PLANNING / "planning_speed_three_trees.json",
         *sorted((PLANNING / "plan_equality").glob("*.json")), RING_LAYOUTS]
#: the tree each file's other trees are compared with
REFERENCES = {path: "8ff930f" if path == RING_LAYOUTS else "cdef60c" for path in FILES}
#: commits timed beside the others but planned before the tile search: their plans differ by design
TIMED_ONLY = ("f589b5c",)
DEMO = {"model": "wan2.1-t2v-14b", "topology": "v5e:2x4", "resolution": "720p", "frames": 81}


def _benchmark() -> Any:
    spec = importlib.util.spec_from_file_location("planning_speed", ROOT / "benchmarks" / "planning_speed.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


same_plan = _benchmark().same_plan


def _load(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


def test_the_demo_and_three_held_out_cells_are_pinned():
    cells = [{k: _load(p)["request"][k] for k in DEMO} for p in FILES]
    assert DEMO in cells
    assert len({tuple(sorted(c.items())) for c in cells if c != DEMO}) >= 3


@pytest.mark.parametrize("path", FILES, ids=[p.stem for p in FILES])
def test_every_later_tree_plans_what_the_reference_planned(path):
    data = _load(path)
    (ref_name,) = [name for name, commit in data["trees"].items() if commit.startswith(REFERENCES[path])]
    reference = data["runs"][ref_name]
    assert reference and all("error" not in r for r in reference)
    compared = [name for name, commit in data["trees"].items()
                if name != ref_name and not commit.startswith(TIMED_ONLY)]
    assert compared, "no tree to compare with the reference"
    for name in compared:
        for run, ref in zip(data["runs"][name], reference, strict=True):
            assert same_plan(run, ref), (name, run.get("strategy"), run.get("placement"), run.get("step_seconds"))


def test_the_check_refuses_another_strategy_placement_flag_or_step():
    ref = next(iter(_load(FILES[0])["runs"].values()))[0]
    assert same_plan(dict(ref, step_seconds=ref["step_seconds"] * 1.009), ref)
    assert not same_plan(dict(ref, step_seconds=ref["step_seconds"] * 1.011), ref)
    assert not same_plan(dict(ref, strategy=ref["strategy"] + " | vmem=1"), ref)
    assert not same_plan(dict(ref, placement="another"), ref)
    assert not same_plan(dict(ref, libtpu_args=ref["libtpu_args"] + " --xla_tpu_scoped_vmem_limit_kib=1"), ref)
    assert not same_plan({"error": ["failed"]}, ref)


def test_the_compared_trees_are_this_project_history():
    """Every tree a file compares is a commit this checkout descends from (not a local edit)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in FILES:
        for name, commit in _load(path)["trees"].items():
            assert "+" not in commit, (path.name, name, commit)
            ancestor = subprocess.run(["git", "-C", str(ROOT), "merge-base", "--is-ancestor", commit, "HEAD"],
                                      capture_output=True)
            assert ancestor.returncode == 0, (path.name, name, commit)


def test_the_timing_table_of_the_ring_layouts_is_the_data():
    """docs/results/planning-speed.md's medians of the two trees' cold plans are those of the committed runs."""
    import statistics

    runs = _load(RING_LAYOUTS)["runs"]
    text = (ROOT / "docs" / "results" / "planning-speed.md").read_text()
    section = text[text.index("### Planning speed: the demo's cold plan before and after the ring layouts"):]
    for name, commit in _load(RING_LAYOUTS)["trees"].items():
        row = next(line for line in section.splitlines() if line.startswith(f"| `{commit}` |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        walls = [r["wall_s"] for r in runs[name]]
        assert cells[1] == ", ".join(f"{w:.1f}" for w in walls)
        assert float(cells[2]) == round(statistics.median(walls), 1)
        for cell, timing in zip(cells[3:6], ("stage1", "compile_wall", "verify"), strict=True):
            assert float(cell) == round(statistics.median(r["timings"][timing] for r in runs[name]), 1), timing


COMPILE_ONCE = PLANNING / "planning_speed_compile_once.json"


def test_compiled_once_the_demo_chooses_what_cdef60c_chose_and_the_table_is_the_data():
    """One compile per candidate at the flags' limit (`planning_speed_compile_once.json`): the
    same strategy (tile and limit in its key), placement and flags as `cdef60c`, a step that moves
    by design (the splash calibration, the default-limit fusion estimates), and the timing table of
    docs/results/planning-speed.md is that file's."""
    data = _load(COMPILE_ONCE)
    (ref,) = data["runs"]["cdef60c"]
    (run,) = data["runs"]["head"]
    assert all(run[k] == ref[k] for k in ("strategy", "placement", "libtpu_args"))
    assert run["step_seconds"] > ref["step_seconds"] * 1.1
    text = (ROOT / "docs" / "results" / "planning-speed.md").read_text()
    section = text[text.index("### Planning speed: one compile per candidate, at the flags' limit"):]
    for name, commit in data["trees"].items():
        (r,) = data["runs"][name]
        row = next(line for line in section.splitlines() if line.startswith(f"| `{commit}` |"))
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert float(cells[1]) == round(r["wall_s"], 1)
        for cell, timing in zip(cells[2:5], ("stage1", "compile_wall", "verify"), strict=True):
            assert float(cell) == round(r["timings"][timing], 1), timing
        assert float(cells[6]) == round(r["warm_replan_s"], 1)
