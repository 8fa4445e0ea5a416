"""`aoizora measure --per-device/--splash` on a host without a TPU: one line, exit 2, nothing written."""

from __future__ import annotations

from click.testing import CliRunner

from aoizora.cli import cli


def _invoke(*args: str):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def test_without_a_tpu_the_chip_measurements_are_refused_in_one_line(tmp_path):
    out = tmp_path / "measured.json"
    for flag in ("--per-device", "--splash"):
        result = _invoke("measure", flag, "--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--out", str(out),
                         "--report", str(tmp_path / "report"))
        lines = [line for line in result.stderr.splitlines() if line.strip()]
        assert result.exit_code == 2, result.output
        assert len(lines) == 1 and "no TPU is attached" in lines[0], result.stderr
    assert not out.exists() and not (tmp_path / "report" / "measured.html").exists()


def test_a_request_needs_its_model_and_slice():
    result = _invoke("measure", "--per-device")
    assert result.exit_code == 2
    assert "--model and --topology" in result.stderr
