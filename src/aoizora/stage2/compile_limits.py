"""How long a compile may run: its own limit in CPU seconds, and the time budget's in wall seconds.

A compile's own limit (`aoizora plan --compile-timeout`) counts the CPU seconds its process uses,
not the seconds on the clock: a libtpu compile does the same work on a busy host as on an idle one,
only more slowly, so a wall-clock limit would drop a strategy on a busy host that it keeps on an idle
one, and the plan would change with the host's load. The time budget (`--time-budget`) is the
user's wall-clock time and stays a wall-clock limit.

Where a process's CPU time cannot be read (no `/proc`, or a compile on a Ray actor elsewhere), the
own limit is applied to the wall clock, as the only measure there is. A compile that uses no CPU
at all (a hung process) is stopped once as many wall seconds as its CPU limit pass without one CPU
second of progress.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class CompileLimit:
    """`cpu_s`: CPU seconds the compile's process may use (None: no limit); `wall_s`: wall seconds
    from its start (None: no limit)."""

    cpu_s: float | None = None
    wall_s: float | None = None

    @classmethod
    def of(cls, limit: CompileLimit | float | None) -> CompileLimit:
        """A limit from a `CompileLimit`, or from a compile's own limit given as seconds (or None)."""
        return limit if isinstance(limit, CompileLimit) else cls(cpu_s=None if limit is None else float(limit))

    @property
    def spent(self) -> bool:
        """No wall time is left: the compile should not start."""
        return self.wall_s is not None and self.wall_s <= 0

    def as_wall_seconds(self) -> float | None:
        """The one wall-clock limit where CPU time cannot be measured: the tighter of the two."""
        limits = [s for s in (self.cpu_s, self.wall_s) if s is not None]
        return min(limits) if limits else None

    def wall_binds(self) -> bool:
        """Whether `as_wall_seconds` is the wall limit (the budget) rather than the CPU one."""
        return self.wall_s is not None and (self.cpu_s is None or self.wall_s <= self.cpu_s)


def process_cpu_seconds(pid: int) -> float | None:
    """User plus system CPU seconds of process `pid`, all its threads (None where unreadable)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / ticks  # utime and stime, fields 14 and 15 of stat(5)


class LimitWatch:
    """Watches one compile in process `pid` against `limit`: `check()` says, every few seconds,
    whether it must be stopped and why (None while it may run on)."""

    def __init__(self, pid: int | None, limit: CompileLimit, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit, self._clock = limit, clock
        self.pid = pid
        self.t0 = clock()
        self.cpu0 = process_cpu_seconds(pid) if pid is not None and limit.cpu_s is not None else None
        self._progress_at, self._cpu_seen = self.t0, self.cpu0

    def wait_seconds(self, poll_s: float) -> float | None:
        """How long to wait for an answer before the next `check()` (None: without end)."""
        wall = self._wall_limit()
        if self.cpu0 is None and wall is None:
            return None
        left = math.inf if wall is None else max(wall - (self._clock() - self.t0), 0.0)
        return left if self.cpu0 is None else min(poll_s, left)

    def _wall_limit(self) -> float | None:
        return self.limit.wall_s if self.cpu0 is not None else self.limit.as_wall_seconds()

    def check(self) -> str | None:
        """The reason to stop the compile now, or None."""
        now = self._clock()
        wall = self._wall_limit()
        if wall is not None and now - self.t0 >= wall:
            return f"compile did not finish within {wall:.0f} s"
        if self.cpu0 is None or self.limit.cpu_s is None or self.pid is None:
            return None
        cpu = process_cpu_seconds(self.pid)
        if cpu is None:
            return None
        if (over := self._over_cpu(cpu)) is not None:
            return over
        if self._cpu_seen is None or cpu >= self._cpu_seen + 1.0:
            self._progress_at, self._cpu_seen = now, cpu
        elif now - self._progress_at >= self.limit.cpu_s:
            return f"compile used no CPU time for {self.limit.cpu_s:.0f} s"
        return None

    def finished_over_cpu_limit(self) -> str | None:
        """For a compile that has answered: the reason its CPU limit was passed anyway (between two
        checks), or None. The limit then holds whatever the poll's phase, so the same compile is
        kept or stopped on any host."""
        if self.cpu0 is None or self.limit.cpu_s is None or self.pid is None:
            return None
        cpu = process_cpu_seconds(self.pid)
        return None if cpu is None else self._over_cpu(cpu)

    def _over_cpu(self, cpu: float) -> str | None:
        assert self.cpu0 is not None and self.limit.cpu_s is not None
        if cpu - self.cpu0 >= self.limit.cpu_s:
            return f"compile did not finish within {self.limit.cpu_s:.0f} s of CPU time"
        return None

    def wall_limit_expired(self) -> bool:
        """Whether the caller's wall-clock limit (`limit.wall_s`: the time budget) is what ran out,
        rather than the compile's own limit."""
        wall = self._wall_limit()
        return wall is not None and self._clock() - self.t0 >= wall and (
            self.cpu0 is not None or self.limit.wall_binds())
