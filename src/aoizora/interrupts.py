"""Stop signals as exceptions: Ctrl-C (SIGINT), a scheduler's stop (SIGTERM) and a closed terminal
(SIGHUP) end a command by unwinding it, so every clean-up on the way (compile workers, caches,
pools) runs and nothing half-done is written, and never get lost where Python cannot raise. A
parent that dies without a clean-up (SIGKILL) takes the children that asked it along (`die_with_parent`)."""

from __future__ import annotations

import _thread
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any


class Terminated(KeyboardInterrupt):
    """SIGTERM (a job scheduler or `kill` stopping the command) or SIGHUP (its terminal closed, or a
    session manager stopping it): it unwinds like Ctrl-C, so every clean-up that Ctrl-C runs
    (compile workers, caches, pools) runs for it too. `signum` is the signal's number."""

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        super().__init__()
        self.signum = int(signum)


#: The signals that stop a command by unwinding it (SIGINT as KeyboardInterrupt, the others as Terminated).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


# long against the few statements of the hook that delivers a signal again, short against a person
_REDELIVERY_DELAY_S = 0.02


@contextlib.contextmanager
def interrupts_not_lost() -> Iterator[None]:
    """Ctrl-C inside the block ends it with KeyboardInterrupt, and SIGTERM with `Terminated` (without
    a handler of Python's, SIGTERM would reach libtpu's crash handler, which prints a stack dump),
    promptly, even when the signal landed where Python cannot raise: in a finalizer, a weakref
    callback or a garbage-collection callback (JAX registers one), Python hands the exception to
    `sys.unraisablehook`, which would print "Exception ignored in ..." with a traceback, and goes
    on. Inside the block that hook keeps such an exception quiet and delivers the signal again, so
    it is raised at the next point where Python can raise (not at the end of the command, which
    may be hours of compiles away); should it be lost all the same, the block raises it on exit.
    Only the main thread receives signals, so elsewhere it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    raised: list[KeyboardInterrupt] = []

    def handler(signum: int, frame: Any) -> None:
        raised.append(KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum))
        raise raised[-1]

    previous_hook = sys.unraisablehook

    def deliver_again(exc: KeyboardInterrupt) -> None:
        """Soon, from another thread: delivered now, the handler would raise inside this hook."""
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
        timer = threading.Timer(_REDELIVERY_DELAY_S, _thread.interrupt_main, args=(signum,))
        timer.daemon = True
        timer.start()

    def unraisable_hook(unraisable: Any) -> None:
        if not any(unraisable.exc_value is exc for exc in raised):
            previous_hook(unraisable)
            return
        try:
            deliver_again(unraisable.exc_value)
        except KeyboardInterrupt as exc:  # delivered while still in this hook: once more
            deliver_again(exc)

    previous_handlers = {signum: signal.signal(signum, handler) for signum in STOP_SIGNALS}
    sys.unraisablehook = unraisable_hook
    try:
        yield
    finally:
        for signum, previous in previous_handlers.items():
            signal.signal(signum, previous)
        sys.unraisablehook = previous_hook
    if raised:
        raise raised[0]


@contextlib.contextmanager
def children_start_with_stop_signals_held() -> Iterator[None]:
    """Child processes started inside the block begin with the stop signals blocked (a child
    inherits the signal mask of the thread that starts it): Ctrl-C or a closing terminal's SIGHUP,
    which reach the whole process group, then wait in a child still starting up (importing for
    seconds) instead of killing it before it can ignore them (`ignore_stop_signals`, at its start);
    its parent stops it itself. In this thread a stop signal that comes inside the block is
    delivered when the block ends."""
    held = signal.pthread_sigmask(signal.SIG_BLOCK, set(STOP_SIGNALS))
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)


def ignore_stop_signals(signums: tuple[int, ...]) -> None:
    """In a child at its start: ignore `signums` (its parent stops it on those), then take the stop
    signals again that its parent held while starting it; one sent meanwhile is then delivered
    (discarded if ignored).

    Ignored by a handler of Python's that does nothing, not by SIG_IGN: libtpu, when it loads
    (the child's first compile), puts its crash handler in place of an ignored or default
    disposition, which prints a stack dump of about 20 lines on SIGTERM and ends the process; it
    leaves a handler of Python's in place."""
    for signum in signums:
        signal.signal(signum, _ignored)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(STOP_SIGNALS))


def _ignored(signum: int, frame: Any) -> None:
    """A stop signal a child ignores (`ignore_stop_signals`)."""


def start_resource_tracker_deaf_to_hangups() -> None:
    """Start multiprocessing's resource tracker (shared by every worker pool of this process) with
    SIGHUP blocked, which it keeps: it ignores SIGINT and SIGTERM on its own, but a closing
    terminal's SIGHUP, sent to the whole process group, would kill it and the command would warn
    that it "died unexpectedly". It ends when the last holder of its pipe does: this process and
    Stage 1's workers (which `start_child` ties to this process), even when this one is SIGKILLed."""
    from multiprocessing import resource_tracker

    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
    try:
        resource_tracker.ensure_running()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def die_with_parent(parent_pid: int) -> None:
    """In a child process, at its start: be killed (SIGKILL) when the parent `parent_pid` dies,
    however it dies (SIGKILL and crashes included, which run no clean-up of the parent's), so that
    no child outlives the command. If the parent is already gone (it died before this call), exit
    at once. Linux only (`prctl(PR_SET_PDEATHSIG)`); elsewhere a no-op.

    The kernel ties the signal to the parent's *thread* that started the child: start the child
    from a thread that outlives it (as a pool started and shut down by one call does)."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    # a refusal (a sandbox's seccomp filter) leaves the parent's own clean-up, as off Linux
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() != parent_pid:  # died between our start and the prctl: no signal will come
        os._exit(1)


def start_child(parent_pid: int, initializer: str, *args: Any) -> None:
    """A worker pool's initializer: `die_with_parent(parent_pid)`, then the initializer named
    "module:function", called with `args`. Named rather than passed, so that a new worker imports
    the initializer's module (Stage 1's takes most of a second) only once it dies with its parent."""
    die_with_parent(parent_pid)
    module, name = initializer.split(":")
    getattr(importlib.import_module(module), name)(*args)
