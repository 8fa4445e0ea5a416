"""Stage 2: compile the Top-K strategies for the slice, score every placement with Q2, choose.

One compile per strategy serves all its placements: the compiled replica groups are logical mesh
positions, so a placement only relabels them. The compiler's algorithm config can depend on the
device order (a permuted mesh turned `has_reordering_map` off in one test), so the best few pairs
are recompiled with their own device order and re-scored before the final choice.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from aoizora.cost import CostModel, Q2Options, Q2Result
from aoizora.defaults import DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_VERIFY_TOP
from aoizora.errors import AoizoraError, ExecutorError
from aoizora.hlo.algorithm import RingOrder
from aoizora.hlo.builder import build_program
from aoizora.hlo.program import OpaqueCost, OpaqueOp, Program
from aoizora.stage2.compile_cache import CompileCache, CompileRecord
from aoizora.stage2.compile_workers import (
    ChildResult, CompileExecutor, CompileTimeout, CompileWorkers, WorkloadNotTransferable, device_ids_of,
    memory_bytes,
)
from aoizora.placement import JAX_DEFAULT, Placement, enumerate_placements
from aoizora.workload import LOWERING_LOCK, StrategySpace
from aoizora.toolchain import CompilerFlags, compile_lowered
from aoizora.topology import Topology

log = logging.getLogger("aoizora.stage2")


@dataclass
class Compiled:
    """A strategy compiled for the slice (over one device order)."""

    key: str
    program: Program
    memory_bytes: int | None
    compile_seconds: float  # libtpu's time for this program (when it was compiled, if from the cache)
    placement_name: str
    from_cache: bool = False


@dataclass
class Scored:
    """One (strategy, placement) pair and its Q2 prediction."""

    key: str
    placement: Placement
    q2: Q2Result
    program: Program  # the compiled program it was scored on
    verified: bool = False  # scored on a program compiled with this placement's own device order


@dataclass
class StrategyOutcome:
    key: str
    strategy: Any
    compiled: Compiled | None = None
    dropped: str | None = None  # reason, when the compiler refused or timed out
    scored: list[Scored] = field(default_factory=list)

    @property
    def best(self) -> Scored | None:
        return min(self.scored, key=lambda s: s.q2.step_seconds) if self.scored else None

    @property
    def jax_default(self) -> Scored | None:
        return next((s for s in self.scored if s.placement.name == JAX_DEFAULT), None)


def compile_with_timeout(lowered: Any, timeout_s: float | None, flags: CompilerFlags | None = None) -> Any:
    """`lowered.compile()` with `flags` in a thread of this process; CompileTimeout after `timeout_s`.

    The fallback for workloads that cannot go to a child process: the compile cannot be stopped,
    so on timeout the thread is abandoned and runs to its end.
    """
    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["compiled"] = compile_lowered(lowered, flags)
        except BaseException as exc:  # reported to the caller
            box["error"] = exc

    worker = threading.Thread(target=work, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        raise CompileTimeout(f"compile did not finish within {timeout_s:.0f} s")
    if "error" in box:
        raise box["error"]
    return box["compiled"]


def shared_compile_placement(space: StrategySpace, topology: Topology, strategy: Any) -> Placement:
    """The placement whose device order Stage 2 compiles a strategy over (its first), the program
    then scored on every placement."""
    return enumerate_placements(topology, space.mesh_spec(strategy)).placements[0]


def compile_strategy(
    space: StrategySpace, strategy: Any, key: str, topology: Topology, placement: Placement, timeout_s: float | None,
    cache: CompileCache | None = None,
    flags: CompilerFlags | None = None,
    executor: CompileExecutor | None = None,
) -> Compiled:
    """Compile `strategy` over `placement`'s device order with compiler `flags` (or read it from `cache`).

    The program is lowered here and looked up in `cache` first; a miss is compiled by `executor`
    (default: a child process started for this compile), in a process killed when the compile exceeds
    `timeout_s` or the caller is interrupted; only a finished compile is stored in `cache`. A
    space that cannot go to a child process (see `aoizora.stage2.compile_workers`) is compiled in
    this process, where a timeout abandons the compile instead of stopping it.
    Raises the compiler's error (or CompileTimeout); refusals such as out-of-HBM are cached too.
    """
    from aoizora.toolchain import toolchain_versions

    mesh = placement.jax_mesh(topology)
    with LOWERING_LOCK:  # lowerings run one at a time, compiles in parallel
        inputs = space.lowering_inputs(strategy, mesh)
        lowered = inputs.lower()
        text = lowered.as_text()
        entry = None
        if cache is not None:
            entry = cache.key(text, topology.name, [d.id for d in mesh.devices.flat], toolchain_versions(), flags)
    hook: Callable[[OpaqueOp], OpaqueCost | None] = lambda op: space.compiled_kernel_cost(strategy, op)  # noqa: E731
    if cache is not None and entry is not None:
        record = cache.get(entry)
        if record is not None:
            if record.error is not None:
                raise CachedCompileError(record.error)
            try:
                program = build_program(record.hlo_text, opaque_cost=hook, device_ids=record.device_ids)
            except AoizoraError as exc:  # unparseable: the entry is not trusted, the program is compiled again
                cache.discard(entry, f"{type(exc).__name__}: {exc}")
            else:
                return Compiled(key, program, record.memory_bytes, record.compile_seconds, placement.name,
                                from_cache=True)
    label = f"{key} / {placement.name} / {topology.name}"
    t0 = time.perf_counter()
    try:
        result = _compile_miss(space, strategy, topology, placement, lowered, text, timeout_s, flags, executor)
    except Exception as exc:  # timeouts are not cached: only the compiler's refusal for memory is
        if cache is not None and entry is not None and _is_out_of_memory(exc):
            cache.put(entry, CompileRecord(None, None, None, time.perf_counter() - t0, error=drop_reason(exc),
                                           label=label))
        raise
    program = build_program(result.hlo_text, opaque_cost=hook, device_ids=result.device_ids)
    if cache is not None and entry is not None:
        cache.put(entry, CompileRecord(result.hlo_text, program.device_ids, result.memory_bytes,
                                       result.compile_seconds, label=label))
    return Compiled(key, program, result.memory_bytes, result.compile_seconds, placement.name)


def _compile_miss(space: StrategySpace, strategy: Any, topology: Topology, placement: Placement, lowered: Any,
                  text: str, timeout_s: float | None, flags: CompilerFlags | None,
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


class CachedCompileError(Exception):
    """The compiler refused this program before (recorded in the compile cache); the message is its reason."""


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

    def __init__(self, space: StrategySpace, topology: Topology, timeout_s: float | None,
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

    def __enter__(self) -> "EarlyCompiles":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if exc_type is not None:
            self.executor.close()  # kills a compile still running: its thread returns at once
        if self._threads is not None:
            self._threads.shutdown(wait=exc_type is None, cancel_futures=exc_type is not None)


def _is_out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return "RESOURCE_EXHAUSTED" in text or "Ran out of memory" in text


# How `drop_reason` starts when the compiler refuses a program for memory (cached refusals too):
# the program's buffers overflow HBM, or a kernel's working set overflows the scoped VMEM
# ("CompileTimeScopedVmemOom", e.g. splash blocks too large for the chip). Either way it cannot run.
OUT_OF_HBM = "out of HBM at compile"
OUT_OF_VMEM = "out of scoped VMEM at compile"


def memory_kind(dropped: str) -> str | None:
    """The memory a drop reason says the compiler refused the program for ("HBM", "scoped VMEM"), else None."""
    if dropped.startswith(OUT_OF_VMEM):
        return "scoped VMEM"
    if dropped.startswith(OUT_OF_HBM):
        return "HBM"
    return None


def refused_for_memory(dropped: str) -> bool:
    """Whether a drop reason is the compiler's refusal for HBM or scoped VMEM."""
    return memory_kind(dropped) is not None


def _memory_label(text: str) -> str:
    return OUT_OF_VMEM if "vmem" in text.lower() else OUT_OF_HBM


def drop_reason(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, CachedCompileError):
        # refusals cached before the VMEM label existed all start with the HBM one
        if text.startswith(f"{OUT_OF_HBM}: "):
            return f"{_memory_label(text)}: {text[len(OUT_OF_HBM) + 2:]}"
        return text
    first = text.strip().splitlines()[0][:240] if text.strip() else type(exc).__name__
    if _is_out_of_memory(exc):
        return f"{_memory_label(first)}: {first}"
    if isinstance(exc, CompileTimeout):
        return first
    return f"compile failed: {getattr(exc, 'original_type', type(exc).__name__)}: {first}"


@dataclass
class Stage2Summary:
    """What Stage 2 gave the compiler and what Stage 1's bound let it skip.

    `compiled`: keys given to the compiler, in the order they were started (cache hits and
    refusals included); `pruned`: keys not compiled because their Q1 reached the best Q2 found
    (with both numbers); `bound_violations`: compiled strategies whose Q1 exceeded their own best
    Q2 (after the first, nothing more is pruned).
    """

    compiled: list[str] = field(default_factory=list)
    pruned: dict[str, dict[str, float]] = field(default_factory=dict)
    bound_violations: dict[str, dict[str, float]] = field(default_factory=dict)
    workers: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"compiles": len(self.compiled), "compiled_strategies": list(self.compiled),
                "pruned_by_q1": dict(self.pruned), "q1_bound_violations": dict(self.bound_violations),
                "workers": self.workers}


#: Relative slack of the bound check (floating-point rounding where Q1 and Q2 meet at the bound).
BOUND_TOLERANCE = 1e-9


class BoundedSweep:
    """Compiles in bound order, pruned by Q1, with up to `workers` in flight.

    The order: `baselines` first (never pruned: they are reported whatever happens, and their Q2
    can prune the others), then the other strategies by ascending lower bound (strategies without
    one first: they cannot be pruned, and their Q2 helps prune). Before a strategy starts, its
    lower bound is compared with the best Q2 of the pairs scored so far; a strategy whose bound
    reaches it cannot beat that pair on any placement. The decision to prune is only taken when
    no compile is in flight, so it rests on every strategy started before it, as in a sequential
    sweep: whatever is pruned, the sequential sweep prunes too. With several workers, a freed worker
    starts the next strategy before the finished ones are scored, and a strategy started while
    others were still compiling or being scored may be one the sequential sweep would have pruned; it is
    scored all the same, and cannot change the minimum (its Q2 >= its bound >= the sequential
    best). The compiled set is thus the sequential one, or a superset that cannot change the
    minimum, whenever the bound holds.

    The bound is checked on every compiled strategy that has one (bound <= its best Q2, with a
    relative tolerance of `BOUND_TOLERANCE`); after the first violation nothing more is pruned.
    """

    def __init__(self, entries: list[tuple[str, Any]], lower_bounds: Mapping[str, float], baselines: Collection[str],
                 workers: int, compile_one: Callable[[str, Any], Compiled], finish: Callable[[int, StrategyOutcome], None],
                 on_pruned: Callable[[str], None] | None) -> None:
        self.entries = list(entries)
        self.bounds = dict(lower_bounds)
        self.baselines = set(baselines)
        self.workers = max(1, workers)
        self.compile_one = compile_one
        self.finish = finish
        self.on_pruned = on_pruned
        self.pending: list[int] = sorted(range(len(self.entries)), key=self._order)
        self.best_q2 = math.inf
        self.summary = Stage2Summary(workers=self.workers)

    def _order(self, i: int) -> tuple[int, float, int]:
        key = self.entries[i][0]
        if key in self.baselines:
            return (0, 0.0, i)
        return (1, self.bounds.get(key, -math.inf), i)

    def add(self, entry: tuple[str, Any]) -> None:
        """A strategy to compile after those pending (a backfill: its bound is no lower than theirs)."""
        self.entries.append(entry)
        self.pending.append(len(self.entries) - 1)

    def scored(self, key: str, step_seconds: list[float]) -> None:
        """A compiled strategy's Q2 per placement: the best so far, and the bound checked."""
        if not step_seconds:
            return
        own = min(step_seconds)
        self.best_q2 = min(self.best_q2, own)
        bound = self.bounds.get(key)
        if bound is not None and bound > own * (1 + BOUND_TOLERANCE):
            self.summary.bound_violations[key] = {"q1_seconds": bound, "best_q2_seconds": own}

    def _prunable(self, i: int) -> bool:
        key = self.entries[i][0]
        if self.summary.bound_violations or key in self.baselines or key not in self.bounds:
            return False
        return self.bounds[key] >= self.best_q2

    def reopen(self, best_q2: float) -> bool:
        """Pruned strategies whose bound is below `best_q2` (the best pair after verification) go
        back to the pending list; True when any did."""
        back = [i for i, (key, _) in enumerate(self.entries) if key in self.summary.pruned and self.bounds[key] < best_q2]
        for i in back:
            del self.summary.pruned[self.entries[i][0]]
        self.pending = sorted(self.pending + back, key=self._order)
        self.best_q2 = best_q2
        return bool(back)

    def run(self, abort: Callable[[], None]) -> None:
        """Compile until every strategy is compiled or pruned.

        On an error or Ctrl-C, `abort` stops the compiles in flight (it kills their processes, so
        the threads waiting for them return at once) before the exception goes on.
        """
        pool = ThreadPoolExecutor(self.workers, thread_name_prefix="aoizora-compile")
        running: dict[Future[Compiled], int] = {}
        try:
            self._loop(pool, running)
        except BaseException:
            abort()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)

    def _loop(self, pool: ThreadPoolExecutor, running: dict[Future[Compiled], int]) -> None:
        while True:
            self._start(pool, running)
            if not running:
                if not self.pending:
                    return
                i = self.pending.pop(0)  # prunable, and decided on every compile started before it
                key = self.entries[i][0]
                self.summary.pruned[key] = {"q1_seconds": self.bounds[key], "best_q2_seconds": self.best_q2}
                if self.on_pruned:
                    self.on_pruned(key)
                continue
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            finished = []
            for fut in sorted(done, key=lambda f: running[f]):
                i = running.pop(fut)
                outcome = StrategyOutcome(*self.entries[i])
                try:
                    outcome.compiled = fut.result()
                except ExecutorError:  # the executor cannot compile at all: not one strategy's failure
                    raise
                except Exception as exc:
                    outcome.dropped = drop_reason(exc)
                finished.append((i, outcome))
            if self.workers > 1:
                # the freed workers take the next strategies before the finished ones are scored
                # (the bench simulates every placement there, a minute on a 4x4 slice): a start
                # decided on the best so far may only add a compile the sequential sweep prunes
                self._start(pool, running)
            for i, outcome in finished:
                self.finish(i, outcome)

    def _start(self, pool: ThreadPoolExecutor, running: dict[Future[Compiled], int]) -> None:
        """Start pending strategies while a worker is free and the next one cannot be pruned."""
        while self.pending and len(running) < self.workers and not self._prunable(self.pending[0]):
            i = self.pending.pop(0)
            key, strategy = self.entries[i]
            self.summary.compiled.append(key)
            running[pool.submit(self.compile_one, key, strategy)] = i


def run_stage2(
    space: StrategySpace,
    kept: list[tuple[str, Any]],
    topology: Topology,
    *,
    options: Q2Options | None = None,
    compile_timeout_s: float | None = DEFAULT_COMPILE_TIMEOUT_S,
    verify_top: int = DEFAULT_VERIFY_TOP,
    on_compiled: Callable[[StrategyOutcome], None] | None = None,
    compile_cache: CompileCache | None = None,
    reserve: list[tuple[str, Any]] | None = None,
    backfill_for: Collection[str] | None = None,
    on_backfill: Callable[[str], None] | None = None,
    flags: CompilerFlags | None = None,
    flags_by_key: Mapping[str, CompilerFlags] | None = None,
    lower_bounds: Mapping[str, float] | None = None,
    baselines: Collection[str] = (),
    on_pruned: Callable[[str], None] | None = None,
    executor: CompileExecutor | None = None,
    started: Mapping[str, Future[Compiled]] | None = None,
    compile_placement: Callable[[str, Any], Placement] | None = None,
) -> tuple[list[StrategyOutcome], dict[str, float], list[str], Stage2Summary]:
    """Compile the kept strategies with compiler `flags` (or a key's own in `flags_by_key`), score
    all placements of each; recompile and re-score the best pairs.

    `lower_bounds` (Stage 1's Q1 per key: a step time no placement can beat) prune the compiles:
    `baselines` are compiled first and always, the others in ascending bound, and a strategy whose
    bound reaches the best Q2 found so far is not compiled (see `BoundedSweep`). `kept` is thus the
    cap: never more is compiled, and the choice is the one compiling all of `kept` gives whenever
    the bound holds. Should the verifying recompile raise the leading pair's Q2 above a pruned
    strategy's bound, that strategy is compiled after all.

    The compiles run in `executor` (default: one local child process, `CompileWorkers(1)`), up to
    its `size` at once, started in the same order; the pruning decisions are those of a sequential
    run (`BoundedSweep`), so the choice equals the sequential one whenever the bound holds. The
    scoring and the verifying recompiles run in this process as results arrive. An error or Ctrl-C
    during the sweep closes `executor` (its compiles in flight are killed). `started`: compiles
    already under way (`EarlyCompiles`), by key; Stage 2 waits for them instead of compiling those
    strategies. `compile_placement(key, strategy)`: the placement whose device order a strategy is
    compiled over (default: its first, `shared_compile_placement`; see
    `aoizora.stage2.compile_order`); a leading pair on that placement needs no verifying recompile.

    A strategy in `backfill_for` (default: every kept one) that the compiler refuses for HBM gives
    its place to the next of `reserve` (Stage 1's next-ranked strategies): Stage 1's memory
    estimate is approximate, and the planner should still score as many strategies as asked.
    Returns the outcomes (in `kept`'s order, then backfills), seconds per phase, notes (e.g. when
    a recompile changed the program) and what was compiled and pruned.
    """
    model = CostModel(topology, options)
    pool = executor if executor is not None else CompileWorkers(1)
    replaceable = set(k for k, _ in kept) if backfill_for is None else set(backfill_for)
    run = _Stage2Run(space, topology, model, pool, compile_timeout_s, compile_cache, flags, flags_by_key or {},
                     started or {}, list(reserve or []), replaceable, on_compiled, on_backfill, compile_placement)
    run.sweep = BoundedSweep(kept, lower_bounds or {}, baselines, pool.size, run.compile_one, run.finish, on_pruned)
    try:
        outcomes = run.sweep_and_verify(verify_top)
    finally:
        if executor is None:
            pool.close()
    if run.cached:
        run.timings["compile_cached"] = sum(run.cached)
    run.notes += _sweep_notes(run.sweep.summary, run.cached, run.sweep.best_q2)
    return outcomes, run.timings, run.notes, run.sweep.summary


class _Stage2Run:
    """One `run_stage2`: compiles a strategy (or waits for its early compile), scores each compiled
    one on every placement, backfills a strategy the compiler refuses for HBM from `reserve`, and
    keeps the seconds and notes."""

    sweep: BoundedSweep

    def __init__(self, space: StrategySpace, topology: Topology, model: CostModel, pool: CompileExecutor,
                 compile_timeout_s: float | None, compile_cache: CompileCache | None, flags: CompilerFlags | None,
                 flags_by_key: Mapping[str, CompilerFlags], started: Mapping[str, Future[Compiled]],
                 spare: list[tuple[str, Any]], replaceable: set[str],
                 on_compiled: Callable[[StrategyOutcome], None] | None, on_backfill: Callable[[str], None] | None,
                 compile_placement: Callable[[str, Any], Placement] | None = None) -> None:
        self.space, self.topology, self.model, self.pool = space, topology, model, pool
        self.compile_placement = compile_placement
        self.compile_timeout_s, self.compile_cache = compile_timeout_s, compile_cache
        self.flags, self.flags_by_key, self.started = flags, flags_by_key, started
        self.spare, self.replaceable = spare, replaceable
        self.on_compiled, self.on_backfill = on_compiled, on_backfill
        self.timings = {"compile": 0.0, "score": 0.0, "verify": 0.0}
        self.notes: list[str] = []
        self.cached: list[float] = []  # original compile seconds of programs read from the compile cache
        self.finished: dict[int, StrategyOutcome] = {}

    def flags_of(self, key: str) -> CompilerFlags | None:
        return self.flags_by_key.get(key, self.flags)

    def compile_one(self, key: str, strategy: Any) -> Compiled:
        if key in self.started:
            return self.started[key].result()
        placement = (self.compile_placement(key, strategy) if self.compile_placement is not None
                     else shared_compile_placement(self.space, self.topology, strategy))
        return compile_strategy(self.space, strategy, key, self.topology, placement, self.compile_timeout_s,
                                self.compile_cache, self.flags_of(key), executor=self.pool)

    def finish(self, i: int, outcome: StrategyOutcome) -> None:
        """Score a compiled strategy on every placement; backfill one the compiler refused for memory."""
        key = outcome.key
        if outcome.compiled is not None:
            self._score(outcome)
        self.finished[i] = outcome
        if self.on_compiled:
            self.on_compiled(outcome)
        memory = memory_kind(outcome.dropped) if outcome.dropped else None
        if memory and key in self.replaceable and self.spare:
            nxt = self.spare.pop(0)
            self.sweep.add(nxt)
            self.replaceable.add(nxt[0])
            self.notes.append(f"{key} does not fit in {memory} (compiler); {nxt[0]}, next in Stage 1's ranking, "
                              "compiled in its place")
            if self.on_backfill:
                self.on_backfill(nxt[0])

    def _score(self, outcome: StrategyOutcome) -> None:
        compiled = outcome.compiled
        assert compiled is not None
        if compiled.from_cache:
            self.cached.append(compiled.compile_seconds)
        else:
            self.timings["compile"] += compiled.compile_seconds
        t0 = time.perf_counter()
        for p in enumerate_placements(self.topology, self.space.mesh_spec(outcome.strategy)).placements:
            outcome.scored.append(Scored(outcome.key, p, self.model.evaluate(compiled.program, p), compiled.program))
        self.timings["score"] += time.perf_counter() - t0
        self.sweep.scored(outcome.key, [s.q2.step_seconds for s in outcome.scored])

    def sweep_and_verify(self, verify_top: int) -> list[StrategyOutcome]:
        """Run the sweep, verify the leading pairs, and sweep again while a recompile reopens a pruned
        strategy; the outcomes in the sweep's order."""
        verified: set[tuple[str, str]] = set()
        while True:
            t0 = time.perf_counter()
            self.sweep.run(abort=self.pool.close)
            self.timings["compile_wall"] = self.timings.get("compile_wall", 0.0) + time.perf_counter() - t0
            outcomes = [self.finished[i] for i in sorted(self.finished)]
            t0 = time.perf_counter()
            _verify(self.space, self.topology, self.model, outcomes, verify_top, verified, self.compile_timeout_s,
                    self.compile_cache, self.flags_of, self.timings, self.notes, self.pool)
            self.timings["verify"] += time.perf_counter() - t0
            best = min((s.q2.step_seconds for o in outcomes for s in o.scored), default=math.inf)
            if not self.sweep.reopen(best):
                return outcomes
            self.notes.append("the verifying recompile raised the leading pair's Q2 above a pruned strategy's Q1: "
                              "that strategy was compiled after all")


def _sweep_notes(summary: Stage2Summary, cached: list[float], best_q2: float) -> list[str]:
    """What the plan says of the sweep: compiles read from the cache, strategies pruned, bound violations."""
    notes = []
    if cached:
        notes.append(f"{len(cached)} of {len(summary.compiled)} compiles read from the compile cache "
                     f"(they took {sum(cached):.1f} s when compiled)")
    if summary.pruned:
        notes.append(f"{len(summary.pruned)} of {len(summary.pruned) + len(summary.compiled)} strategies not compiled: "
                     f"their Q1 is no lower than the best Q2 found ({best_q2 * 1e3:.3f} ms)")
    if summary.bound_violations:
        shown = ", ".join(f"{k} (Q1 {v['q1_seconds'] * 1e3:.3f} ms > Q2 {v['best_q2_seconds'] * 1e3:.3f} ms)"
                          for k, v in summary.bound_violations.items())
        notes.append(f"Q1 exceeded the best Q2 of {shown}: the bound is not trusted, nothing more was pruned")
    return notes


#: Generations on which libtpu 0.0.42.1's compiled program depends on the mesh's device order only
#: through each collective's ``has_reordering_map``: `benchmarks/order_dependence.py` compiles a small
#: transformer's strategies over several placements (v5e:2x4: 2 of 6 strategies differ, each only
#: in that flag of its ``1DAllGatherNonMajorDim`` all-gathers), and Wan programs compiled over two
#: orders on v5e and v6e were identical. On TPU7x the collectives carry explicit ICI rings and
#: SparseCore assignments that change with the order; other generations were not probed.
REORDERING_MAP_ONLY_GENERATIONS = frozenset({"v5e", "v6e"})


def recompile_cannot_change_q2(model: CostModel, program: Program, placement: Placement) -> bool:
    """Whether recompiling `program`'s strategy over `placement`'s own device order leaves its Q2 as is.

    The rule: on a generation in `REORDERING_MAP_ONLY_GENERATIONS` the recompiled program differs
    at most in which collectives keep a reordering map, which Q2 reads only under the `auto` ring
    order, and there only for a collective whose listed and best rings cost differently on this
    placement (`CostModel.order_sensitive_collectives`). With no such collective, Q2 cannot change.
    """
    if model.topology.hardware.generation not in REORDERING_MAP_ONLY_GENERATIONS:
        return False
    if model.options.order is not RingOrder.REORDERING_MAP:
        return True
    return not model.order_sensitive_collectives(program, placement)


def _verify(space: StrategySpace, topology: Topology, model: CostModel, outcomes: list[StrategyOutcome],
            verify_top: int, verified: set[tuple[str, str]], timeout_s: float | None, cache: CompileCache | None,
            flags_of: Callable[[str], CompilerFlags | None], timings: dict[str, float], notes: list[str],
            pool: CompileExecutor) -> None:
    """Recompile the leading `verify_top` pairs (not verified before) with their own device order; re-score them."""
    by_key = {o.key: o for o in outcomes}
    # among pairs of one strategy with equal Q2, the one on its compile placement leads: it needs no recompile
    rank = {o.key: i for i, o in enumerate(outcomes)}
    pairs = sorted((s for o in outcomes for s in o.scored), key=lambda s: (
        s.q2.step_seconds, rank[s.key], s.placement.name != by_key[s.key].compiled.placement_name))
    for s in pairs[:verify_top]:
        if (s.key, s.placement.name) in verified:
            continue
        verified.add((s.key, s.placement.name))
        if s.placement.name == by_key[s.key].compiled.placement_name:  # its program is its own compile
            s.verified = True
            continue
        if recompile_cannot_change_q2(model, s.program, s.placement):
            notes.append(f"{s.key} / {s.placement.name}: not recompiled with its own device order: on "
                         f"{topology.hardware.generation} that can change only the compiler's ring reordering, "
                         f"which no collective's Q2 depends on here")
            continue
        outcome = by_key[s.key]
        try:
            own = compile_strategy(space, outcome.strategy, s.key, topology, s.placement, timeout_s, cache,
                                   flags_of(s.key), executor=pool)
        except ExecutorError:
            raise
        except Exception as exc:
            notes.append(f"recompile of {s.key} / {s.placement.name} failed ({drop_reason(exc)}); kept the shared compile")
            continue
        if own.from_cache:
            timings["verify_cached"] = timings.get("verify_cached", 0.0) + own.compile_seconds
        rescored = model.evaluate(own.program, s.placement)
        if abs(rescored.step_seconds - s.q2.step_seconds) > 1e-9 * max(1.0, s.q2.step_seconds):
            notes.append(
                f"{s.key} / {s.placement.name}: compiling with this device order changed Q2 from "
                f"{s.q2.step_seconds * 1e3:.3f} ms to {rescored.step_seconds * 1e3:.3f} ms"
            )
        s.q2, s.program, s.verified = rescored, own.program, True
