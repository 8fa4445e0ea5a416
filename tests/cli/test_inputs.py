"""Bad input to every command: one line saying what to do, exit 2, checked before any long work,
nothing half-written; strict JSON; Ctrl-C exits 130."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
from click.testing import CliRunner

from aoizora.cli import cli
from tests.plan.plan_doc import plan_doc

# without the VAE decode's compile (minutes at 480p), which is not what these tests check
PLAN = ("plan", "--no-vae-decode", "--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--resolution", "480p",
        "--frames", "5")


def invoke(*args):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False)


def one_line(result, fragment: str, code: int = 2) -> str:
    """The single non-empty stderr line of a refused call; checks its exit code and fragment."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == code, result.output
    assert len(lines) == 1, result.stderr
    assert fragment in lines[0], lines[0]
    return lines[0]


def strict_loads(text: str):
    def refuse(name):
        raise ValueError(f"{name} in --json output")

    return json.loads(text, parse_constant=refuse)


@pytest.fixture()
def plan_file(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_doc()))
    return path


# --- output paths are checked before planning starts -----------------------------------------------
@pytest.mark.parametrize(
    "extra, fragment",
    [
        (("--out", "/etc/passwd/plan.json"), "/etc/passwd is not a directory"),
        (("--report", "/etc/passwd/report"), "/etc/passwd is not a directory"),
        (("--out", "/proc/aoizora/plan.json"), "cannot be written"),
        (("--out", "{tmp}"), "is a directory"),
        (("--report", "{tmp}/file"), "is a file"),
        (("--stage1-only", "--out", "{tmp}/p.json"), "--stage1-only makes no plan to write"),
        (("--stage1-only", "--report", "{tmp}/r"), "--stage1-only makes no plan to write"),
    ],
)
def test_plan_refuses_unwritable_outputs_before_stage1(tmp_path, monkeypatch, extra, fragment):
    import aoizora.stage1

    (tmp_path / "file").write_text("x")
    monkeypatch.setattr(aoizora.stage1, "run_stage1", lambda *a, **k: pytest.fail("Stage 1 started"))
    t0 = time.perf_counter()
    result = invoke(*PLAN, *(e.format(tmp=tmp_path) for e in extra))
    one_line(result, fragment)
    assert time.perf_counter() - t0 < 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]  # nothing created, no probe left


@pytest.mark.parametrize("command", [("explain", "{plan}"), ("bench", "--quick")])
def test_explain_and_bench_refuse_unwritable_out_dirs(plan_file, command):
    result = invoke(*(c.format(plan=plan_file) for c in command), "--out", "/etc/passwd/out")
    one_line(result, "/etc/passwd is not a directory")


# --- plan: Stage 1 alone says when nothing fits; option values are checked ------------------------
def test_stage1_only_says_when_nothing_fits():
    result = invoke(*PLAN[:-1], "1000001", "--stage1-only", "--json")
    assert strict_loads(result.stdout)["counts"]["kept"] == 0
    one_line(result, "use a larger slice")


@pytest.mark.parametrize(
    "args, fragment",
    [
        (("--compile-timeout", "-5"), "not a positive number of seconds"),
        (("--compile-timeout", "nan"), "not a positive number of seconds"),
        (("--compile-timeout", "inf"), "not a positive number of seconds"),
        (("--compile-timeout", "soon"), "not a number of seconds"),
        (("--top-k", "0"), "--top-k"),
        (("--frames", "x"), "'x' is not a valid integer"),
        (("--frames", "0"), "not positive; use 4n+1 frames"),
        (("--frames", "-1"), "not positive; use 4n+1 frames"),
        (("--frames", "7"), "use e.g. 5 or 9"),
        (("--resolution", "1000x7"), "use e.g. 992x16"),
        (("--resolution", "9" * 5000 + "x16"), "malformed resolution"),
        (("--bogus",), "No such option"),
    ],
)
def test_plan_option_values_are_one_line(args, fragment):
    line = one_line(invoke(*PLAN, "--stage1-only", *args), fragment)
    assert "Usage:" not in line


def test_unknown_command_and_group_option_are_one_line():
    one_line(invoke("plna"), "No such command")
    one_line(invoke("--bogus"), "No such option")


# --- plan files: inconsistent, not UTF-8 ----------------------------------------------------------
@pytest.mark.parametrize("command", [("run", "--plan", "{plan}"), ("measure", "--plan", "{plan}"),
                                     ("explain", "{plan}", "--out", "{out}")])
@pytest.mark.parametrize(
    "content, fragment",
    [
        (b"\xff\xfe{", "is not UTF-8 text"),
        (json.dumps({**plan_doc(), "mesh": {"axis_names": ["a", "b", "c"], "axis_sizes": [1, 1, 2, 2]}}).encode(),
         "names 3 mesh axes but gives 4 sizes"),
        (json.dumps({**plan_doc(), "topology": {**plan_doc()["topology"], "name": "v5e:2x4"}}).encode(),
         "gives shape 2x2"),
    ],
)
def test_bad_plan_files_are_one_line_and_leave_nothing(tmp_path, command, content, fragment):
    path = tmp_path / "plan.json"
    path.write_bytes(content)
    out = tmp_path / "report"
    one_line(invoke(*(c.format(plan=path, out=out) for c in command)), fragment)
    assert not out.exists()


def test_explain_interrupted_leaves_no_half_report(plan_file, tmp_path, monkeypatch):
    import aoizora.report.html as html

    def interrupted(plan, topo, panels, out):
        (out / "links.png").write_bytes(b"png")
        raise KeyboardInterrupt

    monkeypatch.setattr(html, "_write_files", interrupted)
    out = tmp_path / "report"
    one_line(invoke("explain", str(plan_file), "--out", str(out)), "interrupted", code=130)
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["plan.json"]


def test_explain_replaces_a_previous_report_whole(plan_file, tmp_path):
    out = tmp_path / "report"
    out.mkdir()
    (out / "index.html").write_text("old")
    (out / "notes.txt").write_text("mine")
    result = invoke("explain", str(plan_file), "--out", str(out))
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["index.html", "links.png", "notes.txt", "timeline.png"]
    assert "data:image/png;base64," in (out / "index.html").read_text()


# --- HLO input: rank and hlo ---------------------------------------------------------------------
ALL_REDUCE = """HloModule m, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %e (p: f32[1024]) -> f32[1024] {
  %p = f32[1024] parameter(0)
  ROOT %r = f32[1024] all-reduce(%p), channel_id=1, replica_groups=GROUPS, use_global_device_ids=true, to_apply=%add
}
"""


@pytest.mark.parametrize(
    "groups, mesh, fragment",
    [
        ("{{0,5},{2,9}}", "x=2,y=2", "names device(s) [5, 9] but the module has 4"),
        ("{{0,1},{0,1}}", "x=2,y=2", "more than one replica group"),
        ("{{0,3},{1,2}}", "x=2,y=2", "no axes of mesh x=2,y=2 form"),
        ("{{0,1,2},{3}}", "x=4", "no axes of mesh x=4 form"),
    ],
)
def test_rank_refuses_groups_that_do_not_fit(tmp_path, groups, mesh, fragment):
    path = tmp_path / "p.hlo"
    path.write_text(ALL_REDUCE.replace("GROUPS", groups))
    one_line(invoke("rank", "--hlo", str(path), "--topology", "v5e:2x2", "--mesh", mesh, "--no-sim"), fragment)


def test_rank_accepts_groups_along_part_of_an_axis(tmp_path):
    """libtpu's programs of a context=4 strategy all-gather over pairs of that axis."""
    path = tmp_path / "p.hlo"
    path.write_text(ALL_REDUCE.replace("GROUPS", "{{0,1},{2,3}}"))
    result = invoke("rank", "--hlo", str(path), "--topology", "v5e:2x2", "--mesh", "context=4", "--no-sim", "--json")
    assert result.exit_code == 0, result.output
    assert strict_loads(result.stdout)["placements"]


def test_deeply_nested_hlo_is_one_line(tmp_path):
    path = tmp_path / "deep.hlo"
    depth = 5000
    path.write_text("HloModule m\n\nENTRY %e () -> f32[] {\n  ROOT %x = " + "(" * depth + "f32[]" + ")" * depth
                    + " constant(0)\n}\n")
    line = one_line(invoke("hlo", str(path)), "nested deeper than")
    assert "pass compiled HLO text" in line


# --- strict JSON ---------------------------------------------------------------------------------
def test_validate_json_is_strict_with_reasons_for_undefined_statistics():
    result = invoke("validate", "--topology", "v5e:2x2", "--mesh", "sp=2,tp=2", "--suite", "micro", "--json")
    assert result.exit_code == 0, result.output
    doc = strict_loads(result.stdout)
    tied = [row for row in doc["per_program"].values() if row["spearman"] is None]
    assert tied, "the micro suite on a 2x2 has programs whose placements tie"
    assert all("tie" in row["undefined"]["spearman"] for row in tied)


def test_print_json_never_writes_nan(capsys):
    from aoizora.cli import print_json

    print_json({"a": math.nan, "b": [math.inf, 1.0]})
    assert strict_loads(capsys.readouterr().out) == {"a": None, "b": [None, 1.0]}


# --- Ctrl-C and SIGTERM ---------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("signum, to_group, code, line", [
    (signal.SIGINT, True, 130, "aoizora: interrupted"),  # Ctrl-C reaches the whole process group
    (signal.SIGTERM, False, 143, "aoizora: terminated"),  # `kill PID`, a scheduler's stop
], ids=["ctrl-c", "sigterm"])
def test_a_stop_signal_ends_the_command_with_one_line(signum, to_group, code, line):
    """Stage 1's lowering workers are running when the signal arrives; without aoizora's handler a
    SIGTERM would reach libtpu's crash handler, which prints a stack dump."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "from aoizora.cli import main; main()", *PLAN[:-1], "81", "--resolution", "720p",
         "--model", "wan2.1-t2v-14b", "--topology", "tpu7x:2x2x2", "--stage1-only", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    # inside Stage 1 with its workers started: 880 strategies take ~18 s to analyse here, so the
    # interrupt lands mid-lowering, not in the pool's shutdown at the end
    time.sleep(9)
    (os.killpg if to_group else os.kill)(proc.pid, signum)
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail(f"{signal.Signals(signum).name} did not stop the command")
    assert proc.returncode == code, err
    assert [text for text in err.splitlines() if text.strip()] == [line]


def test_hlo_from_stdin_that_is_not_utf8_is_one_line():
    result = CliRunner().invoke(cli, ["hlo", "-"], input=b"\xff\xfe HloModule")
    one_line(result, "not UTF-8 text")
