"""Compiling one strategy for the slice: through the compile cache, in an executor's process (or
this one), and the compiles started before Stage 2 (`EarlyCompiles`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from aoizora.errors import AoizoraError
from aoizora.hlo.builder import build_program
from aoizora.hlo.program import OpaqueCost, OpaqueOp
from aoizora.placement import Placement, enumerate_placements
from aoizora.stage2.compile_cache import CompileCache, CompileRecord
from aoizora.stage2.compile_limits import CompileLimit
from aoizora.stage2.compile_workers import (
    ChildResult,
    CompileExecutor,
    CompileTimeout,
    CompileWorkers,
    WorkloadNotTransferable,
    device_ids_of,
    memory_bytes,
    memory_parts,
)
from aoizora.stage2.outcomes import CachedCompileError, Compiled, drop_reason, is_out_of_memory
from aoizora.toolchain import CompilerFlags, LoweredCompile, compile_lowered, toolchain_versions
from aoizora.topology import Topology
from aoizora.workload import LOWERING_LOCK, StrategySpace

log = logging.getLogger("aoizora.stage2")


def compile_with_timeout(lowered: Any, timeout_s: CompileLimit | float | None,
                         flags: CompilerFlags | None = None) -> Any:
    """`lowered.compile()` with `flags` in a thread of this process; CompileTimeout past its limit.

    The fallback for workloads that cannot go to a child process: the compile cannot be stopped,
    so on timeout the thread is abandoned and runs to its end. A thread's CPU time among this
    process's others cannot be read, so the limit applies to the wall clock (`compile_limits`).
    """
    limit = CompileLimit.of(timeout_s)
    wall = limit.as_wall_seconds()
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["compiled"] = compile_lowered(lowered, flags)
        except BaseException as exc:  # reported to the caller
            box["error"] = exc

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(wall)
    if worker.is_alive():
        raise CompileTimeout(f"compile did not finish within {wall:.0f} s", wall_clock=limit.wall_binds())
    if "error" in box:
        raise box["error"]
    return box["compiled"]


def cached_compile(cache: CompileCache, topology_name: str, device_ids: Sequence[int] = ()) -> LoweredCompile:
    """A `LoweredCompile` that reads libtpu's answer from `cache` first: a program lowered for the
    compile-only devices of `topology_name` (a one-device program, or one over the mesh whose
    device ids in order are `device_ids`, which the key holds), compiled on a miss and stored,
    with the compiler's memory analysis by part and its refusal for memory, which a hit raises
    again as `CachedCompileError` (its message `drop_reason`'s). Returns the `CompileRecord`."""

    def compile_through_cache(lowered: Any, flags: CompilerFlags | None) -> CompileRecord:
        key = cache.key(lowered.as_text(), topology_name, list(device_ids), toolchain_versions(), flags)
        record = _stored_record(cache, key)
        if record is not None:
            return record
        t0 = time.perf_counter()
        try:
            compiled = compile_lowered(lowered, flags)
        except Exception as exc:
            _store_refusal(cache, key, "", t0, exc)
            raise
        record = CompileRecord(compiled.as_text(), device_ids_of(compiled), memory_bytes(compiled),
                               time.perf_counter() - t0, memory_parts=memory_parts(compiled))
        cache.put(key, record)
        return record

    return compile_through_cache


def shared_compile_placement(space: StrategySpace, topology: Topology, strategy: Any) -> Placement:
    """The placement whose device order Stage 2 compiles a strategy over (its first), the program
    then scored on every placement."""
    return enumerate_placements(topology, space.mesh_spec(strategy)).placements[0]


def compile_strategy(
    space: StrategySpace, strategy: Any, key: str, topology: Topology, placement: Placement,
    timeout_s: CompileLimit | float | None,
    cache: CompileCache | None = None,
    flags: CompilerFlags | None = None,
    executor: CompileExecutor | None = None,
    as_is: bool = False,
) -> Compiled:
    """Compile `strategy` over `placement`'s device order with compiler `flags` (or read it from `cache`).

    What is compiled is the strategy's compiled form (`StrategySpace.compiled_form`; with `as_is`,
    the strategy itself, as it runs), with the flags that form needs (`StrategySpace.compile_flags`)
    under `flags` (the plan's, which win); its kernels are costed as `strategy`'s
    (`StrategySpace.compiled_kernel_cost`).

    The program is lowered here and looked up in `cache` first; a miss is compiled by `executor`
    (default: a child process started for this compile), in a process killed when the compile exceeds
    `timeout_s` (a `CompileLimit`; seconds: the compile's own limit, in CPU seconds of its process)
    or the caller is interrupted; only a finished compile is stored in `cache`. A
    space that cannot go to a child process (see `aoizora.stage2.compile_workers`) is compiled in
    this process, where a timeout abandons the compile instead of stopping it.
    Raises the compiler's error (or CompileTimeout); refusals such as out-of-HBM are cached too.
    """
    mesh = placement.jax_mesh(topology)
    compiled_as = strategy if as_is else space.compiled_form(strategy)
    flags = form_flags(space, compiled_as, flags)
    with LOWERING_LOCK:  # lowerings run one at a time, compiles in parallel
        inputs = space.compile_inputs(compiled_as, mesh)
        lowered = inputs.lower()
        text = lowered.as_text()
        entry = None
        if cache is not None:
            entry = cache.key(text, topology.name, [d.id for d in mesh.devices.flat], toolchain_versions(), flags)
    hook: Callable[[OpaqueOp], OpaqueCost | None] = (  # noqa: E731
        lambda op: space.compiled_kernel_cost(strategy, op, compiled=compiled_as))
    hit = _from_cache(cache, entry, key, hook, placement)
    if hit is not None:
        return hit

    def miss(store: CompileCache | None) -> Compiled:
        label = f"{key} / {placement.name} / {topology.name}"
        return _compile_and_store(lambda: _compile_miss(space, compiled_as, topology, placement, lowered, text,
                                                        timeout_s, flags, executor),
                                  store, entry, label, key, hook, placement)

    if cache is None or entry is None:
        return miss(None)
    # a claim per program: two planners sharing the cache (two test workers, `plan` beside `compare`)
    # compile it once, the second reading the first's entry
    with cache.claim(entry, abandon=lambda: executor is not None and executor.closed) as waited:
        hit = _from_cache(cache, entry, key, hook, placement) if waited else None
        return hit if hit is not None else miss(cache)


def form_flags(space: StrategySpace, compiled_as: Any, flags: CompilerFlags | None) -> CompilerFlags | None:
    """The flags a compiled form is compiled with: its own (`compile_flags`) under `flags`, which win."""
    own = space.compile_flags(compiled_as)
    if not own:
        return flags
    return CompilerFlags.parse(own).merged(flags) if flags is not None else CompilerFlags.parse(own)


def _stored_record(cache: CompileCache, entry: str) -> CompileRecord | None:
    """The record stored under `entry` (None: a miss); a stored refusal is raised as CachedCompileError."""
    record = cache.get(entry)
    if record is not None and record.error is not None:
        raise CachedCompileError(record.error)
    return record


def _store_refusal(cache: CompileCache, entry: str, label: str, started: float, exc: BaseException) -> None:
    """Keep the compiler's refusal for memory under `entry` (timeouts and other failures are not kept)."""
    if is_out_of_memory(exc):
        cache.put(entry, CompileRecord(None, None, None, time.perf_counter() - started, error=drop_reason(exc),
                                       label=label))


def _from_cache(cache: CompileCache | None, entry: str | None, key: str,
                hook: Callable[[OpaqueOp], OpaqueCost | None], placement: Placement) -> Compiled | None:
    """The program stored under `entry`, None on a miss (an unparseable entry is discarded: a miss).
    Raises CachedCompileError for a stored refusal."""
    if cache is None or entry is None:
        return None
    record = _stored_record(cache, entry)
    if record is None:
        return None
    assert record.hlo_text is not None  # a record without an error holds its program
    try:
        program = build_program(record.hlo_text, opaque_cost=hook, device_ids=record.device_ids)
    except AoizoraError as exc:  # unparseable: the entry is not trusted, the program is compiled again
        cache.discard(entry, f"{type(exc).__name__}: {exc}")
        return None
    return Compiled(key, program, record.memory_bytes, record.compile_seconds, placement.name, from_cache=True)


def _compile_and_store(compile_miss: Callable[[], ChildResult], cache: CompileCache | None, entry: str | None,
                       label: str, key: str, hook: Callable[[OpaqueOp], OpaqueCost | None],
                       placement: Placement) -> Compiled:
    """Compile a miss and store what the cache keeps (the program, or the compiler's refusal for memory)."""
    t0 = time.perf_counter()
    try:
        result = compile_miss()
    except Exception as exc:
        if cache is not None and entry is not None:
            _store_refusal(cache, entry, label, t0, exc)
        raise
    program = build_program(result.hlo_text, opaque_cost=hook, device_ids=result.device_ids)
    if cache is not None and entry is not None:
        cache.put(entry, CompileRecord(result.hlo_text, program.device_ids, result.memory_bytes,
                                       result.compile_seconds, label=label))
    return Compiled(key, program, result.memory_bytes, result.compile_seconds, placement.name)


def _compile_miss(space: StrategySpace, strategy: Any, topology: Topology, placement: Placement, lowered: Any,
                  text: str, timeout_s: CompileLimit | float | None, flags: CompilerFlags | None,
                  executor: CompileExecutor | None) -> ChildResult:
    """Compile a program the cache did not have: by `executor` when the workload can go there."""
    if executor is None:
        with CompileWorkers(1) as own:
            return _compile_miss(space, strategy, topology, placement, lowered, text, timeout_s, flags, own)
    job = executor.job(space, strategy, topology.name, placement, flags, text)
    if job is not None:
        try:
            return executor.compile(job, timeout_s)
        except WorkloadNotTransferable as exc:
            log.warning("aoizora: compiling %s in this process, where a timeout cannot stop a compile (%s)",
                        space.name, exc)
            executor.refuse(space)
    t0 = time.perf_counter()
    compiled = compile_with_timeout(lowered, timeout_s, flags)
    seconds = time.perf_counter() - t0
    return ChildResult(compiled.as_text(), device_ids_of(compiled), memory_bytes(compiled), seconds)


class EarlyCompiles:
    """Compiles started before Stage 2, for strategies it compiles whatever Stage 1 ranks (the
    expert deployments: baselines, compiled first and never pruned), so that they run while Stage 1
    lowers. Each compiles over its strategy's first placement (JAX's default order) with its own
    flags, in `executor` (the one Stage 2 uses, which bounds the compiles running at once);
    `run_stage2(started=early.futures)` takes the results instead of compiling again. JAX's
    default order on every generation, not the predicted best of `aoizora.stage2.compile_order`:
    an expert is a baseline as deployed (on JAX's order), so its reported time is then its own
    compile's, and the prediction needs Stage 1's analysis, which waiting for would lose the overlap.

    A context manager: leaving it by an exception (Ctrl-C included) closes `executor`, killing the
    compiles in flight, as `run_stage2` does; leaving it normally leaves `executor` open (after
    Stage 2 no early compile is running: Stage 2 waited for each).
    """

    def __init__(self, space: StrategySpace, topology: Topology, timeout_s: CompileLimit | float | None,
                 cache: CompileCache | None, executor: CompileExecutor) -> None:
        self.space, self.topology, self.timeout_s, self.cache = space, topology, timeout_s, cache
        self.executor = executor
        self.futures: dict[str, Future[Compiled]] = {}
        self._threads: ThreadPoolExecutor | None = None

    def start(self, key: str, strategy: Any, flags: CompilerFlags | None) -> None:
        """Start compiling `strategy` (under `key`) in the background."""
        if self._threads is None:
            self._threads = ThreadPoolExecutor(self.executor.size, thread_name_prefix="aoizora-early-compile")
        placement = shared_compile_placement(self.space, self.topology, strategy)
        self.futures[key] = self._threads.submit(compile_strategy, self.space, strategy, key, self.topology,
                                                 placement, self.timeout_s, self.cache, flags, self.executor)

    def __enter__(self) -> EarlyCompiles:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None:
            self.executor.close()  # kills a compile still running: its thread returns at once
        if self._threads is not None:
            self._threads.shutdown(wait=exc_type is None, cancel_futures=exc_type is not None)
