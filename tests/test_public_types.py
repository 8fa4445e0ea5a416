"""The public face is typed for its users: mypy, run on a user's script, types every name of
`aoizora.__all__` (none is `Any`), and `import aoizora` leaves the environment as it was."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import aoizora

SRC = Path(aoizora.__file__).parents[1]


@pytest.mark.slow  # mypy analyses the package and jax (~20 s on a 2-core host)
def test_mypy_types_every_public_name(tmp_path):
    names = sorted(aoizora.__all__)
    script = "\n".join(["import aoizora", *(f"reveal_type(aoizora.{n})" for n in names),
                        "x: aoizora.PlanResult = 3", "from aoizora import plan_wan", "reveal_type(plan_wan)", ""])
    (tmp_path / "user.py").write_text(script)
    env = {**os.environ, "MYPYPATH": str(SRC)}
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"),
                           "--follow-imports=silent", "--no-error-summary", "user.py"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    revealed = re.findall(r"user\.py:(\d+): note: Revealed type is \"(.*)\"", done.stdout)
    assert len(revealed) == len(names) + 1, done.stdout + done.stderr
    by_name = {names[int(line) - 2] if int(line) - 2 < len(names) else "from-import": kind for line, kind in revealed}
    assert [n for n, kind in by_name.items() if kind == "Any"] == [], by_name
    assert "aoizora.plan.planner.PlanResult" in by_name["plan_wan"] and by_name["from-import"] == by_name["plan_wan"]
    assert re.search(rf"user\.py:{len(names) + 2}: error: Incompatible types in assignment", done.stdout), done.stdout


def test_import_aoizora_changes_no_environment_variable():
    code = ("import json, os\nbefore = dict(os.environ)\nimport aoizora\nafter_import = dict(os.environ)\n"
            "aoizora.plan_wan, aoizora.Topology, aoizora.Q2Options\n"
            "print(json.dumps([before == after_import, before == dict(os.environ)]))\n")
    env = {k: v for k, v in os.environ.items() if k != "ALLOW_MULTIPLE_LIBTPU_LOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(SRC), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300,
                          check=True)
    assert json.loads(done.stdout.splitlines()[-1]) == [True, True]


def test_dir_lists_the_lazy_names():
    assert set(aoizora.__all__) <= set(dir(aoizora))
    assert {"plan_wan", "PlanResult", "Topology", "get_topology", "Q2Options"} <= set(aoizora.__all__)
