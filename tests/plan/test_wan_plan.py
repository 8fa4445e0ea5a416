"""The planner on the real Wan model: plan, apply, run, explain, and its CLI's bad input."""

import json
import subprocess
import sys

import pytest

from aoizora.models.registry import wan_space
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.plan import load_plan, plan_space
from aoizora.topology import get_topology


def _cli(*args, timeout=900):
    return subprocess.run([sys.executable, "-c", "from aoizora.cli import main; main()", *args],
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def wan_plan(tmp_path_factory):
    """Wan 2.1 1.3B, 480p, 5 frames on v5e:2x2: Stage 1 over the whole space, Top-1 compiled. Planned
    through the test session's caches, which `aoizora compare`'s test of the same request shares."""
    space = wan_space("wan2.1-t2v-1.3b", "480p", 5, generation=None, vae=None)  # no 480p decode compile here
    result = plan_space(space, get_topology("v5e:2x2"), top_k=1, verify_top=0, progress=False)
    path = result.plan.save(tmp_path_factory.mktemp("plan") / "plan.json")
    return result, path


@pytest.mark.tpu_compile
def test_wan_plan_has_strategy_placement_and_baselines(wan_plan):
    result, path = wan_plan
    plan = load_plan(path)
    assert plan.axis_names == ("data", "fsdp", "context", "tensor")
    assert set(plan.strategy) >= {"key", "mesh", "attention", "weights"}
    assert plan.data["workload"]["shapes"]["tokens"] == 2 * 30 * 52  # 5 frames 832x480
    assert plan.data["stage1"]["counts"]["kept"] == 1
    expert = plan.data["baselines"]["expert"]
    assert expert["strategy"].startswith("data=2,context=2") and expert["placement"] == "jax-default"
    assert plan.predicted_step_seconds > 0 and plan.data["prediction"]["timeline"]
    mesh = plan.mesh(get_topology("v5e:2x2").devices)
    assert mesh.devices.shape == plan.axis_sizes


@pytest.mark.tpu_compile
def test_run_check_on_cpu_devices(wan_plan):
    _, path = wan_plan
    out = _cli("run", "--plan", str(path), "--steps", "2", "--check")
    assert out.returncode == 0, out.stderr
    assert "not of a TPU" in out.stdout and "(ok)" in out.stdout


@pytest.mark.tpu_compile
def test_run_on_cpu_devices_leaves_the_weight_tile_to_the_tpu(wan_plan, tmp_path):
    """A plan whose strategy hands its weights over in a TPU tile (as TPU7x plans do) runs its
    sharding on the CPU stand-in, whose small float32 model has no 16-bit weights to tile."""
    _, path = wan_plan
    doc = json.loads(path.read_text())
    doc["strategy"]["weight_tile"] = [16, 128]
    key = Strategy.from_description(doc["strategy"]).key()  # the key restates the strategy
    doc["strategy"]["key"] = doc["baselines"]["same_strategy_jax_default"]["strategy"] = key
    tiled = tmp_path / "plan.json"
    tiled.write_text(json.dumps(doc))
    out = _cli("run", "--plan", str(tiled), "--steps", "1")
    assert out.returncode == 0, out.stderr


@pytest.mark.tpu_compile
def test_explain_writes_html_with_images(wan_plan, tmp_path):
    _, path = wan_plan
    out = _cli("explain", str(path), "--out", str(tmp_path / "report"))
    assert out.returncode == 0, out.stderr
    html = (tmp_path / "report" / "index.html").read_text()
    assert html.count("data:image/png;base64,") == 2
    assert (tmp_path / "report" / "links.png").stat().st_size > 1000


@pytest.mark.slow
def test_stage1_only_json():  # two chips: the JSON's form does not depend on the slice's size
    out = _cli("plan", "--model", "wan2.1-t2v-1.3b", "--topology", "v5e:1x2", "--resolution", "480p",
               "--frames", "5", "--stage1-only", "--json")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    verdicts = {s["verdict"] for s in data["strategies"]}
    assert {"illegal", "kept"} <= verdicts
    kept = [s for s in data["strategies"] if s["verdict"] == "kept"]
    assert all("q1" in s and "memory" in s and "comm_bytes_per_axis" in s for s in kept)
    assert data["counts"]["enumerated"] == len(data["strategies"])


@pytest.mark.slow
@pytest.mark.parametrize(
    "args, fragment",
    [
        (("--model", "wan9", "--topology", "v5e:2x2"), "unknown model"),
        (("--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--frames", "10"), "4n+1"),
        (("--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--resolution", "1000x7"), "multiple of 16"),
        (("--model", "wan2.1-t2v-1.3b", "--topology", "v5e:3x2"), "libtpu does not accept"),
    ],
)
def test_plan_bad_input(args, fragment):
    out = _cli("plan", *args, "--stage1-only", timeout=300)
    assert out.returncode == 2
    lines = [l for l in out.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and fragment in lines[0], out.stderr


@pytest.mark.slow
def test_run_refuses_a_corrupt_plan(tmp_path):
    bad = tmp_path / "plan.json"
    bad.write_text('{"schema_version": 1}')
    out = _cli("run", "--plan", str(bad))
    assert out.returncode == 2 and "not a valid plan" in out.stderr
