"""The MaxDiffusion export of a throughput plan: one launch per replica, each on its own chips (no compile)."""

from __future__ import annotations

import copy
import json
import shlex
from pathlib import Path

import pytest

from aoizora.errors import ExportError
from aoizora.export import exported_files, write_maxdiffusion_export
from aoizora.export import replicas as export_replicas
from aoizora.plan import Plan
from aoizora.plan.replicas import Split, replica_devices

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "docs/data/plans/v5e-2x4_wan2.1-t2v-14b_720p_81f_top3.json"


def replicated(full: str = "v5e:4x4") -> Plan:
    """The committed v5e:2x4 plan as each of the two 2x4 replicas of `full`."""
    doc = copy.deepcopy(json.loads(BASE.read_text()))
    split = Split((4, 4), (2, 4))
    doc["replicas"] = {"objective": "throughput", "slice": full, "count": split.count,
                       "devices": replica_devices(split), "videos_per_replica": 1, "video_seconds": 300.0,
                       "videos_per_hour": 24.0, "contention": {"checked": True, "shared_links": 0}, "splits": []}
    return Plan(doc)


def test_each_replica_gets_its_own_chips_bounds_and_port(tmp_path, monkeypatch):
    monkeypatch.setitem(export_replicas.HOST_CHIPS, "v5e", 16)  # as if one host held the whole 4x4
    plan = replicated()
    write_maxdiffusion_export(plan, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in exported_files(tmp_path))
    script = (tmp_path / "command.sh").read_text()
    launches = [line for line in script.splitlines() if line.endswith("&")]
    assert len(launches) == 2 and script.rstrip().endswith("wait")
    for i, line in enumerate(launches):
        words = shlex.split(line)
        env = dict(w.split("=", 1) for w in words if w.startswith("TPU_"))
        chips = ",".join(map(str, plan.replicas["devices"][i]["chip_ids"]))
        assert env == {"TPU_CHIPS_PER_PROCESS_BOUNDS": "2,4,1", "TPU_PROCESS_BOUNDS": "1,1,1",
                       "TPU_VISIBLE_CHIPS": chips, "TPU_VISIBLE_DEVICES": chips,
                       "TPU_MESH_CONTROLLER_ADDRESS": f"localhost:{8476 + i}",
                       "TPU_MESH_CONTROLLER_PORT": str(8476 + i)}
        assert "skip_jax_distributed_system=true" in words and words[-2:] == ["$@", "&"]
    assert launches[0].split("TPU_VISIBLE_CHIPS=")[1].startswith("0,1,4,5,8,9,12,13")
    # the spec every replica's launcher checks its devices against is the replica's sub-slice
    spec = json.loads((tmp_path / "maxdiffusion_plan.json").read_text())
    assert spec["slice"]["name"] == "v5e:2x4"


def test_a_slice_spanning_hosts_is_refused_before_anything_is_written(tmp_path):
    out = tmp_path / "export"
    with pytest.raises(ExportError, match="more than one v5e host"):
        write_maxdiffusion_export(replicated(), out)
    assert not out.exists() or not any(out.iterdir())


def test_a_plain_plan_exports_one_launch_as_before(tmp_path):
    write_maxdiffusion_export(Plan(json.loads(BASE.read_text())), tmp_path)
    script = (tmp_path / "command.sh").read_text()
    assert "TPU_VISIBLE_CHIPS" not in script and not any(line.endswith("&") for line in script.splitlines())
