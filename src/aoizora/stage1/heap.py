"""Where libtpu puts a program's temporaries: best fit, in the order buffers come to life.

Why: the compiler's preallocated temp is not the peak of live bytes. It places each buffer when
it is first defined, in the gap that fits it best among the buffers live at that moment, and
never moves it; a large buffer born later finds the space fragmented and goes on top. Replaying
libtpu's own dumped live ranges (`xla_dump_to`: `*live-range.txt`, `*buffer-assignment.txt`)
this way gives the size of its temp allocation on every Wan program checked, where a global
best fit by decreasing size (XLA's heap simulator default) gives back the live peak, 1.1-1.6x
less (docs/notebook/memory-model.md, "The compiler's temp allocation is a linear scan").

The HBM model (`hbm.py`) records every buffer it decides on a `Timeline`; `packed_bytes`
replays that allocation.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass
class Timeline:
    """Buffers with the ticks they are live in (inclusive); `outside` ones are not in the heap."""

    now: int = 0
    starts: list[int] = field(default_factory=list)
    ends: list[int] = field(default_factory=list)
    sizes: list[float] = field(default_factory=list)
    outside: list[bool] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)  # what each buffer is (for explaining a peak)

    def tick(self) -> int:
        self.now += 1
        return self.now

    def open(self, size: float, outside: bool = False, start: int | None = None, label: str = "") -> int:
        """A buffer live from now (or `start`) until `close`; returns its handle."""
        self.labels.append(label)
        self.starts.append(self.now if start is None else start)
        self.ends.append(self.now)
        self.sizes.append(size)
        self.outside.append(outside)
        return len(self.sizes) - 1

    def close(self, handle: int) -> None:
        self.ends[handle] = self.now

    def momentary(self, size: float, at: int | None = None, label: str = "", outside: bool = False) -> None:
        """A buffer live for one tick (a transient of one op)."""
        if size > 0:
            h = self.open(size, outside=outside, start=at, label=label)
            self.ends[h] = self.starts[h]

    def live_peak(self, outside: bool | None = None) -> float:
        """Most bytes live at one tick (`outside`: only those, only the others, or all when None)."""
        delta: dict[int, float] = {}
        for s, e, z, o in zip(self.starts, self.ends, self.sizes, self.outside, strict=True):
            if outside is None or o == outside:
                delta[s] = delta.get(s, 0.0) + z
                delta[e + 1] = delta.get(e + 1, 0.0) - z
        peak = live = 0.0
        for t in sorted(delta):
            live += delta[t]
            peak = max(peak, live)
        return peak

    def live_at(self, tick: int) -> list[int]:
        """Handles of the buffers live at `tick`."""
        return [i for i in range(len(self.sizes)) if self.starts[i] <= tick <= self.ends[i]]

    def peak_tick(self, outside: bool | None = None) -> int:
        """A tick where `live_peak(outside)` is reached."""
        ticks = sorted(set(self.starts))
        return max(ticks, key=lambda t: sum(self.sizes[i] for i in self.live_at(t)
                                            if outside is None or self.outside[i] == outside), default=0)

    def packed_bytes(self) -> float:
        """Size of the heap holding the non-outside buffers, each placed once, best fit, by birth."""
        order = sorted((i for i in range(len(self.sizes)) if not self.outside[i] and self.sizes[i] > 0),
                       key=lambda i: (self.starts[i], -self.sizes[i]))
        active: list[tuple[float, float, int]] = []  # (offset, size, end), sorted by offset
        top = 0.0
        for i in order:
            start, size = self.starts[i], self.sizes[i]
            active = [a for a in active if a[2] >= start]
            best: tuple[float, float] | None = None  # (gap, offset)
            pos = 0.0
            for offset, sz, _ in active:
                gap = offset - pos
                if gap >= size and (best is None or gap < best[0]):
                    best = (gap, pos)
                pos = max(pos, offset + sz)
            at = best[1] if best else pos
            bisect.insort(active, (at, size, self.ends[i]))
            top = max(top, at + size)
        return top
