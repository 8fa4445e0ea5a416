"""A TPU slice: its chips (from libtpu's topology description), directed ICI links and routes."""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from typing import Any

from aoizora.errors import TopologyError
from aoizora.toolchain import compile_only_devices
from aoizora.topology.hardware import HardwareProfile, canonical_generation, hardware_profile

Coords = tuple[int, ...]

_NAME = re.compile(r"\s*([A-Za-z0-9]+)\s*:\s*([0-9]{1,6}(?:x[0-9]{1,6})*)\s*")


@dataclass(frozen=True)
class Chip:
    """One chip: ICI coordinates and the JAX device ids of its cores (2 on v4 without megacore)."""

    id: int
    coords: Coords
    device_ids: tuple[int, ...]


@dataclass(frozen=True)
class Link:
    """One direction of one ICI link between neighbouring chips along `dim`."""

    index: int
    src: Coords
    dst: Coords
    dim: int
    direction: int  # +1 or -1 along `dim` (a wraparound link keeps its logical direction)
    bandwidth_Bps: float
    wraparound: bool


@dataclass(frozen=True)
class DevicePosition:
    """Where a JAX device sits: its chip and its core on that chip."""

    device_id: int
    chip: Coords
    core: int


def parse_topology_name(name: str) -> tuple[str, tuple[int, ...]]:
    """Split `v5e:2x4` into (canonical generation, shape); raises TopologyError if malformed."""
    m = _NAME.fullmatch(name)
    if not m:
        raise TopologyError(
            f"malformed TPU slice name {name!r}; write GENERATION:SHAPE as JAX names it, e.g. v5e:2x4 or v4:2x2x2"
        )
    generation = canonical_generation(m.group(1))
    shape = tuple(int(n) for n in m.group(2).split("x"))
    profile = hardware_profile(generation)
    if len(shape) != profile.ici_dims:
        example = "x".join(["2"] * profile.ici_dims)
        raise TopologyError(
            f"{generation} slices are {profile.ici_dims}-D but {name!r} has {len(shape)} dimension(s); "
            f"write e.g. {generation}:{example}"
        )
    if any(n < 1 for n in shape):
        raise TopologyError(f"slice dimensions must be positive in {name!r}")
    return generation, shape


class Topology:
    """The chips and directed links of a TPU slice, with dimension-order routing.

    Chips and their coordinates come from libtpu's description of the slice; links and wraparound
    follow the generation's rules. Routes are dimension-order (lowest dimension first), taking the
    shorter way round on wrapped axes and the positive direction on a tie.
    """

    def __init__(self, name: str, generation: str, shape: tuple[int, ...], devices: tuple[Any, ...]):
        self.generation = generation
        self.shape = shape
        self.name = f"{generation}:{'x'.join(map(str, shape))}"
        self.requested_name = name
        self.hardware: HardwareProfile = hardware_profile(generation)
        self.wrap: tuple[bool, ...] = self.hardware.wraps(shape)
        self.devices = devices
        self.positions: dict[int, DevicePosition] = {}
        by_chip: dict[Coords, list[int]] = {}
        dims = len(shape)
        for dev in devices:
            coords = tuple(int(c) for c in dev.coords)
            if any(c != 0 for c in coords[dims:]):
                raise TopologyError(f"libtpu reports {dims}-D slice {self.name} with a chip at {coords}")
            chip = coords[:dims]
            core = int(getattr(dev, "core_on_chip", 0))
            self.positions[int(dev.id)] = DevicePosition(int(dev.id), chip, core)
            by_chip.setdefault(chip, []).append(int(dev.id))
        expected = math.prod(shape)
        if len(by_chip) != expected or any(
            any(not 0 <= c < n for c, n in zip(chip, shape)) for chip in by_chip
        ):
            raise TopologyError(
                f"libtpu describes {len(by_chip)} chips for {self.name}, expected {expected} in a {shape} grid"
            )
        ordered = sorted(by_chip, key=lambda c: tuple(reversed(c)))  # raster order, x fastest
        self.chips: tuple[Chip, ...] = tuple(
            Chip(i, c, tuple(sorted(by_chip[c], key=lambda d: self.positions[d].core)))
            for i, c in enumerate(ordered)
        )
        self.cores_per_chip = len(devices) // expected
        self.chip_by_coords: dict[Coords, Chip] = {c.coords: c for c in self.chips}
        self.links: tuple[Link, ...] = self._build_links()
        self.link_index: dict[tuple[Coords, Coords], int] = {(l.src, l.dst): l.index for l in self.links}
        self._route_cache: dict[tuple[Coords, Coords], tuple[int, ...]] = {}

    # --- structure -------------------------------------------------------------------------
    @property
    def num_chips(self) -> int:
        return len(self.chips)

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    def device_by_id(self, device_id: int) -> Any:
        for dev in self.devices:
            if dev.id == device_id:
                return dev
        raise TopologyError(f"device id {device_id} is not part of {self.name}")

    def _build_links(self) -> tuple[Link, ...]:
        links: list[Link] = []
        bw = self.hardware.link_bandwidth_Bps
        for chip in self.chips:
            for dim, n in enumerate(self.shape):
                if n == 1:
                    continue
                for direction in (+1, -1):
                    c = chip.coords[dim] + direction
                    wrapped = False
                    if not 0 <= c < n:
                        if not self.wrap[dim]:
                            continue
                        c %= n
                        wrapped = True
                    dst = chip.coords[:dim] + (c,) + chip.coords[dim + 1 :]
                    links.append(Link(len(links), chip.coords, dst, dim, direction, bw, wrapped))
        return tuple(links)

    # --- routing ---------------------------------------------------------------------------
    def _steps(self, dim: int, a: int, b: int) -> tuple[int, int]:
        """(direction, count) to go from a to b along dim: shortest way on a wrapped axis."""
        n = self.shape[dim]
        if a == b:
            return +1, 0
        if not self.wrap[dim]:
            return (+1, b - a) if b > a else (-1, a - b)
        forward = (b - a) % n
        backward = (a - b) % n
        return (+1, forward) if forward <= backward else (-1, backward)

    def route(self, src: Coords, dst: Coords) -> tuple[int, ...]:
        """Directed link indices from chip `src` to chip `dst` under dimension-order routing."""
        return _route(self, tuple(src), tuple(dst))

    def hops(self, src: Coords, dst: Coords) -> int:
        return len(self.route(src, dst))

    def device_route(self, src_device: int, dst_device: int) -> tuple[int, ...]:
        """Links between the chips of two devices (empty for two cores of one chip)."""
        return self.route(self.positions[src_device].chip, self.positions[dst_device].chip)

    # --- output ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "generation": self.generation,
            "shape": list(self.shape),
            "wrap": list(self.wrap),
            "cores_per_chip": self.cores_per_chip,
            "chips": [
                {"id": c.id, "coords": list(c.coords), "device_ids": list(c.device_ids)} for c in self.chips
            ],
            "links": [
                {"src": list(l.src), "dst": list(l.dst), "bandwidth_Bps": l.bandwidth_Bps, "wraparound": l.wraparound}
                for l in self.links
            ],
            "hardware": self.hardware.to_json(),
        }

    def __repr__(self) -> str:
        return f"Topology({self.name}, chips={self.num_chips}, links={len(self.links)}, wrap={self.wrap})"


def _route(topo: Topology, src: Coords, dst: Coords) -> tuple[int, ...]:
    cache = topo._route_cache
    key = (src, dst)
    hit = cache.get(key)
    if hit is not None:
        return hit
    for c, n in ((src, "source"), (dst, "destination")):
        if c not in topo.chip_by_coords:
            raise TopologyError(f"route {n} {c} is not a chip of {topo.name}")
    path: list[int] = []
    cur = list(src)
    for dim in range(len(topo.shape)):
        direction, count = topo._steps(dim, cur[dim], dst[dim])
        for _ in range(count):
            nxt = list(cur)
            nxt[dim] = (cur[dim] + direction) % topo.shape[dim]
            path.append(topo.link_index[(tuple(cur), tuple(nxt))])
            cur = nxt
    result = tuple(path)
    cache[key] = result
    return result


@functools.lru_cache(maxsize=64)
def get_topology(name: str) -> Topology:
    """The topology of a TPU slice named as JAX names it (e.g. `v5e:2x4`), built from libtpu."""
    generation, shape = parse_topology_name(name)
    canonical = f"{generation}:{'x'.join(map(str, shape))}"
    devices = compile_only_devices(canonical)
    kinds = {d.device_kind for d in devices}
    profile = hardware_profile(generation)
    if not kinds <= set(profile.device_kinds):
        raise TopologyError(f"libtpu describes {canonical} with device kind(s) {sorted(kinds)}, not {generation}")
    return Topology(canonical, generation, shape, devices)
