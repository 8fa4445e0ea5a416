"""Stage 2: compile the Top-K strategies for the slice, score every placement with Q2, choose.

One compile per strategy serves all its placements: the compiled replica groups are logical mesh
positions, so a placement only relabels them. The compiler's algorithm config can depend on the
device order (a permuted mesh turned `has_reordering_map` off in one test), so the best few pairs
are recompiled with their own device order and re-scored before the final choice.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from aoizora.cost import CostModel, Q2Options
from aoizora.defaults import DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_VERIFY_TOP
from aoizora.placement import Placement, enumerate_placements
from aoizora.stage2 import compiling
from aoizora.stage2.budget import NOT_COMPILED, STOPPED, OutOfBudget, TimeBudget, compile_timeout
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compile_workers import CompileExecutor, CompileTimeout, CompileWorkers
from aoizora.stage2.compiling import shared_compile_placement
from aoizora.stage2.limit_check import LimitChecks, check_raised_limits
from aoizora.stage2.outcomes import (
    Compiled,
    StrategyOutcome,
    memory_kind,
    scored_on_every_placement,
)
from aoizora.stage2.sweep import BoundedSweep, Stage2Summary
from aoizora.stage2.verify import verify_leading_pairs
from aoizora.toolchain import CompilerFlags
from aoizora.topology import Topology
from aoizora.workload import StrategySpace


@dataclass(frozen=True)
class Stage2Config:
    """What Stage 2 does: how it scores and verifies, what it compiles with, and what prunes it.

    `options`: Q2's options (default `Q2Options()`). `compile_timeout_s`: a compile's limit.
    `verify_top`: the leading pairs recompiled over their own device order. `compile_cache`: where
    compiled programs are kept (None: none). `flags`: the compiler flags of every compile, or a
    key's own in `flags_by_key`. `lower_bounds`: Stage 1's Q1 per key. `baselines`: keys compiled
    first and never pruned. `reserve`: the strategies that replace one the compiler refuses for
    memory, among `backfill_for` (None: every kept one). `compile_placement(key, strategy)`: the
    placement a strategy is compiled over (None: its first). `budget`: the planning time budget
    (None: none): no compile starts after it ends, one still running then is stopped, and no pair
    is verified after it (`aoizora.stage2.budget`). `check_limits`: before the leading pair keeps a
    scoped-VMEM limit its compiled form left out, compile it at that limit and keep whichever of the
    two is faster by Q2 (`aoizora.stage2.limit_check`).
    """

    options: Q2Options | None = None
    compile_timeout_s: float | None = DEFAULT_COMPILE_TIMEOUT_S
    verify_top: int = DEFAULT_VERIFY_TOP
    compile_cache: CompileCache | None = None
    flags: CompilerFlags | None = None
    flags_by_key: Mapping[str, CompilerFlags] = field(default_factory=dict)
    lower_bounds: Mapping[str, float] = field(default_factory=dict)
    baselines: Collection[str] = ()
    reserve: Sequence[tuple[str, Any]] = ()
    backfill_for: Collection[str] | None = None
    compile_placement: Callable[[str, Any], Placement] | None = None
    budget: TimeBudget | None = None
    check_limits: bool = True


@dataclass
class Stage2Result:
    """What `run_stage2` returns: the outcomes (in `kept`'s order, then backfills), seconds per
    phase, notes for the plan, and what was compiled and pruned."""

    outcomes: list[StrategyOutcome]
    timings: dict[str, float]
    notes: list[str]
    summary: Stage2Summary


def run_stage2(
    space: StrategySpace,
    kept: list[tuple[str, Any]],
    topology: Topology,
    config: Stage2Config | None = None,
    *,
    executor: CompileExecutor | None = None,
    started: Mapping[str, Future[Compiled]] | None = None,
    on_compiled: Callable[[StrategyOutcome], None] | None = None,
    on_backfill: Callable[[str], None] | None = None,
    on_pruned: Callable[[str], None] | None = None,
) -> Stage2Result:
    """Compile the kept strategies with `config.flags` (or a key's own in `config.flags_by_key`),
    score all placements of each; recompile and re-score the best `config.verify_top` pairs.

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
    Returns a `Stage2Result`: the outcomes (in `kept`'s order, then backfills), seconds per phase,
    notes (e.g. when a recompile changed the program) and what was compiled and pruned.
    (`config` holds the other settings named above; `on_compiled`, `on_backfill` and `on_pruned` are
    called as strategies finish, are backfilled or pruned.)
    """
    config = config if config is not None else Stage2Config()
    model = CostModel(topology, config.options)
    pool = executor if executor is not None else CompileWorkers(1)
    replaceable = set(k for k, _ in kept) if config.backfill_for is None else set(config.backfill_for)
    run = _Stage2Run(space, topology, model, pool, config, started or {}, replaceable, on_compiled, on_backfill)
    run.sweep = BoundedSweep(kept, config.lower_bounds, config.baselines, pool.size, run.compile_one, run.finish,
                             on_pruned, expired=config.budget.expired if config.budget is not None else None,
                             on_out_of_time=run.not_started)
    try:
        outcomes = run.sweep_and_verify(config.verify_top)
    finally:
        if executor is None:
            pool.close()
    if run.cached:
        run.timings["compile_cached"] = sum(run.cached)
    run.notes += _sweep_notes(run.sweep.summary, run.cached, run.sweep.best_q2)
    return Stage2Result(outcomes, run.timings, run.notes, run.sweep.summary)


class _Stage2Run:
    """One `run_stage2`: compiles a strategy (or waits for its early compile), scores each compiled
    one on every placement, backfills a strategy the compiler refuses for HBM from `reserve`, and
    keeps the seconds and notes."""

    sweep: BoundedSweep

    def __init__(self, space: StrategySpace, topology: Topology, model: CostModel, pool: CompileExecutor,
                 config: Stage2Config, started: Mapping[str, Future[Compiled]], replaceable: set[str],
                 on_compiled: Callable[[StrategyOutcome], None] | None,
                 on_backfill: Callable[[str], None] | None) -> None:
        self.space, self.topology, self.model, self.pool = space, topology, model, pool
        self.compile_placement = config.compile_placement
        self.compile_timeout_s, self.compile_cache = config.compile_timeout_s, config.compile_cache
        self.budget = config.budget
        self.flags, self.flags_by_key, self.started = config.flags, config.flags_by_key, started
        self.spare, self.replaceable = list(config.reserve), replaceable
        self.on_compiled, self.on_backfill = on_compiled, on_backfill
        self.timings = {"compile": 0.0, "score": 0.0, "verify": 0.0}
        self.notes: list[str] = []
        self.cached: list[float] = []  # original compile seconds of programs read from the compile cache
        self.finished: dict[int, StrategyOutcome] = {}
        self.limits = LimitChecks() if config.check_limits else None
        self.baselines = set(config.baselines)

    def flags_of(self, key: str) -> CompilerFlags | None:
        return self.flags_by_key.get(key, self.flags)

    def compile_one(self, key: str, strategy: Any) -> Compiled:
        if key in self.started:
            try:
                return self.started[key].result()
            except CompileTimeout:
                if self.budget is not None and self.budget.expired():
                    self.budget.record.stopped.append(key)
                    raise OutOfBudget(STOPPED) from None
                raise
        placement = (self.compile_placement(key, strategy) if self.compile_placement is not None
                     else shared_compile_placement(self.space, self.topology, strategy))
        timeout = compile_timeout(self.budget, self.compile_timeout_s)
        if self.budget is not None and timeout.spent:
            self.budget.record.not_compiled.append(key)
            raise OutOfBudget(NOT_COMPILED)
        try:
            return compiling.compile_strategy(self.space, strategy, key, self.topology, placement, timeout,
                                              self.compile_cache, self.flags_of(key), executor=self.pool)
        except CompileTimeout as exc:
            if self.budget is not None and exc.wall_clock:
                self.budget.record.stopped.append(key)
                raise OutOfBudget(STOPPED) from None
            raise

    def compile_over(self, key: str, strategy: Any, placement: Placement, as_is: bool) -> Compiled:
        """The strategy compiled over `placement`'s device order: as it runs (`as_is`) or in its
        compiled form (`aoizora.stage2.limit_check`)."""
        timeout = compile_timeout(self.budget, self.compile_timeout_s)
        compiled = compiling.compile_strategy(self.space, strategy, key, self.topology, placement, timeout,
                                              self.compile_cache, self.flags_of(key), executor=self.pool, as_is=as_is)
        if not compiled.from_cache:
            self.timings["compile"] += compiled.compile_seconds
        return compiled

    def _time_left(self) -> bool:
        """Whether the planning time budget (if any) leaves time to start a compile."""
        return self.budget is None or not compile_timeout(self.budget, self.compile_timeout_s).spent

    def not_started(self, i: int, entry: tuple[str, Any]) -> None:
        """A strategy the budget kept from compiling: an outcome that says so."""
        assert self.budget is not None
        self.budget.record.not_compiled.append(entry[0])
        self.finish(i, StrategyOutcome(entry[0], entry[1], dropped=NOT_COMPILED))

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
        placements = enumerate_placements(self.topology, self.space.mesh_spec(outcome.strategy)).placements
        outcome.scored.extend(scored_on_every_placement(self.model, placements, outcome.key, compiled))
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
            verify_leading_pairs(self.space, self.topology, self.model, outcomes, verify_top, verified,
                                 self.compile_timeout_s, self.compile_cache, self.flags_of, self.timings, self.notes,
                                 self.pool, budget=self.budget)
            self.timings["verify"] += time.perf_counter() - t0
            if self.limits is not None:
                t0 = time.perf_counter()
                if check_raised_limits(self.space, self.model, outcomes, self.limits, self.compile_over, self.notes,
                                       time_left=self._time_left, baselines=self.baselines):
                    self.timings["limit_check"] = self.timings.get("limit_check", 0.0) + time.perf_counter() - t0
                outcomes = outcomes + self.limits.forms
            best = min((s.q2.step_seconds for o in outcomes for s in o.scored), default=math.inf)
            if (self.budget is not None and self.budget.expired()) or not self.sweep.reopen(best):
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
