"""`aoizora hlo FILE --json` on a live-compiled 2-way sharded matmul, stdin, and bad input."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from aoizora.cli import cli
from tests.hlo import programs


@pytest.fixture(scope="module")
def hlo_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("hlo") / "matmul.hlo"
    path.write_text(programs.matmul_allreduce_2way().as_text())
    return path


def test_cli_reports_all_reduce_payload_exactly(hlo_file):
    res = CliRunner().invoke(cli, ["hlo", str(hlo_file), "--json"])
    assert res.exit_code == 0, res.output
    rep = json.loads(res.output)
    (ar,) = rep["collectives"]
    assert ar["kind"] == "all-reduce"
    assert ar["groups"] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert ar["bytes_per_device"] == 128 * 512 * 2  # bf16[128,512] partial sums
    assert ar["send_bytes_per_device"] == 128 * 512 * 2  # 2*(N-1)/N with N=2
    assert ar["count"] == 1
    assert ar["algorithm"]["emitter"]
    assert rep["totals"]["collective_bytes_per_device"] == 128 * 512 * 2
    assert rep["totals"]["flops"] >= 2 * 128 * 512 * 128
    assert rep["opaque"] == [] and rep["unknown_ops"] == []


def test_cli_reads_stdin_and_prints_text(hlo_file):
    res = CliRunner().invoke(cli, ["hlo", "-"], input=hlo_file.read_text())
    assert res.exit_code == 0, res.output
    assert "all-reduce" in res.output and str(128 * 512 * 2) in res.output


def test_cli_bad_input_is_one_line_exit_2(tmp_path):
    bad = tmp_path / "bad.hlo"
    bad.write_text("HloModule m\n\nENTRY %e () -> f32[] {\n  ROOT %x = f32[] add(\n")
    res = CliRunner().invoke(cli, ["hlo", str(bad)])
    assert res.exit_code == 2
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "line 5, column 1" in lines[0] and "column" in lines[0]
    res = CliRunner().invoke(cli, ["hlo", str(tmp_path / "missing.hlo")])
    assert res.exit_code == 2
