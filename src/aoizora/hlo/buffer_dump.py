"""libtpu's buffer assignment, read from a compile dump (`xla_dump_to`).

Why: the compiler's out-of-HBM check and most of `memory_analysis()` come from this assignment,
and libtpu writes it a few seconds into a compile whose back end runs for a minute or more. Stage
1's memory estimate is checked against it (benchmarks/memory_assignment.py) on every legal
strategy, not only on the ones compiled to the end.

Files read: `*after_optimizations-buffer-assignment.txt` (allocations and the values placed in
them, with offsets) and `*after_optimizations-live-range.txt` (each value's live range in the
flattened schedule). These are text dumps for people; the format is libtpu's, not a stable API.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from aoizora.errors import BufferDumpError

_ALLOCATION = re.compile(r"allocation \d+: size (\d+), (color \d+, )?(.*)")
_VALUE = re.compile(r"\s+value: <\d+ (\S+)(?: \(phi\))? @\d+> \(size=(\d+),offset=(\d+)\)")
_RANGE = re.compile(r"\s+(\S+):(\d+)-(\d+)$")


@dataclass(frozen=True)
class TempBuffer:
    """One buffer of the preallocated temp: its offset, size and live ticks (inclusive)."""

    offset: int
    size: int
    start: int
    end: int
    values: tuple[str, ...]


@dataclass
class BufferAssignment:
    temp_bytes: int = 0  # preallocated temp in HBM (color 0)
    parameter_bytes: int = 0
    output_bytes: int = 0  # live-out allocations that are not parameters
    temp_buffers: list[TempBuffer] = field(default_factory=list)

    @property
    def checked_bytes(self) -> int:
        """What libtpu compares with its HBM limit."""
        return self.temp_bytes + self.parameter_bytes + self.output_bytes


def _one(directory: Path, suffix: str) -> Path:
    found = sorted(directory.glob(f"*{suffix}"))
    if not found:
        raise BufferDumpError(f"no *{suffix} in {directory}: compile with xla_dump_to={directory}")
    return found[-1]


def dump_ready(directory: str | Path) -> bool:
    """True once libtpu has written the buffer assignment and the optimized module."""
    d = Path(directory)
    return any(d.glob("*after_optimizations-buffer-assignment.txt")) and any(d.glob("*after_optimizations.txt"))


def read_buffer_assignment(directory: str | Path, with_buffers: bool = False) -> BufferAssignment:
    """Sizes of the assignment; with `with_buffers`, also the temp's buffers and their live ranges.

    A buffer is the values placed at one offset whose live ranges touch or overlap (a while
    loop's state is several values - init, body parameter, body result - in one buffer).
    """
    d = Path(directory)
    out = BufferAssignment()
    in_temp = False
    placed: list[tuple[str, int, int]] = []  # (value, size, offset) in the HBM temp
    for line in _one(d, "after_optimizations-buffer-assignment.txt").read_text().splitlines():
        m = _ALLOCATION.match(line)
        if m:
            size, color, kind = int(m.group(1)), m.group(2), m.group(3)
            in_temp = not color and kind.startswith("preallocated-temp")
            if color:
                continue
            if in_temp:
                out.temp_bytes += size
            elif kind.startswith("parameter"):
                out.parameter_bytes += size
            elif "live-out" in kind or "output" in kind:
                out.output_bytes += size
            continue
        if in_temp and with_buffers:
            v = _VALUE.match(line)
            if v:
                placed.append((v.group(1), int(v.group(2)), int(v.group(3))))
    if not with_buffers:
        return out
    ranges: dict[str, tuple[int, int]] = {}
    for line in _one(d, "after_optimizations-live-range.txt").read_text().splitlines():
        if line.startswith("  Live ranges at"):
            break
        r = _RANGE.match(line)
        if r:
            ranges[r.group(1).removesuffix("{}")] = (int(r.group(2)), int(r.group(3)))
    by_offset: dict[int, list[tuple[int, int, int, str]]] = {}
    for name, size, offset in placed:
        if name in ranges:
            by_offset.setdefault(offset, []).append((*ranges[name], size, name))
    for offset, values in by_offset.items():
        values.sort()
        start, end, size = values[0][0], values[0][1], 0
        names: list[str] = []
        for v_start, v_end, v_size, name in values:
            if v_start > end:  # a gap: the slot was reused by another buffer
                out.temp_buffers.append(TempBuffer(offset, size, start, end, tuple(names)))
                start, end, size, names = v_start, v_end, 0, []
            end, size = max(end, v_end), max(size, v_size)
            names.append(name)
        out.temp_buffers.append(TempBuffer(offset, size, start, end, tuple(names)))
    return out
