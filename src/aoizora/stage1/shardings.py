"""Small operations on Shardy shardings used by the sharding propagator (`propagate.py`)."""

from __future__ import annotations

import math
from collections.abc import Mapping

from aoizora.stage1.ir import Sharding, TensorType, axis_size


def replicated(rank: int) -> Sharding:
    return Sharding("", tuple(() for _ in range(rank)))


def with_dims(sh: Sharding, dims: tuple[tuple[str, ...], ...] | list, unreduced: tuple[str, ...] = ()) -> Sharding:
    """`sh`'s mesh with these per-dimension axes and unreduced axes (nothing explicitly replicated)."""
    return Sharding(sh.mesh, tuple(tuple(d) for d in dims), (), tuple(unreduced))


class AxisSizes:
    """Mesh axis sizes, and the per-device shapes and bytes they give a sharded value."""

    def __init__(self, sizes: Mapping[str, int]):
        self.sizes = dict(sizes)
        # local bytes by (type, per-dimension axes): every value's bytes are asked for, often
        self._bytes: dict[tuple[tuple[int, ...], str, tuple[tuple[str, ...], ...] | None], float] = {}

    def n(self, axes: tuple[str, ...] | list[str]) -> int:
        return math.prod(axis_size(self.sizes, a) for a in axes)

    def local_shape(self, t: TensorType, sh: Sharding | None) -> tuple[int, ...]:
        if sh is None or len(sh.dims) != t.rank:
            return t.shape
        return tuple(-(-d // self.n(ax)) if ax else d for d, ax in zip(t.shape, sh.dims, strict=True))

    def local_bytes(self, t: TensorType | None, sh: Sharding | None) -> float:
        if t is None:
            return 0.0
        key = (t.shape, t.dtype, sh.dims if sh is not None else None)
        b = self._bytes.get(key)
        if b is None:
            b = self._bytes[key] = math.prod(self.local_shape(t, sh)) * t.itemsize
        return b


def fit(sh: Sharding, t: TensorType, sizes: AxisSizes) -> Sharding:
    """Drop axes that do not divide their dimension (the partitioner would pad; we replicate)."""
    if len(sh.dims) != t.rank:
        return replicated(t.rank)
    dims = []
    for d, ax in zip(t.shape, sh.dims, strict=True):
        keep: list[str] = []
        for a in ax:
            if d % (sizes.n(keep) * axis_size(sizes.sizes, a)) == 0:
                keep.append(a)
            else:
                break
        dims.append(tuple(keep))
    return with_dims(sh, dims, sh.unreduced)


def add_axes(src: Sharding, dst: Sharding, axes: tuple[str, ...]) -> Sharding:
    """`src` with `axes` added to the dimensions `dst` shards over them."""
    dims = [list(d) for d in src.dims]
    for i, d in enumerate(dst.dims):
        for a in d:
            if a in axes:
                dims[i].append(a)
    return with_dims(src, dims, src.unreduced)


def merge(ins: list[Sharding], ranks: list[int], rank: int, sizes: AxisSizes) -> Sharding:
    """Result sharding of an elementwise op: the most sharded operand, completed by the others."""
    cands = [s for s, r in zip(ins, ranks, strict=True) if r == rank and len(s.dims) == rank]
    if not cands:
        return replicated(rank)
    best = max(cands, key=lambda s: sizes.n(s.axes))
    dims = [list(d) for d in best.dims]
    used = set(best.axes)
    for s in cands:
        for i, d in enumerate(s.dims):
            if not dims[i] and d and not (set(d) & used):
                dims[i] = list(d)
                used |= set(d)
    return with_dims(best, dims)


def reshape_groups(a: tuple[int, ...], b: tuple[int, ...]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Minimal groups of consecutive dims with equal products ([i0, i1) of a, [o0, o1) of b)."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        i0, j0 = i, j
        pa, pb = a[i], b[j]
        i += 1
        j += 1
        while pa != pb:
            if pa < pb and i < len(a):
                pa *= a[i]
                i += 1
            elif j < len(b):
                pb *= b[j]
                j += 1
            else:
                break
        # absorb trailing size-1 dims
        while i < len(a) and a[i] == 1 and (j >= len(b) or b[j] != 1):
            i += 1
        while j < len(b) and b[j] == 1 and (i >= len(a) or a[i] != 1):
            j += 1
        out.append(((i0, i), (j0, j)))
    return out
