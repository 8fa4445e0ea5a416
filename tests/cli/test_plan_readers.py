"""Every command that reads a plan refuses an inconsistent one: exit 2, one line naming the field,
nothing written. The loader's breadth is tested in tests/plan/test_plan_consistency.py; here a
sample of its cases goes through each reading command."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from aoizora.cli import cli
from tests.plan.test_plan_consistency import CASES, V5E, committed

#: one case of each kind the battery reported (another slice, reshaped mesh, renamed axes, a
#: strategy whose mesh disagrees, garbage collectives, garbage compiler flags)
SAMPLE = [c for c in CASES if c[0] == V5E and c[2] in {
    "request.topology", "strategy.mesh", "prediction.collectives[0]", "compiler.libtpu_args", "strategy.key",
}]
READERS = {
    "explain": lambda plan, out: ["explain", plan, "--out", out],
    "export": lambda plan, out: ["export", plan, "--to", "maxdiffusion", "--out", out],
    "run": lambda plan, out: ["run", "--plan", plan, "--steps", "1"],
    "measure": lambda plan, out: ["measure", "--plan", plan, "--steps", "1"],
}


@pytest.mark.parametrize("command", sorted(READERS))
@pytest.mark.parametrize("edit,field", [(e, f) for _, e, f in SAMPLE], ids=[f for _, _, f in SAMPLE])
def test_every_plan_reader_refuses_an_inconsistent_plan(tmp_path, command, edit, field):
    doc = committed(V5E)
    edit(doc)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(doc))
    out = tmp_path / "out"
    result = CliRunner().invoke(cli, READERS[command](str(plan), str(out)), catch_exceptions=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and field in lines[0], result.stderr
    assert not out.exists()
