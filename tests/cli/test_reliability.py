"""The environment and stop signals: compiler variables XLA or libtpu refuse, a JAX_PLATFORMS this
host cannot start, SIGHUP, and interrupts outside a command. One line each, never a traceback."""

from __future__ import annotations

import contextlib
import glob
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.plan.plan_doc import plan_doc

CLI = [sys.executable, "-c", "from aoizora.cli import main; main()"]
STAGE1 = ("plan", "--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--resolution", "480p", "--frames", "5",
          "--stage1-only", "--json")


def _run(args, env_extra, tmp_path, timeout=300):
    env = {**os.environ, "AOIZORA_CACHE_DIR": str(tmp_path / "cache"), **env_extra}
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=timeout, env=env)


def _lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("variable, value, names", [
    ("LIBTPU_INIT_ARGS", "--xla_no_such_flag=1", "xla_no_such_flag"),
    ("XLA_FLAGS", "--xla_no_such_flag=1", "--xla_no_such_flag=1"),
])
def test_a_compiler_variable_the_compiler_refuses_is_one_line_naming_it(tmp_path, variable, value, names):
    """Once exit 1 and no message at all: libtpu and XLA end the process, and aoizora's stderr filter
    dropped their line."""
    proc = _run(STAGE1, {variable: value}, tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = _lines(proc.stderr)
    assert line.startswith("aoizora: error: ") and variable in line and names in line
    assert proc.stdout == ""


def test_a_compiler_environment_that_passed_is_not_checked_again(tmp_path, monkeypatch):
    import subprocess as sp

    from aoizora import toolchain

    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    calls = []
    real = sp.run
    monkeypatch.setattr(sp, "run", lambda *a, **k: calls.append(a) or real(*a, **k))
    toolchain.check_compiler_environment(tmp_path)
    toolchain.check_compiler_environment(tmp_path)
    assert len(calls) == 1
    monkeypatch.setenv("XLA_FLAGS", "--xla_no_such_flag=1")  # another environment: checked, and refused
    with pytest.raises(toolchain.CompilerFlagError, match="XLA_FLAGS holds a flag XLA does not know"):
        toolchain.check_compiler_environment(tmp_path)


def _has_tpu() -> bool:
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


@pytest.mark.parametrize("platforms", [
    "no-such-platform",
    pytest.param("tpu", marks=pytest.mark.skipif(_has_tpu(), reason="this host has TPUs")),
])
def test_a_jax_platform_this_host_cannot_start_is_one_line(tmp_path, platforms):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(plan_doc()))
    proc = _run(("run", "--plan", str(plan)), {"JAX_PLATFORMS": platforms}, tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = _lines(proc.stderr)
    assert f"JAX_PLATFORMS={platforms!r}" in line and "Traceback" not in proc.stderr


def test_sighup_mid_plan_ends_it_like_sigterm_and_writes_nothing(tmp_path):
    """Once ignored: the plan was written 19 s later with exit 0."""
    out = tmp_path / "plan.json"
    env = {**os.environ, "AOIZORA_CACHE_DIR": str(tmp_path / "cache")}
    proc = subprocess.Popen(
        [*CLI, "plan", "--model", "wan2.1-t2v-14b", "--topology", "tpu7x:2x2x2", "--resolution", "720p", "--frames",
         "81", "--no-cache", "--out", str(out)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, env=env,
    )
    time.sleep(9)  # inside Stage 1 (its 880 strategies take ~18 s here), its workers running
    os.killpg(proc.pid, signal.SIGHUP)  # a closing terminal hangs up its whole process group
    try:
        _, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        pytest.fail("SIGHUP did not stop the command")
    assert proc.returncode == 129, err
    assert _lines(err) == ["aoizora: terminated (SIGHUP)"]
    assert not out.exists() and not list(tmp_path.glob(".plan-*"))


@pytest.mark.parametrize("stop, code, line", [
    (KeyboardInterrupt(), 130, "aoizora: interrupted"),
    ("SIGTERM", 143, "aoizora: terminated"),
    ("SIGHUP", 129, "aoizora: terminated (SIGHUP)"),
])
def test_a_stop_outside_a_command_is_one_line(monkeypatch, capfd, stop, code, line):
    """A stop that lands before the command runs (setting up the stderr filter, reading options)
    printed a KeyboardInterrupt traceback."""
    import aoizora.cli as cli_module
    from aoizora.interrupts import Terminated

    exc = stop if isinstance(stop, BaseException) else Terminated(getattr(signal, stop))

    def stopped(**kwargs):
        raise exc

    monkeypatch.setattr(cli_module.cli, "main", stopped)
    with pytest.raises(SystemExit) as exit_info:
        cli_module.main()
    assert exit_info.value.code == code
    assert _lines(capfd.readouterr().err) == [line]


def _session_processes(sid: int) -> dict[int, str]:
    """The live processes of session `sid` (a zombie has ended), by pid, with their command lines."""
    found = {}
    for stat in glob.glob("/proc/[0-9]*/stat"):
        try:
            with open(stat) as f:
                state, _ppid, _pgrp, session = f.read().rsplit(")", 1)[1].split()[:4]
            if state != "Z" and int(session) == sid:
                pid = int(stat.split("/")[2])
                with open(f"/proc/{pid}/cmdline") as f:
                    found[pid] = f.read().replace("\0", " ")
        except (OSError, ValueError):  # ended while read
            continue
    return found


def _left_after_killing_the_parent(args, tmp_path, child_marker: str, after_s: float, env_extra=(),
                                   grace_s: float = 2.0, started_s: float = 60.0) -> dict[int, str]:
    """Start the CLI with `args` in a session of its own; `after_s` seconds after a child whose
    command line holds `child_marker` appeared, SIGKILL the parent alone (nothing of the parent's
    runs after that) and return what of the session is still alive `grace_s` seconds later."""
    env = {**os.environ, "AOIZORA_CACHE_DIR": str(tmp_path / "cache"), **dict(env_extra)}
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    sid = proc.pid
    try:
        deadline = time.monotonic() + started_s
        while not any(child_marker in cmd for cmd in _session_processes(sid).values()):
            assert proc.poll() is None, f"the command ended (exit {proc.returncode}) before a child started"
            assert time.monotonic() < deadline, f"no child {child_marker!r} within {started_s:.0f} s"
            time.sleep(0.1)
        time.sleep(after_s)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + grace_s
        while (left := _session_processes(sid)) and time.monotonic() < deadline:
            time.sleep(0.05)
        return left
    finally:
        for pid in _session_processes(sid):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("after_s", [0.0, 2.0], ids=["worker-starting", "worker-at-work"])
def test_no_stage1_worker_or_resource_tracker_outlives_a_killed_plan(tmp_path, after_s):
    """Once a Stage 1 worker and multiprocessing's resource tracker lived on for 10 to 38 s. Killed
    as a worker starts, the parent may die before the worker could ask to die with it."""
    args = ("plan", "--model", "wan2.1-t2v-14b", "--topology", "tpu7x:2x2x2", "--resolution", "720p", "--frames", "81",
            "--no-cache", "--stage1-only")
    assert _left_after_killing_the_parent(args, tmp_path, "spawn_main", after_s) == {}


@pytest.mark.slow
@pytest.mark.parametrize("after_s", [0.0, 3.0], ids=["child-starting", "child-at-work"])
def test_no_compile_process_outlives_a_killed_plan(tmp_path, after_s):
    """A compile process lives as long as its parent however the parent dies: without its parent
    it would compile on, for minutes, for nobody."""
    args = ("plan", "--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--resolution", "480p", "--frames", "5",
            "--no-cache", "--out", str(tmp_path / "plan.json"))
    assert _left_after_killing_the_parent(args, tmp_path, "compile_workers import main", after_s) == {}


@pytest.mark.slow
def test_the_compiler_environment_probe_does_not_outlive_a_killed_command(tmp_path):
    """The probe of XLA_FLAGS (a child importing jax, seconds) lived on to its end. A second: the
    probe may end on its own within a longer wait."""
    args = ("plan", "--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--no-cache")
    env = {"XLA_FLAGS": "--xla_force_host_platform_device_count=8", "LIBTPU_INIT_ARGS": ""}
    assert _left_after_killing_the_parent(args, tmp_path, "jax.devices", 0.0, env.items(), grace_s=1.0) == {}


# --- the README's reliability paragraph: each sentence and the tests that hold it to its word ---------
README_SENTENCES = {
    "Bad input ends a command with exit code 2 and one line": [
        "tests/cli/test_inputs.py::test_plan_refuses_unwritable_outputs_before_stage1",
        "tests/cli/test_inputs.py::test_bad_plan_files_are_one_line_and_leave_nothing",
        "tests/cli/test_inputs.py::test_plan_option_values_are_one_line",
        "tests/cli/test_reliability.py::test_a_compiler_variable_the_compiler_refuses_is_one_line_naming_it",
        "tests/cli/test_reliability.py::test_a_jax_platform_this_host_cannot_start_is_one_line",
        "tests/cli/test_reliability.py::test_inspection_commands_refuse_a_bogus_libtpu_flag_in_one_line",
        "tests/cli/test_arguments.py::test_every_usage_error_is_one_line",
        "tests/cli/test_outputs.py::test_export_out_that_is_a_dangling_link_or_a_loop_is_refused",
        "tests/export/test_maxdiffusion_command_input.py::test_cli_refuses_a_malformed_command_in_one_line",
    ],
    "Ctrl-C ends a command with exit code 130, SIGTERM with 143 and SIGHUP with 129": [
        "tests/cli/test_inputs.py::test_a_stop_signal_ends_the_command_with_one_line",
        "tests/cli/test_reliability.py::test_sighup_mid_plan_ends_it_like_sigterm_and_writes_nothing",
        "tests/cli/test_reliability.py::test_a_stop_outside_a_command_is_one_line",
    ],
    "Plans, bench cells and cache entries are written atomically": [
        "tests/test_store.py::test_a_write_that_fails_at_the_rename_leaves_the_old_file_and_no_temporary",
        "tests/test_store.py::test_write_json_atomic_leaves_the_old_file_when_it_fails",
    ],
    "The plan, Stage 1 and compile caches check every entry they read and recover from any state": [
        "tests/plan/test_plan.py::test_plan_cache_entries_that_do_not_match_their_checksum_are_recomputed",
        "tests/stage1/test_cache.py::test_a_damaged_entry_is_discarded_and_analysed_again",
        "tests/stage2/test_compile_cache.py::test_corrupt_entries_are_discarded",
        "tests/test_store.py::test_an_entry_that_is_a_full_directory_is_a_miss_and_is_not_written",
        "tests/plan/test_plan_cache_states.py::test_compile_cache_entries_that_are_directories_do_not_degrade_the_plan",
        "tests/plan/test_plan_cache_states.py::test_a_plan_cache_entry_that_is_a_directory_is_planned_again",
        "tests/plan/test_plan_cache_states.py::test_a_cache_folder_that_is_a_file_plans_without_caches",
        "tests/plan/test_plan_cache_degraded.py::test_a_plan_whose_compile_timed_out_does_not_answer_the_next_request",
    ],
    "A plan file is data, never a shell command": [
        "tests/export/test_export_shell_safety.py::test_the_key_suffix_attack_is_refused_on_load",
        "tests/export/test_export_shell_safety.py::test_any_text_in_any_plan_string_is_refused_or_exports_inert",
        "tests/export/test_export_shell_safety.py::test_export_checks_what_it_writes_even_for_a_plan_that_skipped_the_checks",
        "tests/export/test_export_shell_safety.py::test_cli_prints_the_launcher_line_quoted",
    ],
    "The exported launcher runs only a spec that matches its checksum and places each device once": [
        "tests/export/test_launcher_spec.py::test_a_spec_changed_after_the_export_is_refused",
        "tests/export/test_launcher_spec.py::test_duplicate_device_coordinates_are_refused",
        "tests/export/test_launcher_spec.py::test_overrides_that_contradict_the_plans_mesh_or_attention_are_refused",
        "tests/export/test_launcher_spec.py::test_the_launcher_says_one_line_for_a_spec_that_is_not_whole",
    ],
    "The Python API checks its arguments as the CLI does": [
        "tests/plan/test_plan_arguments.py::test_plan_wan_refuses_bad_arguments_by_name",
        "tests/plan/test_plan_arguments.py::test_plan_space_refuses_bad_arguments_by_name",
    ],
}


def test_every_sentence_of_the_readme_reliability_paragraph_has_its_tests():
    """The paragraph states only what a test checks: each sentence is listed above with the tests
    that check it, and each of those tests exists."""
    import ast
    from pathlib import Path

    root = Path(__file__).parents[2]
    section = (root / "README.md").read_text().split("## Reliability\n", 1)[1].split("\n## ", 1)[0]
    sentences = [s for s in section.replace("\n", " ").split(". ") if s.strip()]
    assert len(sentences) == len(README_SENTENCES)
    for sentence, starts in zip(sentences, README_SENTENCES, strict=False):
        assert sentence.strip().startswith(starts), sentence
    for tests in README_SENTENCES.values():
        for test in tests:
            path, name = test.split("::")
            defined = {n.name for n in ast.walk(ast.parse((root / path).read_text())) if isinstance(n, ast.FunctionDef)}
            assert name in defined, test


def test_every_command_but_hlo_and_export_checks_the_compiler_environment():
    """Every command that builds a slice's topology starts libtpu; `hlo` and `export` start neither."""
    from aoizora.cli import cli
    from aoizora.cli.base import _COMMANDS_THAT_START_JAX

    assert _COMMANDS_THAT_START_JAX == set(cli.commands) - {"hlo", "export"}


@pytest.mark.slow
@pytest.mark.parametrize("args", [
    ("topology", "v5e:2x2"),
    ("placements", "v5e:2x2", "--mesh", "a=4"),
    ("rank", "--hlo", "x.hlo", "--topology", "v5e:2x2", "--mesh", "a=4"),
    ("explain", "plan.json", "--out", "report"),
], ids=lambda a: a[0])
def test_inspection_commands_refuse_a_bogus_libtpu_flag_in_one_line(tmp_path, args):
    proc = _run(args, {"LIBTPU_INIT_ARGS": "--bogus_flag=1"}, tmp_path)
    assert proc.returncode == 2, proc.stderr
    (line,) = _lines(proc.stderr)
    assert line.startswith("aoizora: error: ") and "LIBTPU_INIT_ARGS" in line and "bogus_flag" in line
    assert proc.stdout == ""
