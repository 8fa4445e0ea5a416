"""Replicas: a slice split into equal sub-slices, each running its own copy of one plan (serving for throughput).

A split is a partition of the slice's chip grid into equal, axis-aligned blocks; each block is a
replica's sub-slice and runs the plan made for that sub-slice, on its own videos. Only blocks that
libtpu accepts as a slice can be planned (their programs are compiled for that slice), so a split
into blocks it refuses (on v5e, 1x4 lines: more than one host's default block of 2x2 chips, and not
whole blocks) is listed with that reason, never planned. Blocks inside one host's block (1x1, 1x2)
are compiled as the chips of one host (`aoizora.toolchain.compile_only_devices`).

Replicas run independently only where their traffic cannot meet: `shared_links` routes every pair
of a replica's devices through the full slice (`Topology.device_route`, the routing Q2 costs) and
compares the sets of links the replicas can use. Disjoint sets mean zero contention between
replicas, as checked here; a split whose replicas share a link is not planned (its contention is
not modelled).

`check_replicas` is the plan file's check of its `replicas` block: the replicas' chips are the
split's blocks, disjoint, inside the full slice and covering it, each the shape of the plan's own
(sub-)slice.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from aoizora.errors import PlanFormatError, TopologyError, clipped
from aoizora.store import one_line
from aoizora.topology import Topology
from aoizora.topology.slice import Coords, parse_topology_name, slice_name

#: The objectives a plan can be made for: one video's time, or videos per hour.
OBJECTIVES = ("latency", "throughput")


def raster_id(coords: Sequence[int], shape: Sequence[int]) -> int:
    """A chip's index in raster order, x fastest: libtpu's numbering of the chips of a slice (its
    compile-only devices of one core per chip carry these ids)."""
    index, stride = 0, 1
    for c, n in zip(coords, shape, strict=True):
        index += int(c) * stride
        stride *= int(n)
    return index


@dataclass(frozen=True)
class Split:
    """The slice `full_shape` as `count` equal blocks of `shape`, one replica each, at `offsets`."""

    full_shape: tuple[int, ...]
    shape: tuple[int, ...]

    @property
    def count(self) -> int:
        return math.prod(self.full_shape) // math.prod(self.shape)

    @property
    def offsets(self) -> tuple[Coords, ...]:
        """Each block's first chip, in raster order of the blocks (x fastest)."""
        ranges = [range(0, n, b) for n, b in zip(self.full_shape, self.shape, strict=True)]
        return tuple(tuple(reversed(c)) for c in itertools.product(*reversed(ranges)))

    def chips(self, replica: int) -> list[Coords]:
        """The full slice's coordinates of the chips of `replica`, in raster order (x fastest)."""
        offset = self.offsets[replica]
        local = itertools.product(*reversed([range(b) for b in self.shape]))
        return [tuple(o + c for o, c in zip(offset, reversed(cell), strict=True)) for cell in local]

    def label(self, generation: str) -> str:
        return f"{self.count}x {slice_name(generation, self.shape)}"


def block_splits(shape: Sequence[int]) -> list[Split]:
    """Every partition of a chip grid into equal axis-aligned blocks, the whole grid first, then by
    replica count and block shape."""
    full = tuple(int(n) for n in shape)
    divisors = [[d for d in range(1, n + 1) if n % d == 0] for n in full]
    splits = [Split(full, tuple(b)) for b in itertools.product(*divisors)]
    return sorted(splits, key=lambda s: (s.count, tuple(-b for b in s.shape)))


def refused_sub_slice(generation: str, split: Split) -> str | None:
    """Why the split's blocks cannot be planned (libtpu does not accept them as a slice), None if it can."""
    if split.count == 1:
        return None
    from aoizora.topology import get_topology

    try:
        get_topology(slice_name(generation, split.shape))
    except TopologyError as exc:
        return (f"{slice_name(generation, split.shape)} is a sub-slice libtpu will not compile as a slice "
                f"({one_line(str(exc), 160)})")
    return None


def replica_links(topology: Topology, chips: Iterable[Coords]) -> frozenset[int]:
    """The directed links of the full slice that traffic between any two devices on `chips` can use
    (the routes Q2 costs, `Topology.device_route`)."""
    members = set(map(tuple, chips))
    devices = [d for c in topology.chips if c.coords in members for d in c.device_ids]
    return frozenset(link for a, b in itertools.permutations(devices, 2) for link in topology.device_route(a, b))


def shared_links(topology: Topology, split: Split) -> list[tuple[int, int, list[int]]]:
    """(replica, replica, links both can use) for every pair of the split's replicas whose link sets
    meet in `topology`, the full slice; empty: the replicas cannot contend."""
    if split.count == 1:
        return []
    sets = [replica_links(topology, split.chips(i)) for i in range(split.count)]
    return [(i, j, sorted(sets[i] & sets[j])) for i, j in itertools.combinations(range(split.count), 2)
            if sets[i] & sets[j]]


def contention_reason(topology: Topology, split: Split) -> str | None:
    """Why the split's replicas are not independent (they share links), None if no link is shared."""
    shared = shared_links(topology, split)
    if not shared:
        return None
    i, j, links = shared[0]
    shown = ", ".join(f"{list(topology.links[k].src)}->{list(topology.links[k].dst)}" for k in links[:4])
    return (f"replicas {i} and {j} share {len(links)} link(s) of {topology.name} ({shown}"
            f"{', ...' if len(links) > 4 else ''}); contention not modelled")


def replica_devices(split: Split) -> list[dict[str, Any]]:
    """Each replica's place in the full slice, as the plan file records it."""
    return [{"offset": list(split.offsets[i]), "chips": [list(c) for c in split.chips(i)],
             "chip_ids": [raster_id(c, split.full_shape) for c in split.chips(i)]} for i in range(split.count)]


def check_replicas(data: dict[str, Any], source: str, fix: str) -> None:
    """Raise PlanFormatError unless the plan's `replicas` block (when it has one) describes equal
    blocks of the full slice, each the plan's own slice, disjoint and covering the full slice."""
    block = data.get("replicas")
    if block is None:
        return
    topo = data["topology"]

    def fail(field: str, what: str) -> PlanFormatError:
        return PlanFormatError(f"{source} field replicas.{field} {what}; {fix}")

    try:
        generation, full = parse_topology_name(block["slice"])
    except TopologyError:
        raise fail("slice", f"is {clipped(block['slice'])}, not a TPU slice aoizora knows") from None
    if generation != topo["generation"]:
        raise fail("slice", f"is {block['slice']} but the plan's sub-slice is {topo['name']} (another generation)")
    shape = tuple(topo["shape"])
    if len(full) != len(shape) or any(n % b for n, b in zip(full, shape, strict=True)):
        raise fail("slice", f"{block['slice']} is not a whole number of {topo['name']} blocks")
    split = Split(tuple(full), shape)
    if block["count"] != split.count or len(block["devices"]) != split.count:
        raise fail("count", f"is {block['count']} with {len(block['devices'])} device sets, but {block['slice']} "
                   f"holds {split.count} blocks of {topo['name']}")
    expected = replica_devices(split)
    seen: set[tuple[int, ...]] = set()
    for i, (given, want) in enumerate(zip(block["devices"], expected, strict=True)):
        chips = [tuple(c) for c in given["chips"]]
        if any(len(c) != len(full) or any(not 0 <= v < n for v, n in zip(c, full, strict=True)) for c in chips):
            raise fail(f"devices[{i}].chips", f"has a chip outside the {block['slice']} slice")
        if seen & set(chips):
            raise fail(f"devices[{i}].chips", "shares a chip with another replica")
        seen |= set(chips)
        if given != want:
            raise fail(f"devices[{i}]", f"is not the {topo['name']} block of {block['slice']} at offset "
                       f"{want['offset']} (chips in raster order, their raster ids)")
    if len(seen) != math.prod(full):
        raise fail("devices", f"covers {len(seen)} of the {math.prod(full)} chips of {block['slice']}")
    cfg_batch = int(data["workload"].get("shapes", {}).get("cfg_batch", 2))
    if block["videos_per_replica"] != cfg_batch // 2:
        raise fail("videos_per_replica", f"is {block['videos_per_replica']} but the plan's CFG batch of {cfg_batch} "
                   f"makes {cfg_batch // 2} video(s) a run")
