"""Symmetries of a slice that preserve its link set, used to drop placements of equal geometry.

Two placements are equivalent when one is the other moved by a symmetry of the slice: a
reflection of any axis, a permutation of axes of equal size and wraparound (rotations of square
grids), a translation along a wrapped axis, or a swap of the cores of every chip (while both
cores reach the chip's links alike, see `Topology.core_ici`). Equivalent
placements load the links the same way, so only one of each class needs scoring.
"""

from __future__ import annotations

import itertools

import numpy as np

from aoizora.topology import Topology


def point_symmetries(topology: Topology) -> list[tuple[tuple[int, ...], tuple[bool, ...]]]:
    """(axis permutation, reflection flags) pairs over the physical axes (ICI dims, then core)."""
    shape = list(topology.shape)
    wrap = list(topology.wrap)
    if topology.cores_per_chip > 1:
        shape.append(topology.cores_per_chip)
        wrap.append(False)
    dims = len(topology.shape)
    # Reflecting the core axis swaps the cores of every chip: a symmetry while both cores reach
    # the chip's links alike (D2D links run both ways), not when only core 0 drives the ICI links.
    flippable = [True] * dims + [topology.cores_are_interchangeable] * (len(shape) - dims)
    out = []
    for perm in itertools.permutations(range(dims)):
        if any(shape[p] != shape[i] or wrap[p] != wrap[i] for i, p in enumerate(perm)):
            continue
        full_perm = tuple(perm) + tuple(range(dims, len(shape)))
        for flips in itertools.product(*[(False, True) if f else (False,) for f in flippable]):
            out.append((full_perm, flips))
    return out


def canonical_keys(coords: np.ndarray, topology: Topology) -> list[bytes]:
    """One key per placement: equal keys <=> equal up to a symmetry of the slice.

    `coords` has shape (P, N, D'): P placements, N mesh positions in row-major order, D' physical
    axes. The key is the smallest byte image of the placement over all symmetries, with
    translations on wrapped axes removed by pinning mesh position 0.
    """
    shape = np.array(list(topology.shape) + ([topology.cores_per_chip] if topology.cores_per_chip > 1 else []))
    wrapped = [i for i, w in enumerate(topology.wrap) if w]
    best: list[bytes] | None = None
    for perm, flips in point_symmetries(topology):
        moved = coords[:, :, list(perm)].copy()
        for axis, flip in enumerate(flips):
            if flip:
                moved[:, :, axis] = shape[axis] - 1 - moved[:, :, axis]
        for axis in wrapped:
            moved[:, :, axis] = (moved[:, :, axis] - moved[:, :1, axis]) % shape[axis]
        moved = np.ascontiguousarray(moved.astype(np.int16))
        keys = [row.tobytes() for row in moved]
        best = keys if best is None else [min(a, b) for a, b in zip(best, keys, strict=True)]
    assert best is not None
    return best
