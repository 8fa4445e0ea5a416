"""`aoizora plan` on a Wan 2.2 two-expert model: the plan states both experts and their HBM."""

import json
import subprocess
import sys

import pytest

from aoizora.models.registry import pipeline_config
from aoizora.models.wan.space.pipeline_space import expert_bytes_per_device
from aoizora.models.wan.transformer.strategy import Strategy


def _cli(*args, timeout=900):
    return subprocess.run([sys.executable, "-c", "from aoizora.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
def test_stage1_only_json_counts_both_experts():
    out = _cli("plan", "--model", "wan2.2-t2v-a14b", "--topology", "v5e:2x2", "--resolution", "480p",
               "--frames", "5", "--stage1-only", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    pipe = data["workload"]["pipeline"]
    assert [e["role"] for e in pipe["experts"]] == ["high-noise", "low-noise"] and pipe["boundary_ratio"] == 0.875
    assert pipe["expert_residency"] == "both" and data["workload"]["scheduler"]["shift"] == 12.0
    experts = data["experts"]
    assert experts["count"] == 2 and experts["both_resident"] and experts["host_to_device_Bps"] == 1.5e10
    ranked = [s for s in data["strategies"] if s["rank"] is not None]
    assert ranked
    cfg = pipeline_config("wan2.2-t2v-a14b").transformer
    for s in ranked:  # every fitting strategy holds two experts' shards as arguments
        st = Strategy.from_axis_sizes(s["strategy"]["mesh"], attention=s["strategy"]["attention"],
                                      weights=s["strategy"]["weights"])
        assert s["memory"]["argument_bytes"] >= 2 * expert_bytes_per_device(cfg, st)
        assert s["strategy"]["expert_bytes_per_device"] == expert_bytes_per_device(cfg, st)
    # two 14B experts cannot both sit replicated on a 16 GiB chip: those strategies are over HBM
    replicated = [s for s in data["strategies"]
                  if s["strategy"]["weights"] == "replicated" and s["verdict"] != "illegal"]
    assert replicated and all(s["verdict"] == "out-of-memory" for s in replicated)
