"""A stop signal inside `interrupts_not_lost` ends the block with an exception, at once, even when
it lands where Python cannot raise, and prints nothing."""

from __future__ import annotations

import os
import signal
import sys
import time

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
