"""The bounded sweep: Stage 2's compiles in bound order, pruned by Stage 1's Q1, with up to the
executor's size in flight (`BoundedSweep`), and what it compiled and pruned (`Stage2Summary`)."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

from aoizora.errors import ExecutorError
from aoizora.stage2.outcomes import Compiled, StrategyOutcome, drop_reason


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

    `expired()` (default: never) ends the sweep early: once it is true no strategy starts, and each
    pending one goes to `on_out_of_time(index, entry)` instead (a planning time budget).
    """

    def __init__(self, entries: list[tuple[str, Any]], lower_bounds: Mapping[str, float], baselines: Collection[str],
                 workers: int, compile_one: Callable[[str, Any], Compiled],
                 finish: Callable[[int, StrategyOutcome], None], on_pruned: Callable[[str], None] | None,
                 expired: Callable[[], bool] | None = None,
                 on_out_of_time: Callable[[int, tuple[str, Any]], None] | None = None) -> None:
        self.entries = list(entries)
        self.bounds = dict(lower_bounds)
        self.baselines = set(baselines)
        self.workers = max(1, workers)
        self.compile_one = compile_one
        self.finish = finish
        self.on_pruned = on_pruned
        self.expired = expired
        self.on_out_of_time = on_out_of_time
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
        back = [i for i, (key, _) in enumerate(self.entries)
                if key in self.summary.pruned and self.bounds[key] < best_q2]
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
            self._out_of_time()
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

    def _out_of_time(self) -> None:
        """Once `expired`, every pending strategy goes to `on_out_of_time` instead of compiling."""
        if self.expired is None or not self.pending or not self.expired():
            return
        pending, self.pending = self.pending, []
        for i in pending:
            if self.on_out_of_time is not None:
                self.on_out_of_time(i, self.entries[i])

    def _start(self, pool: ThreadPoolExecutor, running: dict[Future[Compiled], int]) -> None:
        """Start pending strategies while a worker is free and the next one cannot be pruned."""
        self._out_of_time()
        while self.pending and len(running) < self.workers and not self._prunable(self.pending[0]):
            i = self.pending.pop(0)
            key, strategy = self.entries[i]
            self.summary.compiled.append(key)
            running[pool.submit(self.compile_one, key, strategy)] = i
