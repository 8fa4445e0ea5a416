"""The environment and stop signals: compiler variables XLA or libtpu refuse, a JAX_PLATFORMS this
host cannot start, SIGHUP, and interrupts outside a command. One line each, never a traceback."""

from __future__ import annotations

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

