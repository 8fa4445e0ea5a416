"""Placements built from chip coordinates, so tests say *where* each logical device sits."""

from __future__ import annotations

import numpy as np

from aoizora.placement import MeshSpec, Placement
from aoizora.topology import Topology


def device_at(topo: Topology, chip: tuple[int, ...], core: int = 0) -> int:
    """The device id on the chip at `chip` (and core)."""
    for d, pos in topo.positions.items():
        if pos.chip == tuple(chip) and pos.core == core:
            return d
    raise KeyError(chip)


def placement_from_chips(topo: Topology, first: list[tuple[int, ...]], name: str = "test") -> Placement:
    """A 1-axis placement whose first logical devices sit on `first` (in order), the rest by id."""
    head = [device_at(topo, c) for c in first]
    rest = sorted(d for d in topo.positions if d not in head)
    ids = np.array(head + rest)
    return Placement(name, "built by a test", MeshSpec.parse(f"all={ids.size}"), ids)


def identity_placement(topo: Topology) -> Placement:
    """Logical device i on device id i."""
    ids = np.array(sorted(topo.positions))
    return Placement("identity", "device ids in order", MeshSpec.parse(f"all={ids.size}"), ids)
