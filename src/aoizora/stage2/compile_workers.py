"""TPU compiles in child processes, so that a compile can be stopped.

libtpu's compile cannot be interrupted from Python: a thread running it runs to its end, burning
CPU and memory after its caller gave up. Here a compile runs in a child process, which is killed
when the compile exceeds its timeout or the caller is interrupted (SIGKILL: libtpu prints a crash
report on SIGTERM). A child is a fresh interpreter (running `main`,
started like multiprocessing's `spawn`: a fork of a process in which JAX has started is unsafe,
but unlike `spawn` it does not re-run the caller's main script, so a script without an
`if __name__ == "__main__"` guard can plan) and is reused for the next compile, so the imports of
jax and libtpu (a few seconds) are paid once per child, not per compile. It speaks pickle over
two pipes (`multiprocessing.connection.Connection`).

A child receives what lowering needs, not the lowered program: the pickled strategy space and
strategy, the slice's name, the placement (the device order) and the compiler flags. It lowers
the program again, checks it is the program the parent lowered (the SHA-256 of the lowered text;
the parent's text keys the compile cache), compiles it and returns the compiled HLO text, the
logical device order, the memory the compiler reported and the compile's seconds. It writes
nothing: the parent stores what arrives in the compile cache, so a killed compile leaves no entry.

`CompileWorkers` is the default `CompileExecutor`. `aoizora.stage2.ray_executor` runs the same
jobs (`_run`) in actors on a Ray cluster, in the same pool (`CompileWorkers._start_child`);
`aoizora.stage2.executors.executor_from_spec` picks one from a `--executor` value.

A space that cannot be pickled, or unpickled in a fresh process (e.g. a `FunctionSpace` of a
lambda, of a function defined inside another or in the caller's `__main__`), is compiled in the calling process instead
(`compile_strategy` does so), where a timeout abandons the compile rather than stopping it.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Protocol

from aoizora.interrupts import children_start_with_stop_signals_held, ignore_stop_signals
from aoizora.placement import Placement
from aoizora.stage2.compile_limits import CompileLimit, LimitWatch
from aoizora.toolchain import CompilerFlags

#: Seconds a new child may take to import jax and libtpu before it is considered broken.
CHILD_START_TIMEOUT_S = 600.0
#: How often a child checks that its parent is still there (see `_exit_when_orphaned`).
ORPHAN_POLL_S = 0.2
#: How often the parent reads a compiling child's CPU time (`compile_limits.LimitWatch`).
LIMIT_POLL_S = 1.0


class CompileTimeout(Exception):
    """A compile did not finish within its limit (its child process was killed). `wall_clock`: the
    caller's wall-clock limit (the time budget) ran out, not the compile's own limit."""

    def __init__(self, message: str, wall_clock: bool = False) -> None:
        super().__init__(message)
        self.wall_clock = wall_clock


class WorkloadNotTransferable(Exception):
    """The strategy space cannot be sent to a child process: compile in this one."""


class ChildCompileError(Exception):
    """The compiler's error in a child process; `str()` is its message, `original_type` its class name."""

    def __init__(self, original_type: str, message: str) -> None:
        super().__init__(message)
        self.original_type = original_type


class ChildDied(Exception):
    """A compile's child process ended without an answer (killed from outside, or crashed)."""


@dataclass(frozen=True)
class CompileJob:
    """What a child needs to lower and compile one strategy over one device order."""

    space_blob: bytes
    strategy_blob: bytes
    topology_name: str
    placement: Placement
    flags: CompilerFlags | None
    lowered_sha256: str  # of the lowered text the parent keyed the compile cache with


@dataclass(frozen=True)
class ChildResult:
    """A compile's output, as the parent stores it in the compile cache."""

    hlo_text: str
    device_ids: tuple[int, ...] | None
    memory_bytes: int | None
    compile_seconds: float


def lowered_digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def result_of(answer: tuple[Any, ...]) -> ChildResult:
    """The result a compile process answered (`_run`'s tuple); its error raised as the parent's exception."""
    kind, *payload = answer
    if kind == "ok":
        return payload[0]
    if kind == "workload":
        raise WorkloadNotTransferable(payload[0])
    raise ChildCompileError(*payload)


class CompileChild:
    """One compile process as the pool holds it: a local child (`_Child`) or a Ray actor.

    It has `pid` (None until known), `ready`, `wait_ready()`, `run(job, timeout_s)`, `kill()` (at
    once, idempotent) and `stop()` (when idle). A kind of process says how it gets ready
    (`_get_ready`, run once) and how it ends (`_end`, run once: the thread waiting for a compile
    and `close` may both kill it, and closing a descriptor twice could close another one opened
    in between).
    """

    pid: int | None

    def __init__(self) -> None:
        self.ready = False
        self.killed = False
        self._kill_lock = threading.Lock()

    def wait_ready(self) -> None:
        """Wait for the process's imports (once); ChildDied if it does not start."""
        if self.ready:
            return
        self._get_ready()
        self.ready = True

    def kill(self) -> None:
        """End the process at once (idempotent)."""
        with self._kill_lock:
            if self.killed:
                return
            self.killed = True
            self._end()

    def run(self, job: CompileJob, limit: CompileLimit) -> ChildResult:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def _get_ready(self) -> None:
        raise NotImplementedError

    def _end(self) -> None:
        raise NotImplementedError


class _Child(CompileChild):
    """One child process (a fresh interpreter running `main`) and the pipes to it."""

    def __init__(self) -> None:
        super().__init__()
        from_parent, to_child = os.pipe()
        from_child, to_parent = os.pipe()
        try:
            with children_start_with_stop_signals_held():
                self.process = subprocess.Popen(
                    [sys.executable, "-c", "from aoizora.stage2.compile_workers import main; main()", str(from_parent),
                     str(to_parent), str(os.getpid())],
                    pass_fds=(from_parent, to_parent), stdin=subprocess.DEVNULL)
        except BaseException:
            for fd in (to_child, from_parent, from_child, to_parent):
                os.close(fd)
            raise
        self.pid = self.process.pid
        os.close(from_parent)
        os.close(to_parent)
        self.send_conn = Connection(to_child, readable=False)
        self.recv_conn = Connection(from_child, writable=False)

    def _get_ready(self) -> None:
        # the child imports this process's modules by the same path (a workload defined in a
        # test module or a user's package is unpickled there)
        self.send_conn.send(list(sys.path))
        if not self.recv_conn.poll(CHILD_START_TIMEOUT_S):
            raise ChildDied(f"a compile process did not start within {CHILD_START_TIMEOUT_S:.0f} s")
        self._receive()  # "ready", after its imports

    def _receive(self) -> Any:
        try:
            return self.recv_conn.recv()
        except (EOFError, OSError) as exc:
            raise ChildDied(f"the compile process {self.process.pid} ended without an answer "
                            f"(exit code {self.process.poll()})") from exc

    def run(self, job: CompileJob, limit: CompileLimit) -> ChildResult:
        watch = LimitWatch(self.pid, limit)
        self.send_conn.send(job)
        while not self.recv_conn.poll(watch.wait_seconds(LIMIT_POLL_S)):
            reason = watch.check()
            if reason is not None:
                self.kill()
                raise CompileTimeout(reason, wall_clock=watch.wall_limit_expired())
        if (reason := watch.finished_over_cpu_limit()) is not None:
            self.kill()
            raise CompileTimeout(reason, wall_clock=False)
        return result_of(self._receive())

    def _end(self) -> None:
        """Kill the child and close the pipes."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()
        self.send_conn.close()
        self.recv_conn.close()

    def stop(self) -> None:
        """Ask an idle child to exit; kill it if it does not."""
        try:
            self.send_conn.send(None)
            self.process.wait(5.0)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            pass
        self.kill()


class CompileExecutor(Protocol):
    """Where Stage 2's compiles run: `CompileWorkers` (child processes of this one, the default) or
    `aoizora.stage2.ray_executor.RayCompileWorkers` (actors on a Ray cluster). The caller lowers,
    looks the program up in the compile cache and stores what comes back; an executor only compiles.
    """

    size: int  # compiles it runs at once

    def job(self, space: Any, strategy: Any, topology_name: str, placement: Placement, flags: CompilerFlags | None,
            lowered_text: str) -> CompileJob | None:
        """The job for one compile, or None when the space or strategy cannot be sent."""

    def compile(self, job: CompileJob, timeout_s: CompileLimit | float | None) -> ChildResult:
        """Run `job`; CompileTimeout (its process killed) past its limit (`CompileLimit`; seconds: the
        compile's own, in CPU seconds where the executor can measure them)."""

    def refuse(self, space: Any) -> None:
        """Remember that `space` cannot be loaded where the compiles run."""

    @property
    def closed(self) -> bool:
        """Whether `close()` was called (a compile waiting for another's claim then gives up)."""

    def close(self) -> None:
        """Stop every compile process, killing those still compiling."""

    def __enter__(self) -> CompileExecutor: ...

    def __exit__(self, *exc: Any) -> None: ...


class CompileWorkers:
    """Up to `size` compile processes, started when first needed and reused until `close()`.

    Thread-safe: each `compile` takes an idle child (or starts one) for its duration, so up to
    `size` threads compile at once. A context manager: leaving it (normally or by an exception,
    Ctrl-C included) stops every child, killing those still compiling.
    """

    def __init__(self, size: int = 1) -> None:
        self.size = max(1, size)
        self._slots = threading.BoundedSemaphore(self.size)
        self._lock = threading.Lock()
        self._idle: list[CompileChild] = []
        self._busy: set[CompileChild] = set()
        self._blobs: dict[int, tuple[Any, bytes | None]] = {}  # id(space) -> (space, its pickle or None)
        self._closed = False
        self._started: list[CompileChild] = []  # every child started
        self.start_seconds: list[float] = []  # how long each child took to get ready (its imports)

    def job(self, space: Any, strategy: Any, topology_name: str, placement: Placement, flags: CompilerFlags | None,
            lowered_text: str) -> CompileJob | None:
        """The job for one compile, or None when the space or strategy cannot be pickled."""
        with self._lock:
            held = self._blobs.get(id(space))
            if held is None or held[0] is not space:
                held = (space, _pickled(space))
                self._blobs[id(space)] = held
        blob, strategy_blob = held[1], _pickled(strategy)
        if blob is None or strategy_blob is None:
            return None
        return CompileJob(blob, strategy_blob, topology_name, placement, flags, lowered_digest(lowered_text))

    def refuse(self, space: Any) -> None:
        """Remember that a child could not load `space`: its compiles stay in the caller's process."""
        with self._lock:
            self._blobs[id(space)] = (space, None)

    def compile(self, job: CompileJob, timeout_s: CompileLimit | float | None) -> ChildResult:
        """Run `job` in a child; CompileTimeout (the child killed) past its limit (`CompileLimit.of`)."""
        with self._slots:
            child = self._take()
            try:
                if not child.ready:
                    t0 = time.perf_counter()
                    child.wait_ready()
                    with self._lock:
                        self.start_seconds.append(time.perf_counter() - t0)
                result = child.run(job, CompileLimit.of(timeout_s))
            except (ChildCompileError, WorkloadNotTransferable):
                self._give(child)  # the child answered: it is still good
                raise
            except BaseException:  # timeout, Ctrl-C, a dead child: the child goes
                child.kill()  # before it leaves `_busy`, so that `close` waits for it (kill is idempotent)
                with self._lock:
                    self._busy.discard(child)
                raise
            self._give(child)
            return result

    def _take(self) -> CompileChild:
        with self._lock:
            if self._closed:
                raise RuntimeError("the compile workers are closed")
            if self._idle:
                child = self._idle.pop()
                self._busy.add(child)
                return child
            # started and registered under the lock, so that a `close` running meanwhile either
            # finds it busy (and kills it) or comes first (and no child is started): when `close`
            # returns, every process in `pids` has ended
            child = self._start_child()
            self._started.append(child)
            self._busy.add(child)
            return child

    def _start_child(self) -> CompileChild:
        """A new compile process (here a local child; another executor starts its own kind)."""
        return _Child()

    @property
    def closed(self) -> bool:
        """Whether `close()` was called: no compile starts any more."""
        with self._lock:
            return self._closed

    @property
    def pids(self) -> list[int]:
        """The process ids of every child started (for diagnostics and tests)."""
        with self._lock:
            return [c.pid for c in self._started if c.pid is not None]

    def _give(self, child: CompileChild) -> None:
        with self._lock:
            self._busy.discard(child)
            closed = self._closed
            if not closed:
                self._idle.append(child)
        if closed:
            child.stop()

    def close(self) -> None:
        """Stop the idle children and kill those still compiling."""
        with self._lock:
            self._closed = True
            idle, busy = self._idle, list(self._busy)
            self._idle, self._busy = [], set()
        for child in busy:
            child.kill()
        for child in idle:
            child.stop()

    def __enter__(self) -> CompileWorkers:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _pickled(obj: Any) -> bytes | None:
    try:
        return pickle.dumps(obj)
    except Exception:  # a lambda, a local function, an open resource: not transferable
        return None


# ------------------------------------------------------------------------------------------
# The child's side
# ------------------------------------------------------------------------------------------
def _serve(recv_conn: Any, send_conn: Any) -> None:
    """A child's loop: announce readiness, then run jobs until told to stop (None) or orphaned."""
    sys.path[:] = recv_conn.recv()
    import jax  # noqa: F401  (the imports a compile needs, before the parent's clock starts)

    send_conn.send(("ready",))
    spaces: dict[bytes, Any] = {}
    while True:
        try:
            job = recv_conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if job is None:
            return
        send_conn.send(_run(job, spaces))


def _run(job: CompileJob, spaces: dict[bytes, Any]) -> tuple[Any, ...]:
    from aoizora.toolchain import compile_lowered
    from aoizora.topology import get_topology

    digest = hashlib.sha256(job.space_blob).digest()
    try:
        if digest not in spaces:
            spaces.clear()  # one workload at a time
            spaces[digest] = pickle.loads(job.space_blob)
        space, strategy = spaces[digest], pickle.loads(job.strategy_blob)
    except Exception as exc:  # e.g. a function defined in a module this process cannot import
        return ("workload", f"the workload cannot be loaded in a child process ({type(exc).__name__}: {exc})")
    try:
        topology = get_topology(job.topology_name)
        inputs = space.compile_inputs(strategy, job.placement.jax_mesh(topology))
        lowered = inputs.lower()
        if lowered_digest(lowered.as_text()) != job.lowered_sha256:
            return ("workload", "the child process lowered another program than the planner")
        t0 = time.perf_counter()
        compiled = compile_lowered(lowered, job.flags)
        seconds = time.perf_counter() - t0
        return ("ok", ChildResult(compiled.as_text(), device_ids_of(compiled), memory_bytes(compiled), seconds))
    except Exception as exc:  # the compiler's refusal (out of HBM) or error, reported to the parent
        return ("error", type(exc).__name__, str(exc))


def memory_bytes(compiled: Any) -> int | None:
    """The per-device bytes the compiler reports for a compiled program (None when it does not):
    its `memory_parts` summed, aliased bytes counted once."""
    parts = memory_parts(compiled)
    if parts is None:
        return None
    return parts["argument"] + parts["output"] + parts["temp"] - parts["alias"] + parts["generated_code"]


def memory_parts(compiled: Any) -> dict[str, int] | None:
    """The compiler's memory analysis of a compiled program by part, bytes per device
    (`argument`, `output`, `temp`, `alias`, `generated_code`); None when it reports none."""
    try:
        m = compiled.memory_analysis()
    except Exception:
        return None
    if m is None:
        return None
    return {part: int(getattr(m, f"{part}_size_in_bytes", 0))
            for part in ("argument", "output", "temp", "alias", "generated_code")}


def device_ids_of(compiled: Any) -> tuple[int, ...] | None:
    """The executable's logical device order, as `aoizora.hlo.builder.program_from_compiled` reads it."""
    try:
        shardings = compiled.input_shardings[0]
        if shardings:
            return tuple(int(d.id) for d in shardings[0]._device_assignment)
    except Exception:
        return None
    return None


def main() -> None:
    """A child's entry point: `python -c "...; main()" READ_FD WRITE_FD PARENT_PID` (the pipes from and
    to the parent, and the parent's process id)."""
    import signal

    # Ctrl-C, a scheduler's SIGTERM and a closing terminal's SIGHUP reach the whole group: the
    # parent kills us (and if it is gone, `_exit_when_orphaned` ends us)
    ignore_stop_signals((signal.SIGINT, signal.SIGTERM, signal.SIGHUP))
    threading.Thread(target=_exit_when_orphaned, args=(int(sys.argv[3]),), daemon=True).start()
    _serve(Connection(int(sys.argv[1]), writable=False), Connection(int(sys.argv[2]), readable=False))


def _exit_when_orphaned(parent_pid: int, poll_s: float = ORPHAN_POLL_S) -> None:
    """End this child as soon as its parent is gone. A parent killed outside Python's control
    (SIGKILL, SIGTERM, a crash) cannot close its workers, and a child busy compiling reads no pipe
    that would tell it: without this it would compile on, for minutes, for nobody. (libtpu's
    compile releases the GIL, so this thread runs during it.) Not `interrupts.die_with_parent`: the
    kernel sends its signal when the parent's *thread* that started the child ends, and a child is
    started by whichever compile thread needed it first (Stage 2's pools of threads end, the
    children are kept for the next compiles)."""
    while os.getppid() == parent_pid:
        time.sleep(poll_s)
    os._exit(1)
