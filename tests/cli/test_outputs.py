"""Outputs never destroy inputs or each other, never replace what is not a regular file, and take
the process umask. Every case is refused before any long work: exit 2, one line, nothing written."""

from __future__ import annotations

import json
import os
import shutil
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from aoizora.cli import cli
from tests.plan.test_plan_consistency import V5E

# without the VAE decode's compile (minutes at 480p), which is not what these tests check
PLAN = ("plan", "--no-vae-decode", "--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--resolution", "480p",
        "--frames", "5")


def refused(args: list[str], fragment: str) -> str:
    result = CliRunner().invoke(cli, args, catch_exceptions=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    return lines[0]


@pytest.fixture()
def plan_copy(tmp_path) -> Path:
    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / "plan.json"
    shutil.copyfile(V5E, path)
    return path


# --- plan: --out, --report and --export apart --------------------------------------------------
@pytest.mark.parametrize("extra, fragment", [
    (["--out", "{tmp}/r", "--report", "{tmp}/r"], "would overwrite each other"),
    (["--out", "{tmp}/r/index.html", "--report", "{tmp}/r"], "would overwrite each other"),
    (["--out", "{tmp}/r/links.png", "--report", "{tmp}/r"], "would overwrite each other"),
    (["--out", "{tmp}/e/command.sh", "--export", "maxdiffusion", "{tmp}/e"], "would overwrite each other"),
    (["--out", "{tmp}/p", "--report", "{tmp}/p/r"], "would overwrite each other"),
    (["--out", "{tmp}/plan/"], "ends in '/'"),
])
def test_plan_outputs_that_would_overwrite_each_other_are_refused(tmp_path, extra, fragment):
    args = [*PLAN, *(a.replace("{tmp}", str(tmp_path)) for a in extra)]
    refused(args, fragment)
    assert list(tmp_path.iterdir()) == []


def test_plan_out_never_replaces_a_fifo(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    refused([*PLAN, "--out", str(fifo)], "not a regular file")
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_plan_out_naming_a_character_device_is_refused_before_planning():
    # checked, never written: the refusal comes before any planning (and before any write)
    refused([*PLAN, "--out", "/dev/null"], "not a regular file")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


# --- explain and export never overwrite the plan they read ----------------------------------------
@pytest.mark.parametrize("command", [["explain"], ["export", "--to", "maxdiffusion"]])
def test_a_report_or_export_never_overwrites_its_plan(tmp_path, command):
    from aoizora.export import exported_files
    from aoizora.report.html import report_files

    names = [p.name for p in (report_files(tmp_path) if command == ["explain"] else exported_files(tmp_path))]
    for name in names:
        plan = tmp_path / name
        shutil.copyfile(V5E, plan)
        before = plan.read_bytes()
        refused([command[0], str(plan), *command[1:], "--out", str(tmp_path) + "/"], "would overwrite the plan")
        assert plan.read_bytes() == before
        plan.unlink()


def test_explain_beside_its_plan_keeps_the_plan(plan_copy):
    before = plan_copy.read_bytes()
    result = CliRunner().invoke(cli, ["explain", str(plan_copy), "--out", str(plan_copy.parent)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert plan_copy.read_bytes() == before
    assert (plan_copy.parent / "index.html").is_file()


@pytest.mark.parametrize("command, name",
                         [(["explain"], "index.html"), (["export", "--to", "maxdiffusion"], "command.sh")])
def test_a_folder_output_never_replaces_a_fifo_inside_it(plan_copy, tmp_path, command, name):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / name)
    refused([command[0], str(plan_copy), *command[1:], "--out", str(out)], "not a regular file")
    assert stat.S_ISFIFO(os.stat(out / name).st_mode)


# --- written files take the process umask ----------------------------------------------------------
@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_a_saved_plan_takes_the_umask(tmp_path, umask, mode):
    from aoizora.plan import load_plan

    plan = load_plan(V5E)
    old = os.umask(umask)
    try:
        path = plan.save(tmp_path / "plan.json")
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    assert json.loads(path.read_text()) == plan.data


def test_a_bench_cell_file_takes_the_umask(tmp_path, monkeypatch):
    import aoizora.evaluation.bench.grid_run as bench_run
    from aoizora.evaluation.bench import BenchOptions, Cell, run_bench
    from aoizora.stage2.compile_cache import CompileCache

    cell = Cell("v5e:2x2", "480p", 21, model="small-transformer")
    monkeypatch.setattr(bench_run, "run_cell_with_fallback", lambda *args, **kwargs: {"cell": cell.id})
    monkeypatch.setattr(bench_run, "write_outputs", lambda docs, out_dir: [])  # only the cell file is checked
    old = os.umask(0o022)
    try:
        run_bench([cell], BenchOptions(top_k=2), tmp_path, compile_cache=CompileCache(tmp_path / "c"), progress=False)
    finally:
        os.umask(old)
    path = tmp_path / "cells" / f"{cell.id}.json"
    assert json.loads(path.read_text()) == {"cell": cell.id}
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644


def test_a_plan_is_never_saved_over_a_fifo(tmp_path):
    from aoizora.errors import OutputPathError
    from aoizora.plan import load_plan

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OutputPathError, match="not a regular file"):
        load_plan(V5E).save(fifo)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


# --- export --out in any state -----------------------------------------------------------------
@pytest.mark.parametrize("make, fragment", [
    (lambda tmp: os.symlink(tmp / "missing", tmp / "out"), "symbolic link that leads nowhere"),
    (lambda tmp: (os.symlink(tmp / "loop-b", tmp / "out"), os.symlink(tmp / "out", tmp / "loop-b")),
     "symbolic link that leads nowhere"),
    (lambda tmp: os.symlink(tmp / "missing", tmp / "up"), "symbolic link that leads nowhere (")
], ids=["dangling", "loop", "dangling-parent"])
def test_export_out_that_is_a_dangling_link_or_a_loop_is_refused(plan_copy, tmp_path, make, fragment):
    make(tmp_path)
    out = tmp_path / ("up/sub" if (tmp_path / "up").is_symlink() else "out")
    before = sorted(os.listdir(tmp_path))
    refused(["export", str(plan_copy), "--to", "maxdiffusion", "--out", str(out)], fragment)
    assert sorted(os.listdir(tmp_path)) == before and not (tmp_path / "missing").exists()


def test_export_out_empty_is_refused_and_writes_nothing(plan_copy, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    refused(["export", str(plan_copy), "--to", "maxdiffusion", "--out", ""], "--out is empty")
    assert sorted(os.listdir(tmp_path)) == ["in"]


def test_the_export_library_refuses_a_folder_it_cannot_make(tmp_path):
    from aoizora.errors import OutputPathError
    from aoizora.export import write_maxdiffusion_export
    from aoizora.plan import load_plan

    os.symlink(tmp_path / "missing", tmp_path / "out")
    with pytest.raises(OutputPathError, match="cannot make the export folder"):
        write_maxdiffusion_export(load_plan(V5E), tmp_path / "out")
    with pytest.raises(OutputPathError, match="folder is empty"):
        write_maxdiffusion_export(load_plan(V5E), "")
