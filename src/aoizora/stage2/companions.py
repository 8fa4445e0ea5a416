"""The pipeline's programs besides the step (`CompanionProgram`: a video's VAE decode), compiled
while Stage 2 compiles, and costed by Q2 and the simulator as a step is.

Each depends on the slice and its own inputs, never on the strategy: one compile per program,
through the compile cache (so a re-plan reads it back), in the executor Stage 2 uses (so the
compiles running at once stay bounded by its size). Under a time budget a companion compile is
stopped, or never started, like a step's: the budget's record lists it apart from the strategies
(`companions_not_costed`), the plan is then not cached, and the compile cache keeps only finished
compiles.
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from aoizora.cost import CostModel
from aoizora.placement import Placement
from aoizora.sim import simulate
from aoizora.stage2.budget import NOT_COMPILED, STOPPED, TimeBudget, compile_timeout
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compile_limits import CompileLimit
from aoizora.stage2.compile_workers import CompileExecutor, CompileTimeout
from aoizora.stage2.compiling import compile_strategy
from aoizora.stage2.outcomes import Compiled, drop_reason
from aoizora.toolchain import CompilerFlags
from aoizora.topology import Topology
from aoizora.workload import CompanionProgram


@dataclasses.dataclass(frozen=True)
class ProgramCost:
    """A compiled program's predicted time on its placement, as Q2 gives it (`seconds`, and its
    compute, exposed and total communication parts), the simulator's time of it (`sim_seconds`,
    None when not asked for), its collectives, libtpu's per-device HBM, and the compile's time
    (`cached`: read from the compile cache; then the time the cached compile took)."""

    seconds: float
    compute_seconds: float
    exposed_comm_seconds: float
    comm_seconds: float
    sim_seconds: float | None
    collectives: int
    memory_bytes: int | None
    mesh: tuple[int, ...]
    compile_seconds: float
    cached: bool

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "mesh": list(self.mesh)}


def program_cost(compiled: Compiled, topology: Topology, placement: Placement, simulated: bool = True) -> ProgramCost:
    """Q2's (and with `simulated`, the simulator's) time of `compiled` over `placement`."""
    program = compiled.program
    q2 = CostModel(topology).evaluate(program, placement)
    sim = simulate(program, topology, placement).step_seconds if simulated else None
    return ProgramCost(
        seconds=q2.step_seconds, compute_seconds=q2.compute_seconds, exposed_comm_seconds=q2.exposed_comm_seconds,
        comm_seconds=q2.comm_seconds, sim_seconds=sim, collectives=sum(c.multiplicity for c in program.collectives),
        memory_bytes=compiled.memory_bytes, mesh=placement.mesh.shape, compile_seconds=compiled.compile_seconds,
        cached=compiled.from_cache)


def compile_companion(program: CompanionProgram, topology: Topology, timeout_s: CompileLimit | float | None,
                      cache: CompileCache | None, flags: CompilerFlags | None,
                      executor: CompileExecutor | None) -> Compiled:
    """Compile (or read from `cache`) one companion program over its placement's device order."""
    return compile_strategy(program.space, program.strategy, program.label, topology, program.placement, timeout_s,
                            cache, flags, executor)


class CompanionCompiles:
    """The companion programs of a plan, compiling in the background from `start` on; `costs` waits
    for them and costs each (a context manager: leaving it waits for, or on an exception abandons,
    its threads; the executor's owner stops their processes)."""

    def __init__(self, programs: list[CompanionProgram], topology: Topology, compile_timeout_s: float | None,
                 budget: TimeBudget | None, cache: CompileCache | None, flags: CompilerFlags | None,
                 executor: CompileExecutor) -> None:
        self.programs, self.topology, self.compile_timeout_s = programs, topology, compile_timeout_s
        self.budget, self.cache, self.flags, self.executor = budget, cache, flags, executor
        self.futures: dict[str, Future[Compiled]] = {}
        self._threads: ThreadPoolExecutor | None = None
        self._abandoned = False  # a compile the budget's end left running

    def start(self) -> None:
        if not self.programs:
            return
        self._threads = ThreadPoolExecutor(len(self.programs), thread_name_prefix="aoizora-companion-compile")
        for p in self.programs:
            self.futures[p.name] = self._threads.submit(self._compile, p)

    def _compile(self, program: CompanionProgram) -> Compiled:
        timeout = compile_timeout(self.budget, self.compile_timeout_s)
        if self.budget is not None and timeout.spent:
            self.budget.record.companions_not_costed.append(program.label)
            raise _Cut(NOT_COMPILED)
        try:
            return compile_companion(program, self.topology, timeout, self.cache, self.flags, self.executor)
        except CompileTimeout as exc:
            if self.budget is not None and exc.wall_clock:
                self.budget.record.companions_not_costed.append(program.label)
                raise _Cut(STOPPED) from None
            raise

    def waiting(self) -> list[str]:
        """The labels of the companion compiles still running."""
        return [p.label for p in self.programs if p.name in self.futures and not self.futures[p.name].done()]

    def costs(self, simulated: bool = True) -> dict[str, dict[str, Any]]:
        """name -> the program's `ProgramCost` JSON (with its `label`), or {"label", "dropped": reason}.
        Under a time budget it waits no longer than the budget lasts: a compile still running then
        (one that waited for a free compile process) is listed as stopped and left to the executor's
        closing."""
        out: dict[str, dict[str, Any]] = {}
        for p in self.programs:
            wait = None if self.budget is None else max(self.budget.remaining(), 0.0)
            try:
                compiled = self.futures[p.name].result(timeout=wait)
            except FutureTimeout:
                assert self.budget is not None
                self.budget.record.companions_not_costed.append(p.label)
                self._abandoned = True
                out[p.name] = {"label": p.label, "dropped": STOPPED}
                continue
            except _Cut as exc:
                out[p.name] = {"label": p.label, "dropped": str(exc)}
                continue
            except Exception as exc:  # the compiler's refusal or error: the plan says why, without the part
                out[p.name] = {"label": p.label, "dropped": drop_reason(exc)}
                continue
            out[p.name] = {"label": p.label, **program_cost(compiled, self.topology, p.placement, simulated).to_json()}
        return out

    def __enter__(self) -> CompanionCompiles:
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        if self._threads is not None:
            self._threads.shutdown(wait=exc_type is None and not self._abandoned, cancel_futures=exc_type is not None)


class _Cut(Exception):
    """A companion compile the time budget kept from starting or stopped (message: why)."""
