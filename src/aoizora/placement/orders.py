"""Orders in which a logical axis can walk the physical sub-grid its groups occupy.

A logical axis whose digits map to several physical coordinates occupies a sub-grid. Walking it
in raster order leaves diagonal or long steps (and on an open line the ring's closing hop crosses
every link of the line). Snake (boustrophedon), Hamiltonian cycles and the folded line are the
classic ring-friendly embeddings. Each order is a permutation `perm` with
`raster_index = perm[ring_position]`.
"""

from __future__ import annotations

import itertools
import math

Order = tuple[int, ...]


def raster(sizes: tuple[int, ...]) -> Order:
    return tuple(range(math.prod(sizes)))


def _raster_index(values: tuple[int, ...], sizes: tuple[int, ...]) -> int:
    idx = 0
    for v, n in zip(values, sizes, strict=True):
        idx = idx * n + v
    return idx


def snake_path(sizes: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Boustrophedon walk of a grid: a Hamiltonian path with unit steps, first coordinate major."""
    path = []
    for raw in itertools.product(*(range(n) for n in sizes)):
        values = list(raw)
        prefix = 0
        for k, n in enumerate(sizes):
            if prefix % 2 == 1:
                values[k] = n - 1 - values[k]
            prefix = prefix * n + raw[k]
        path.append(tuple(values))
    return path


def snake(sizes: tuple[int, ...]) -> Order:
    return tuple(_raster_index(v, sizes) for v in snake_path(sizes))


def cycle(sizes: tuple[int, ...]) -> Order | None:
    """A Hamiltonian cycle of the grid with unit steps, or None when the grid has none.

    The grid is seen as rows (first coordinate) x columns (snake walk of the rest): with an even
    number of rows, walk columns 1.. snaking row by row, then return up column 0.
    """
    if len(sizes) < 2 or math.prod(sizes) % 2 or sizes[0] < 2 or math.prod(sizes[1:]) < 2:
        return None
    rows: list[tuple[int, ...]] = [(v,) for v in range(sizes[0])]
    cols: list[tuple[int, ...]] = snake_path(sizes[1:])
    if len(rows) % 2:
        rows, cols = cols, rows  # the rest has an even count: swap roles
        combine = lambda r, c: c + r  # noqa: E731 - keep the first coordinate first
    else:
        combine = lambda r, c: r + c  # noqa: E731
    walk: list[tuple[int, ...]] = []
    for i, r in enumerate(rows):
        span = range(1, len(cols)) if i % 2 == 0 else range(len(cols) - 1, 0, -1)
        walk.extend(combine(r, cols[j]) for j in span)
    walk.extend(combine(rows[i], cols[0]) for i in range(len(rows) - 1, -1, -1))
    order = [_raster_index(v, sizes) for v in walk]
    start = order.index(0)  # begin the ring at the origin, so logical position 0 stays put
    return tuple(order[start:] + order[:start])


def folded(n: int) -> Order | None:
    """Ring on an open line: evens ascending, odds descending (every step at most 2 hops)."""
    if n < 4:
        return None
    return tuple(range(0, n, 2)) + tuple(i for i in range(n - 1, -1, -1) if i % 2)
