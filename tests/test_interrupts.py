"""A stop signal inside `interrupts_not_lost` ends the block with an exception, at once, even when
it lands where Python cannot raise, and prints nothing. A child that asked to die with its parent
(`die_with_parent`) does, however the parent dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from aoizora.interrupts import interrupts_not_lost


def _interrupt_here() -> None:
    os.kill(os.getpid(), signal.SIGINT)
    time.sleep(0.2)  # the handler runs here, where Python cannot raise


class _Finalized:
    def __del__(self) -> None:
        _interrupt_here()


def _collect_garbage_with_an_interrupt_in_a_finalizer() -> None:
    obj = _Finalized()
    del obj


def _collect_garbage_with_an_interrupt_in_a_gc_callback() -> None:
    """Where a Ctrl-C during `plan` lands now and then: JAX registers a gc callback."""
    import gc

    def callback(phase: str, info: dict) -> None:
        if phase == "start":
            _interrupt_here()

    gc.callbacks.append(callback)
    try:
        gc.collect()
    finally:
        gc.callbacks.remove(callback)


@pytest.mark.parametrize("swallowing_place", [
    _collect_garbage_with_an_interrupt_in_a_finalizer, _collect_garbage_with_an_interrupt_in_a_gc_callback,
])
def test_an_interrupt_that_lands_where_python_cannot_raise_still_ends_the_command_quietly(
    swallowing_place, monkeypatch,
):
    """Python cannot raise inside a finalizer or a gc callback: it hands the exception to
    `sys.unraisablehook` (which prints "Exception ignored in ..." and a traceback) and goes on. The
    command must still end as interrupted, print nothing of the kind, and stop right there: not
    after the rest of its work (in `plan`, hours of compiles)."""
    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    work_s = 30.0  # the rest of the command; held back to the block's end, the interrupt waits for it all
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        with interrupts_not_lost():
            swallowing_place()
            while time.monotonic() - start < work_s:
                time.sleep(0.01)
    waited = time.monotonic() - start
    # delivered again 20 ms after it was swallowed; the margin is for a loaded host's scheduler
    assert waited < 5.0, f"the interrupt waited {waited:.1f} s for the work after it"
    assert reported == []
    assert sys.unraisablehook == reported.append  # the block put the previous hook back


def test_other_unraisable_exceptions_still_reach_the_hook(monkeypatch):
    class FailingFinalizer:
        def __del__(self) -> None:
            raise ValueError("a bug in a finalizer")

    reported = []
    monkeypatch.setattr(sys, "unraisablehook", reported.append)
    with interrupts_not_lost():
        obj = FailingFinalizer()
        del obj
    assert [type(u.exc_value) for u in reported] == [ValueError]


def test_sighup_ends_the_block_as_terminated():
    """A closed terminal (SIGHUP) stops a command as SIGTERM does: unwound, with the signal's number."""
    from aoizora.interrupts import Terminated

    with pytest.raises(Terminated) as stopped:
        with interrupts_not_lost():
            os.kill(os.getpid(), signal.SIGHUP)
            time.sleep(5)
    assert stopped.value.signum == signal.SIGHUP


# A parent that starts a child which dies with it, prints the child's pid and waits to be killed.
_PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import sys, time; from aoizora.interrupts import die_with_parent; "
                          f"die_with_parent({os.getpid()}); print('ready', flush=True); time.sleep(60)"],
                         stdout=subprocess.PIPE, text=True)
assert child.stdout.readline() == "ready\\n"
print(child.pid, flush=True)
time.sleep(60)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a no-op off Linux")
def test_a_child_that_dies_with_its_parent_goes_when_the_parent_is_sigkilled():
    parent = subprocess.Popen([sys.executable, "-c", _PARENT], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    try:
        child = int(parent.stdout.readline())
        parent.kill()
        parent.wait()
        deadline = time.monotonic() + 1.0
        while _alive(child) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(child)
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a no-op off Linux")
def test_a_child_whose_parent_is_already_gone_exits_at_once():
    """The parent died before the child asked: no signal would come, so the child ends itself."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    code = subprocess.run([sys.executable, "-c", f"from aoizora.interrupts import die_with_parent; "
                           f"die_with_parent({gone.pid}); print('lived')"], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert (code.returncode, code.stdout) == (1, "")



def _child_hung_up_while_starting(held: bool) -> subprocess.CompletedProcess:
    """A child that takes a second to start, then ignores SIGHUP, hung up while it starts."""
    import contextlib

    from aoizora.interrupts import children_start_with_stop_signals_held

    code = ("import signal, time; time.sleep(1.0); from aoizora.interrupts import ignore_stop_signals; "
            "ignore_stop_signals((signal.SIGHUP,)); time.sleep(0.3); print('alive')")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}

    def as_a_terminal_leaves_it() -> None:
        # a test runner's worker may ignore or block SIGHUP, and a child inherits both: the child
        # takes SIGHUP's default action, and its mask is the starting thread's only when held
        signal.signal(signal.SIGHUP, signal.SIG_DFL)
        if not held:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGHUP})

    with children_start_with_stop_signals_held() if held else contextlib.nullcontext():
        child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env,
                                 preexec_fn=as_a_terminal_leaves_it)
    time.sleep(0.2)
    child.send_signal(signal.SIGHUP)
    out, _ = child.communicate(timeout=60)
    return subprocess.CompletedProcess(child.args, child.returncode, out)


def test_a_child_started_with_the_stop_signals_held_outlives_a_hangup_while_it_starts():
    done = _child_hung_up_while_starting(held=True)
    assert done.returncode == 0 and done.stdout.strip() == "alive"
    # without the mask the hangup kills it before it can ignore it
    assert _child_hung_up_while_starting(held=False).returncode == -signal.SIGHUP


def test_the_stop_signals_are_held_only_inside_the_block():
    from aoizora.interrupts import STOP_SIGNALS, children_start_with_stop_signals_held

    before = signal.pthread_sigmask(signal.SIG_BLOCK, set())
    with children_start_with_stop_signals_held():
        assert set(STOP_SIGNALS) <= signal.pthread_sigmask(signal.SIG_BLOCK, set())
    assert signal.pthread_sigmask(signal.SIG_BLOCK, set()) == before


def test_a_child_that_ignores_sigterm_still_ignores_it_once_libtpu_is_loaded():
    """libtpu, loading in a compile child, replaces an ignored SIGTERM with its crash handler (a
    stack dump of about 20 lines, then the process ends); the child's own ignoring survives it."""
    code = ("import os, signal, time; from aoizora.interrupts import ignore_stop_signals; "
            "ignore_stop_signals((signal.SIGTERM,)); "
            "from aoizora.toolchain import compile_only_devices; compile_only_devices('v5e:2x2'); "
            "os.kill(os.getpid(), signal.SIGTERM); time.sleep(0.3); print('alive')")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert (done.returncode, done.stdout.strip()) == (0, "alive"), done.stderr[-2000:]
    assert "SIGTERM received" not in done.stderr
