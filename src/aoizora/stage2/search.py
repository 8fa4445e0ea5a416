"""Stage 2: compile the Top-K strategies for the slice, score every placement with Q2, choose.

One compile per strategy serves all its placements: the compiled replica groups are logical mesh
positions, so a placement only relabels them. The compiler's algorithm config can depend on the
device order (a permuted mesh turned `has_reordering_map` off in one test), so the best few pairs
are recompiled with their own device order and re-scored before the final choice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

from aoizora.cost import CostModel, Q2Options, Q2Result
from aoizora.defaults import DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_VERIFY_TOP
from aoizora.errors import AoizoraError
from aoizora.hlo.builder import build_program, program_from_compiled
from aoizora.hlo.program import OpaqueCost, OpaqueOp, Program
from aoizora.stage2.compile_cache import CompileCache, CompileRecord
from aoizora.placement import JAX_DEFAULT, Placement, enumerate_placements
from aoizora.workload import StrategySpace
from aoizora.toolchain import CompilerFlags, compile_lowered
from aoizora.topology import Topology


class CompileTimeout(Exception):
    pass


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
    """`lowered.compile()` with `flags` in a worker thread; CompileTimeout after `timeout_s` (the thread is abandoned)."""
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


def compile_strategy(
    space: StrategySpace, strategy: Any, key: str, topology: Topology, placement: Placement, timeout_s: float | None,
    cache: CompileCache | None = None,
    flags: CompilerFlags | None = None,
) -> Compiled:
    """Compile `strategy` over `placement`'s device order with compiler `flags` (or read it from `cache`).

    Raises the compiler's error (or CompileTimeout); refusals such as out-of-HBM are cached too.
    """
    import jax

    from aoizora.toolchain import toolchain_versions

    mesh = placement.jax_mesh(topology)
    inputs = space.lowering_inputs(strategy, mesh)
    lowered = jax.jit(inputs.fn, **inputs.jit_kwargs).lower(*inputs.args, **inputs.kwargs)
    hook: Callable[[OpaqueOp], OpaqueCost | None] = lambda op: space.compiled_kernel_cost(strategy, op)  # noqa: E731
    entry = None
    if cache is not None:
        entry = cache.key(lowered.as_text(), topology.name, [d.id for d in mesh.devices.flat], toolchain_versions(),
                          flags)
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
        compiled = compile_with_timeout(lowered, timeout_s, flags)
    except Exception as exc:  # timeouts are not cached: only the compiler's out-of-HBM refusal is
        if cache is not None and entry is not None and _is_out_of_memory(exc):
            cache.put(entry, CompileRecord(None, None, None, time.perf_counter() - t0, error=drop_reason(exc),
                                           label=label))
        raise
    seconds = time.perf_counter() - t0
    program = program_from_compiled(compiled, opaque_cost=hook)
    memory = _memory_bytes(compiled)
    if cache is not None and entry is not None:
        cache.put(entry, CompileRecord(compiled.as_text(), program.device_ids, memory, seconds, label=label))
    return Compiled(key, program, memory, seconds, placement.name)


class CachedCompileError(Exception):
    """The compiler refused this program before (recorded in the compile cache); the message is its reason."""


def _is_out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return "RESOURCE_EXHAUSTED" in text or "Ran out of memory" in text


def _memory_bytes(compiled: Any) -> int | None:
    try:
        m = compiled.memory_analysis()
    except Exception:
        return None
    if m is None:
        return None
    return int(
        m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes - m.alias_size_in_bytes
        + getattr(m, "generated_code_size_in_bytes", 0)
    )


OUT_OF_HBM = "out of HBM at compile"  # how `drop_reason` starts for the compiler's HBM refusal (cached ones too)


def drop_reason(exc: BaseException) -> str:
    if isinstance(exc, CachedCompileError):
        return str(exc)
    text = str(exc)
    first = text.strip().splitlines()[0][:240] if text.strip() else type(exc).__name__
    if _is_out_of_memory(exc):
        return f"{OUT_OF_HBM}: {first}"
    if isinstance(exc, CompileTimeout):
        return first
    return f"compile failed: {type(exc).__name__}: {first}"


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
) -> tuple[list[StrategyOutcome], dict[str, float], list[str]]:
    """Compile each kept strategy with compiler `flags` (or its own in `flags_by_key`), score all its
    placements; recompile and re-score the best pairs.

    A strategy in `backfill_for` (default: every kept one) that the compiler refuses for HBM gives
    its place to the next of `reserve` (Stage 1's next-ranked strategies): Stage 1's memory
    estimate is approximate, and the planner should still score as many strategies as asked.
    Returns the outcomes, seconds per phase, and notes (e.g. when a recompile changed the program).
    """
    model = CostModel(topology, options)

    def flags_of(key: str) -> CompilerFlags | None:
        return (flags_by_key or {}).get(key, flags)

    outcomes: list[StrategyOutcome] = []
    timings = {"compile": 0.0, "score": 0.0, "verify": 0.0}
    notes: list[str] = []
    cached: list[float] = []  # original compile seconds of programs read from the compile cache
    queue = list(kept)
    spare = list(reserve or [])
    replaceable = set(k for k, _ in kept) if backfill_for is None else set(backfill_for)
    for key, strategy in queue:  # a list iterator also visits what is appended while it runs
        outcome = StrategyOutcome(key, strategy)
        space_p = enumerate_placements(topology, space.mesh_spec(strategy))
        default = space_p.placements[0]
        try:
            outcome.compiled = compile_strategy(space, strategy, key, topology, default, compile_timeout_s, compile_cache,
                                                flags_of(key))
            if outcome.compiled.from_cache:
                cached.append(outcome.compiled.compile_seconds)
            else:
                timings["compile"] += outcome.compiled.compile_seconds
        except Exception as exc:
            outcome.dropped = drop_reason(exc)
        if outcome.compiled is not None:
            t0 = time.perf_counter()
            for p in space_p.placements:
                outcome.scored.append(Scored(key, p, model.evaluate(outcome.compiled.program, p), outcome.compiled.program))
            timings["score"] += time.perf_counter() - t0
        outcomes.append(outcome)
        if on_compiled:
            on_compiled(outcome)
        if outcome.dropped and outcome.dropped.startswith(OUT_OF_HBM) and key in replaceable and spare:
            nxt = spare.pop(0)
            queue.append(nxt)
            replaceable.add(nxt[0])
            notes.append(f"{key} does not fit in HBM (compiler); {nxt[0]}, next in Stage 1's ranking, compiled in its place")
            if on_backfill:
                on_backfill(nxt[0])

    if cached:
        notes.append(f"{len(cached)} of {len(queue)} compiles read from the compile cache "
                     f"(they took {sum(cached):.1f} s when compiled)")
        timings["compile_cached"] = sum(cached)

    # Verify the leading pairs on programs compiled with their own device order.
    pairs = sorted((s for o in outcomes for s in o.scored), key=lambda s: s.q2.step_seconds)
    by_key = {o.key: o for o in outcomes}
    t0 = time.perf_counter()
    for s in pairs[:verify_top]:
        if s.placement.name == JAX_DEFAULT:
            s.verified = True
            continue
        outcome = by_key[s.key]
        try:
            own = compile_strategy(space, outcome.strategy, s.key, topology, s.placement, compile_timeout_s, compile_cache,
                                   flags_of(s.key))
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
    timings["verify"] = time.perf_counter() - t0
    return outcomes, timings, notes
