"""Geometry of a placement's communication groups: which devices each mesh axis groups, in ring order."""

from __future__ import annotations

from collections import Counter

import numpy as np

from aoizora.placement.placement import Placement
from aoizora.topology import Topology


def axis_groups(placement: Placement, axis: str | int) -> list[tuple[int, ...]]:
    """Device-id groups of one mesh axis: the devices that differ only in that axis, in axis order."""
    j = placement.mesh.axis_names.index(axis) if isinstance(axis, str) else axis
    moved = np.moveaxis(placement.device_ids, j, -1).reshape(-1, placement.mesh.axis_sizes[j])
    return [tuple(int(d) for d in row) for row in moved]


def ring_hops(topology: Topology, group: tuple[int, ...]) -> tuple[int, ...]:
    """ICI hops of each step of the ring the group forms in listed order, closing step included."""
    n = len(group)
    if n < 2:
        return ()
    return tuple(len(topology.device_route(group[i], group[(i + 1) % n])) for i in range(n))


def group_extent(topology: Topology, group: tuple[int, ...]) -> tuple[int, ...]:
    """Sorted bounding-box extents of a group's chips (orientation-free shape)."""
    chips = np.array([topology.positions[d].chip for d in group])
    return tuple(sorted(int(v) for v in chips.max(axis=0) - chips.min(axis=0) + 1))


def axis_signature(topology: Topology, placement: Placement) -> dict[str, Counter]:
    """Per mesh axis, the multiset of (group extent, ring hop sequence) over its groups.

    Symmetries of the slice preserve it, so two placements with different signatures must never
    be merged as equivalent.
    """
    return {
        name: Counter((group_extent(topology, g), ring_hops(topology, g)) for g in axis_groups(placement, name))
        for name in placement.mesh.axis_names
    }
