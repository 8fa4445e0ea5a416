"""A planning time budget (`aoizora plan --time-budget`): Stage 2 compiles and verifies while it
lasts, then answers with the best pair found, saying what it did not get to.

Like a solver's time limit: a compile still running when the budget ends is stopped (its process
killed), no compile starts after it, and the leading pairs not yet recompiled over their own device
order stay unverified. What was cut is recorded (`BudgetRecord`), and a plan that anything was cut
from is never cached (`aoizora.plan.cache.degraded`), so the next request without a budget plans
fully.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aoizora.stage2.compile_limits import CompileLimit

#: the drop reason of a strategy the budget kept from compiling, or stopped compiling
NOT_COMPILED = "not compiled: the time budget ran out"
STOPPED = "compile stopped: the time budget ran out"


class OutOfBudget(Exception):
    """A compile the time budget kept from starting or stopped (its message: `NOT_COMPILED` or `STOPPED`)."""


@dataclass
class BudgetRecord:
    """What a budget cut: strategies never started, compiles stopped, leading pairs not verified, and
    the programs besides the step (a video's VAE decode) not costed, never started or stopped."""

    seconds: float
    not_compiled: list[str] = field(default_factory=list)
    stopped: list[str] = field(default_factory=list)
    not_verified: list[dict[str, str]] = field(default_factory=list)
    companions_not_costed: list[str] = field(default_factory=list)

    @property
    def cut(self) -> bool:
        return bool(self.not_compiled or self.stopped or self.not_verified or self.companions_not_costed)

    def to_json(self) -> dict[str, Any]:
        return {"seconds": self.seconds, "cut": self.cut, "not_compiled": list(self.not_compiled),
                "stopped": list(self.stopped), "not_verified": list(self.not_verified),
                "companions_not_costed": list(self.companions_not_costed)}


class TimeBudget:
    """`seconds` of planning from `start` (a `clock` reading; default: now)."""

    def __init__(self, seconds: float, start: float | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not seconds > 0:
            raise ValueError(f"a time budget must be positive seconds; got {seconds!r}")
        self.seconds, self._clock = float(seconds), clock
        self.deadline = (clock() if start is None else start) + self.seconds
        self.record = BudgetRecord(self.seconds)

    def remaining(self) -> float:
        return self.deadline - self._clock()

    def expired(self) -> bool:
        return self.remaining() <= 0



def compile_timeout(budget: TimeBudget | None, compile_timeout_s: float | None) -> CompileLimit:
    """The limits of a compile started now: its own (`compile_timeout_s`, CPU seconds) and, under
    `budget`, what is left of the budget (wall seconds)."""
    return CompileLimit(cpu_s=compile_timeout_s, wall_s=None if budget is None else max(budget.remaining(), 0.0))
