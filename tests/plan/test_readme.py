"""The guide's "Planning your own model" example runs as written, with only `devices` substituted."""

import re
from pathlib import Path

import numpy as np

from aoizora.topology import get_topology

DEVICES_LINE = "devices = jax.devices()"


def _example() -> str:
    readme = (Path(__file__).parents[2] / "docs" / "guide.md").read_text()
    section = readme.split("## Planning your own model", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_plan_function_example_from_readme(tmp_path, monkeypatch):
    monkeypatch.setenv("AOIZORA_CACHE_DIR", str(tmp_path))
    code = _example()
    assert code.count(DEVICES_LINE) == 1
    topo = get_topology("v5e:2x4")
    scope: dict = {"_slice_devices": list(reversed(topo.devices))}  # any order: the plan matches coordinates
    exec(compile(code.replace(DEVICES_LINE, "devices = _slice_devices"), "README.md", "exec"), scope)
    plan, mesh = scope["result"].plan, scope["mesh"]

    # Every strategy splits the FLOPs 8 ways; only "data" (weights replicated, batch split) needs no
    # communication, so it is the fastest whatever the placement and the compiled program must show it.
    assert plan.strategy["key"] == "data"
    assert plan.data["prediction"]["collectives"] == []
    others = [a for a in plan.data["alternatives"] if a["strategy"] != "data" and "step_seconds" in a]
    assert others and all(a["step_seconds"] > plan.predicted_step_seconds for a in others)

    # The mesh the example builds puts each device where the plan says.
    assert mesh.axis_names == plan.axis_names and mesh.devices.shape == plan.axis_sizes
    for idx, device in zip(np.ndindex(*plan.axis_sizes), mesh.devices.flat, strict=True):
        assert list(device.coords[:2]) == list(plan.device_coords[idx])


README = Path(__file__).parents[2] / "README.md"
README_LINE_BUDGET = 250  # issue 49: a TPU engineer reads the README in five minutes; reference lives in docs/


def test_readme_fits_its_line_budget():
    lines = README.read_text().splitlines()
    assert len(lines) <= README_LINE_BUDGET, (
        f"README.md has {len(lines)} lines, over its budget of {README_LINE_BUDGET}: "
        "move reference material into docs/")


def test_readme_reads_what_run_output_trust_results_links_in_that_order():
    text = README.read_text()
    marks = ["placement", "make demo", "## What comes out", "## How far to trust the numbers",
             "## Headline results", "## Read more"]
    positions = [text.find(m) for m in marks]
    assert -1 not in positions and positions == sorted(positions), dict(zip(marks, positions, strict=True))
