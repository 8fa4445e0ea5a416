"""`aoizora plan --objective throughput` planned for real, on the smallest request the suite compiles.

Wan 2.1 1.3B, 480p, 5 frames, Top-1, no verify, no VAE decode, one video per replica, on v5e:1x2 (two
chips of one host, which libtpu compiles as that host's chips): the whole slice against two one-chip
replicas, whose plan is the v5e:1x1 plan `tests/cli/test_compare.py` makes, answered from the test
session's caches when it ran first.
"""

from __future__ import annotations

import json
import shlex

import pytest
from click.testing import CliRunner

from aoizora.cli import cli
from aoizora.plan import load_plan
from aoizora.plan.plan import strict_json_loads
from aoizora.topology import get_topology


@pytest.mark.slow
@pytest.mark.tpu_compile
def test_throughput_plan_of_v5e_1x2_records_its_replicas_and_the_splits_tried(tmp_path):
    out, export = tmp_path / "plan.json", tmp_path / "export"
    result = CliRunner().invoke(cli, [
        "plan", "--model", "wan2.1-t2v-1.3b", "--resolution", "480p", "--frames", "5", "--topology", "v5e:1x2",
        "--objective", "throughput", "--max-videos-per-replica", "1", "--top-k", "1", "--verify-top", "0",
        "--no-vae-decode", "--no-limit-check", "--workers", "1", "--json", "--out", str(out),
        "--export", "maxdiffusion", str(export)],
        catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    doc = strict_json_loads(result.stdout)
    block = doc["replicas"]
    rows = {r["split"]: r for r in block["splits"]}
    assert set(rows) == {"1x v5e:1x2", "2x v5e:1x1"}
    planned = [r for r in block["splits"] if "videos_per_hour" in r]
    assert {r["split"] for r in planned} == set(rows)
    assert block["videos_per_hour"] == max(r["videos_per_hour"] for r in planned)
    assert doc["topology"]["name"] == {1: "v5e:1x2", 2: "v5e:1x1"}[block["count"]]
    assert block["contention"]["checked"] and block["contention"]["shared_links"] == 0
    plan = load_plan(out)
    assert plan.data == json.loads(json.dumps(doc))
    meshes = plan.replica_meshes(get_topology("v5e:1x2").devices)
    assert len(meshes) == block["count"]
    assert len({d.id for m in meshes for d in m.devices.flat}) == 2
    launches = [shlex.split(line) for line in (export / "command.sh").read_text().splitlines()
                if line.endswith("&")]
    assert len(launches) == (block["count"] if block["count"] > 1 else 0)
