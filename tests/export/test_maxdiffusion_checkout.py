"""Every committed plan's export against MaxDiffusion's real code: its `pyconfig` parses the
exported command, and its mesh is built through the launcher on CPU devices
(`maxdiffusion_parse.py`). Runs when MAXDIFFUSION_DIR names a MaxDiffusion checkout whose
requirements are installed (CONTRIBUTING.md says how); skipped otherwise."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aoizora.export import write_maxdiffusion_export
from aoizora.plan import load_plan

ROOT = Path(__file__).parents[2]
PLANS = sorted((ROOT / "docs" / "data" / "plans").rglob("*.json"))
CHECKOUT = os.environ.get("MAXDIFFUSION_DIR")

pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not CHECKOUT, reason="MAXDIFFUSION_DIR is not set: set it to a MaxDiffusion checkout with its requirements "
                         "installed to parse the exports with MaxDiffusion's own pyconfig")]


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.relative_to(ROOT / "docs/data/plans").as_posix())
def test_maxdiffusion_parses_the_export_and_builds_the_planned_mesh(path, tmp_path):
    checkout = Path(CHECKOUT or "")
    assert (checkout / "src/maxdiffusion/pyconfig.py").is_file(), f"MAXDIFFUSION_DIR={checkout} is not a checkout"
    plan = load_plan(path)
    run = write_maxdiffusion_export(plan, tmp_path)
    spec = json.loads((tmp_path / "maxdiffusion_plan.json").read_text())
    devices = len(np.asarray(spec["device_coords"]).reshape(-1, np.asarray(spec["device_coords"]).shape[-1]))
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("maxdiffusion_parse.py")), str(tmp_path)],
                       cwd=checkout, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    overrides = dict(run.overrides)
    assert got["attention"] == overrides["attention"]
    assert got["flash_block_sizes"] == json.loads(overrides["flash_block_sizes"])
    assert got["ici"] == spec["ici_parallelism"] and got["mesh_axes"] == spec["mesh_axes"]
    assert got["mesh_shape"] == [spec["ici_parallelism"][f"ici_{a}_parallelism"] for a in spec["mesh_axes"]]
    planned = np.asarray(spec["device_coords"])
    assert got["coords"] == planned.reshape(-1, planned.shape[-1]).tolist()  # the plan's device at every position
