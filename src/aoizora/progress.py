"""Progress of the long steps: Stage 1's analyses, Stage 2's compiles, a bench cell's oracle sweep,
the CLI's placement scoring.

On a terminal it is a transient rich bar. Anywhere else (a log file, a pipe, CI) a bar cannot
redraw, so a line is printed every `LOG_EVERY_S` seconds instead (and a last one with the final
count when the step ends, if any was printed): a step of hours in a log then says how far it is,
and a step shorter than `LOG_EVERY_S` prints nothing.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

#: seconds between two progress lines when the console is not a terminal
LOG_EVERY_S = 60.0


class Counter:
    """What a step reports: one more item done, or more items to do."""

    def advance(self) -> None:
        """One more item is done."""

    def add_to_total(self, n: int = 1) -> None:
        """`n` items joined the step."""

    def set_remaining(self, seconds: float | None) -> None:
        """The step's estimated seconds left (None: no estimate yet)."""


def remaining_text(seconds: float | None) -> str:
    """An estimate of the time left as the bar and the log lines show it."""
    if seconds is None:
        return "estimating time left"
    return f"about {seconds:,.0f} s left" if seconds < 120 else f"about {seconds / 60:,.1f} min left"


def estimate_remaining(elapsed: float, done: int, total: int) -> float | None:
    """Seconds left at the pace so far (`elapsed` seconds for `done` of `total` items); None before
    the first item is done."""
    if done <= 0:
        return None
    return elapsed / done * max(total - done, 0)


class _BarCounter(Counter):
    def __init__(self, bar: Progress, label: str, total: int) -> None:
        self._bar, self._total = bar, total
        self._task = bar.add_task(label, total=total, left="")

    def advance(self) -> None:
        self._bar.advance(self._task)

    def add_to_total(self, n: int = 1) -> None:
        self._total += n
        self._bar.update(self._task, total=self._total)

    def set_remaining(self, seconds: float | None) -> None:
        self._bar.update(self._task, left=remaining_text(seconds))


class _LineCounter(Counter):
    """Prints `label: done/total (elapsed)` at most every `every_s` seconds."""

    def __init__(self, console: Console, label: str, total: int, every_s: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._console, self._label, self.total, self._every_s, self._clock = console, label, total, every_s, clock
        self.done = 0
        self._done_printed: int | None = None  # the count of the last line; None before the first
        self._left: float | None = None
        self._has_estimate = False
        self._start = self._last = clock()

    def advance(self) -> None:
        self.done += 1
        if self._clock() - self._last >= self._every_s:
            self.print()

    def add_to_total(self, n: int = 1) -> None:
        self.total += n

    def set_remaining(self, seconds: float | None) -> None:
        self._left, self._has_estimate = seconds, True

    def print(self) -> None:
        now = self._clock()
        left = f", {remaining_text(self._left)}" if self._has_estimate and self.done < self.total else ""
        self._console.print(f"{self._label}: {self.done}/{self.total} ({now - self._start:,.0f} s{left})",
                            highlight=False, markup=False)
        self._last, self._done_printed = now, self.done

    def finish(self) -> None:
        """The last line, when lines were printed and the count moved since the last one."""
        if self._done_printed is not None and self.done != self._done_printed:
            self.print()


@contextlib.contextmanager
def progress_reporter(label: str, total: int, *, console: Console | None = None, quiet: bool = False,
                      every_s: float = LOG_EVERY_S) -> Iterator[Counter]:
    """Report a step of `total` items on `console` (default: stderr); `quiet`: report nothing."""
    if quiet:
        yield Counter()
        return
    console = console or Console(stderr=True)
    if not console.is_terminal:
        lines = _LineCounter(console, label, total, every_s)
        yield lines
        lines.finish()
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.fields[left]}"))
    with Progress(*columns, console=console, transient=True) as bar:
        yield _BarCounter(bar, label, total)
