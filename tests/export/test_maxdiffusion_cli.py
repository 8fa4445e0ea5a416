"""The README's "Run a plan with MaxDiffusion" commands, as written, and the export's bad input."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from aoizora.export import read_command
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.plan import load_plan

pytestmark = [pytest.mark.slow, pytest.mark.tpu_compile]

ROOT = Path(__file__).parents[2]


def _cli(*args: str, cwd: Path | None = None, timeout: float = 900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", "from aoizora.cli import main; main()", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


def _readme_commands() -> list[list[str]]:
    section = (ROOT / "docs" / "guide.md").read_text().split("## Run a plan with MaxDiffusion", 1)[1]
    block = re.search(r"```sh\n(.*?)```", section, re.S).group(1).replace("\\\n", " ")
    return [shlex.split(line) for line in block.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def readme_run(tmp_path_factory):
    """Run the section's commands in a fresh directory (the plan compiles three 1.3B programs)."""
    cwd = tmp_path_factory.mktemp("readme")
    results = []
    for argv in _readme_commands():
        assert argv[0] == "aoizora"
        # the plan as written, less the VAE decode's compile (minutes at 480p; tests/stage2/test_companions.py
        # and tests/plan/test_plan_video_time.py cover it) and the raised limit's check (a slow compile;
        # tests/stage2/test_compile_once.py covers it): this section is about the export
        extra = ["--no-vae-decode", "--no-limit-check"] if argv[1] == "plan" else []
        results.append(_cli(*argv[1:], *extra, cwd=cwd))
    return cwd, results, _readme_commands()


def test_readme_commands_plan_compare_and_export(readme_run):
    cwd, results, commands = readme_run
    for r in results:
        assert r.returncode == 0, r.stderr[-2000:]
    assert "your MaxDiffusion command" in results[0].stdout and "x faster" in results[0].stdout
    plan = load_plan(cwd / "plan.json")
    mine = [e for e in plan.data["baselines"]["experts"] if e["name"] == "your-maxdiffusion-command"]
    given = read_command(commands[0][commands[0].index("--from-maxdiffusion") + 1])
    assert len(mine) == 1 and mine[0]["strategy"].startswith("data=2,context=2 | weights=gathered | attn=allgather")
    assert plan.data["workload"]["name"] == given.model == "wan2.1-t2v-1.3b"
    # what was exported parses back to the plan's strategy, and carries its device order
    spec = json.loads((cwd / "mdx" / "maxdiffusion_plan.json").read_text())
    command = read_command(f"LIBTPU_INIT_ARGS={shlex.quote(spec['libtpu_init_args'])} "
                           + " ".join(shlex.quote(a) for a in spec["argv"]))
    planned = Strategy.from_description(plan.strategy)
    # the scoped-VMEM limit the plan chose with its tile travels as a libtpu flag
    assert command.strategy(4) == Strategy(**{**vars(planned), "scoped_vmem_kib": None})
    assert command.libtpu_args == plan.compiler_flags
    if planned.scoped_vmem_kib is not None:
        assert dict(command.libtpu_args.items)["xla_tpu_scoped_vmem_limit_kib"] == str(planned.scoped_vmem_kib)
    assert spec["device_coords"] == plan.data["placement"]["device_coords"]  # its mesh is MaxDiffusion's order
    assert (cwd / "mdx" / "command.sh").stat().st_mode & 0o111


def test_launcher_check_refuses_devices_that_are_not_the_slice(readme_run):
    cwd = readme_run[0]
    r = subprocess.run([sys.executable, str(cwd / "mdx" / "run_with_plan.py"), "--check"], capture_output=True,
                       text=True, timeout=300, cwd=cwd, env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": "cpu"})
    assert r.returncode == 2
    assert r.stderr.strip().splitlines()[-1].startswith("run_with_plan: error: the plan is for v5e:2x2")


def test_export_refuses_to_overwrite_its_plan(readme_run, tmp_path):
    plan = tmp_path / "maxdiffusion_plan.json"
    plan.write_bytes((readme_run[0] / "plan.json").read_bytes())
    r = _cli("export", str(plan), "--to", "maxdiffusion", "--out", str(tmp_path))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "would overwrite the plan" in r.stderr
    assert json.loads(plan.read_text())["schema_version"]


@pytest.mark.parametrize("args, fragment", [
    (("export", "missing.json", "--to", "maxdiffusion", "--out", "x"), "missing.json"),
    (("export", "p.json", "--to", "vllm", "--out", "x"), "'vllm' is not"),
    (("plan", "--topology", "v5e:2x2", "--from-maxdiffusion", "base_wan_14b.yml attention=nope"), "attention"),
    (("plan", "--topology", "v5e:2x2", "--model", "wan2.1-t2v-14b", "--from-maxdiffusion",
      "base_wan_1_3b.yml ici_context_parallelism=4"), "--model wan2.1-t2v-14b disagrees"),
    (("plan", "--topology", "v5e:2x2"), "--model"),
    (("plan", "--model", "wan2.2-ti2v-5b", "--topology", "v5e:2x2", "--export", "maxdiffusion", "x"),
     "--model: MaxDiffusion ships no config for 'wan2.2-ti2v-5b'"),
])
def test_bad_export_input_is_one_line(tmp_path, args, fragment):
    r = _cli(*args, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and fragment in r.stderr, r.stderr
