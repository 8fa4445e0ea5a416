"""A TPU slice: its chips (from libtpu's topology description), directed links and routes.

Links are directed ICI links between neighbouring chips and, on generations whose chip is two
dies (TPU7x), directed die-to-die (D2D) links between the two cores of each chip.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from aoizora.errors import TopologyError
from aoizora.toolchain import compile_only_devices
from aoizora.topology.hardware import HardwareProfile, canonical_generation, hardware_profile

Coords = tuple[int, ...]

_NAME = re.compile(r"\s*([A-Za-z0-9]+)\s*:\s*([0-9]{1,6}(?:x[0-9]{1,6})*)\s*")
_ACCELERATOR_TYPE = re.compile(r"\s*([A-Za-z0-9]+)-([0-9]{1,6})\s*")  # Cloud/xpk device types, e.g. tpu7x-8

#: How the two cores of a chip reach the chip's ICI links (see `Topology`).
CoreIci = Literal["direct", "via-core0"]
CORE_ICI_MODES: tuple[str, ...] = ("direct", "via-core0")


@dataclass(frozen=True)
class Chip:
    """One chip: ICI coordinates and the JAX device ids of its cores (2 on v4 without megacore)."""

    id: int
    coords: Coords
    device_ids: tuple[int, ...]


@dataclass(frozen=True)
class Link:
    """One direction of one link: ICI between neighbouring chips along `dim`, or D2D on a chip.

    A D2D link joins core `src_core` to core `dst_core` of chip `src` (= `dst`); its `dim` is the
    core axis (the number of ICI dimensions) and its direction +1 from core 0 to core 1.
    """

    index: int
    src: Coords
    dst: Coords
    dim: int
    direction: int  # +1 or -1 along `dim` (a wraparound link keeps its logical direction)
    bandwidth_Bps: float
    wraparound: bool
    kind: str = "ici"  # "ici" or "d2d"
    src_core: int | None = None  # D2D links only
    dst_core: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "src": list(self.src),
            "dst": list(self.dst),
            "bandwidth_Bps": self.bandwidth_Bps,
            "wraparound": self.wraparound,
        }
        if self.kind == "d2d":
            out["src_core"], out["dst_core"] = self.src_core, self.dst_core
        return out


@dataclass(frozen=True)
class DevicePosition:
    """Where a JAX device sits: its chip and its core on that chip."""

    device_id: int
    chip: Coords
    core: int


def slice_name(generation: str, shape: Sequence[int]) -> str:
    """The name of a `generation` slice of chip grid `shape` ("v5e:2x4"): `parse_topology_name`'s inverse."""
    return f"{generation}:{'x'.join(map(str, shape))}"


def parse_topology_name(name: str) -> tuple[str, tuple[int, ...]]:
    """Split `v5e:2x4` into (canonical generation, shape); raises TopologyError if malformed.

    Also accepts generation aliases (`v7x:2x2x1` for `tpu7x:2x2x1`) and the Cloud/xpk
    accelerator types a generation lists in hardware.json (`tpu7x-8`: 8 TensorCores, 2x2x1).
    """
    m = _NAME.fullmatch(name)
    if m:
        generation = canonical_generation(m.group(1))
        shape = tuple(int(n) for n in m.group(2).split("x"))
    else:
        a = _ACCELERATOR_TYPE.fullmatch(name)
        if not a:
            raise TopologyError(
                f"malformed TPU slice name {name!r}; write GENERATION:SHAPE as JAX names it, e.g. v5e:2x4, "
                "v4:2x2x2 or tpu7x:2x2x1"
            )
        generation = canonical_generation(a.group(1))
        types = hardware_profile(generation).accelerator_types
        if a.group(2) not in types:
            known = ", ".join(f"{generation}-{k}" for k in types) or "none"
            raise TopologyError(
                f"{name!r} is not an accelerator type aoizora can map to a slice shape (known: {known}); "
                f"write {generation}:SHAPE, e.g. {generation}:{'x'.join(['2'] * hardware_profile(generation).ici_dims)}"
            )
        shape = tuple(int(n) for n in types[a.group(2)].split("x"))
    profile = hardware_profile(generation)
    if len(shape) != profile.ici_dims:
        example = "x".join(["2"] * profile.ici_dims)
        raise TopologyError(
            f"{generation} slices are {profile.ici_dims}-D but {name!r} has {len(shape)} dimension(s); "
            f"write e.g. {generation}:{example}"
        )
    if any(n < 1 for n in shape):
        raise TopologyError(f"slice dimensions must be positive in {name!r}")
    chips, side = profile.largest_slice_chips, profile.largest_slice_dim
    if (chips is not None and math.prod(shape) > chips) or (side is not None and max(shape) > side):
        bound = f"{chips} chips" + (f", no side longer than {side}" if side is not None else "")
        raise TopologyError(
            f"{name!r} is larger than the largest {generation} slice ({bound}, a whole pod); "
            f"name a slice within one pod, e.g. {generation}:{'x'.join(['2'] * profile.ici_dims)}"
        )
    return generation, shape


class Topology:
    """The chips and directed links of a TPU slice, with dimension-order routing.

    Chips, their coordinates and the cores of each chip come from libtpu's description of the
    slice; ICI links and wraparound follow the generation's rules. Routes between chips are
    dimension-order (lowest dimension first), taking the shorter way round on wrapped axes and
    the positive direction on a tie.

    Several devices per chip: on a generation with a die-to-die link (`d2d_bandwidth_Bps` in
    hardware.json, TPU7x) each chip has one D2D link per direction between its two cores, and a
    route between the two cores of one chip is that link; elsewhere (v4 without megacore, whose
    two TensorCores share one die and its HBM) such a route is empty and free.

    `core_ici` states how the cores of a chip reach its ICI links, which public material does not
    settle for TPU7x (libtpu gives both cores the chip's coordinates; JAX treats the core as one
    more, faster, torus axis):
      * `"direct"` (default): every core drives the chip's ICI links itself; traffic between
        chips never crosses a D2D link, and the two cores of a chip share its ICI links;
      * `"via-core0"`: the ICI links hang off core 0's die; core 1's traffic to or from another
        chip crosses the D2D link first or last. Swapping the cores is then no symmetry.
    `hardware` is one device's share of the chip (`HardwareProfile.per_device`); the chip's own
    profile is `chip_hardware`.
    """

    def __init__(
        self, name: str, generation: str, shape: tuple[int, ...], devices: tuple[Any, ...], core_ici: CoreIci = "direct"
    ):
        if core_ici not in CORE_ICI_MODES:
            raise TopologyError(f"unknown core-to-ICI assumption {core_ici!r}; use one of: {', '.join(CORE_ICI_MODES)}")
        self.generation = generation
        self.shape = shape
        self.name = f"{generation}:{'x'.join(map(str, shape))}"
        self.requested_name = name
        self.core_ici: str = core_ici
        self.chip_hardware: HardwareProfile = hardware_profile(generation)
        self.wrap: tuple[bool, ...] = self.chip_hardware.wraps(shape)
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
            any(not 0 <= c < n for c, n in zip(chip, shape, strict=True)) for chip in by_chip
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
        self.hardware: HardwareProfile = self.chip_hardware.per_device(self.cores_per_chip)
        self.chip_by_coords: dict[Coords, Chip] = {c.coords: c for c in self.chips}
        ici = self._build_links()
        self.links: tuple[Link, ...] = ici + self._build_d2d_links(len(ici))
        self.link_index: dict[tuple[Coords, Coords], int] = {
            (l.src, l.dst): l.index for l in self.links if l.kind == "ici"
        }
        self.d2d_index: dict[tuple[Coords, int, int], int] = {
            (l.src, int(l.src_core), int(l.dst_core)): l.index for l in self.links if l.kind == "d2d"  # type: ignore[arg-type]  # a d2d link names both cores
        }
        self._route_cache: dict[tuple[Coords, Coords], tuple[int, ...]] = {}
        self._device_route_cache: dict[tuple[int, int], tuple[int, ...]] = {}

    # --- structure -------------------------------------------------------------------------
    @property
    def num_chips(self) -> int:
        return len(self.chips)

    @property
    def num_devices(self) -> int:
        return len(self.devices)

    @property
    def has_d2d(self) -> bool:
        """Whether the cores of a chip are joined by D2D links (which routes then use)."""
        return bool(self.d2d_index)

    @functools.cached_property
    def link_time_weights(self) -> tuple[float, ...]:
        """Time per byte of each link relative to an ICI link: 1 for ICI, less for a faster D2D link."""
        reference = self.chip_hardware.link_bandwidth_Bps
        return tuple(reference / link.bandwidth_Bps for link in self.links)

    @property
    def route_key(self) -> str:
        """Identifies the routes: the slice and, where it changes them, the core-to-ICI assumption."""
        return self.name if self.core_ici == "direct" or not self.has_d2d else f"{self.name}/{self.core_ici}"

    @property
    def cores_are_interchangeable(self) -> bool:
        """Whether swapping the cores of every chip maps the links onto themselves (a symmetry)."""
        return not (self.has_d2d and self.core_ici == "via-core0")

    def device_by_id(self, device_id: int) -> Any:
        for dev in self.devices:
            if dev.id == device_id:
                return dev
        raise TopologyError(f"device id {device_id} is not part of {self.name}")

    def _build_links(self) -> tuple[Link, ...]:
        links: list[Link] = []
        bw = self.chip_hardware.link_bandwidth_Bps
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

    def _build_d2d_links(self, first_index: int) -> tuple[Link, ...]:
        """One D2D link per direction between the two cores of every chip, indexed from `first_index`."""
        bw = self.chip_hardware.d2d_bandwidth_Bps
        if bw is None or self.cores_per_chip == 1:
            return ()
        if self.cores_per_chip != 2:
            raise TopologyError(
                f"libtpu describes {self.name} with {self.cores_per_chip} devices per chip; aoizora models the "
                "die-to-die link of two-core chips only"
            )
        dim = len(self.shape)  # the core axis
        links: list[Link] = []
        for chip in self.chips:
            for src_core, dst_core in ((0, 1), (1, 0)):
                direction = +1 if dst_core > src_core else -1
                links.append(
                    Link(first_index + len(links), chip.coords, chip.coords, dim, direction, bw, False, "d2d",
                         src_core, dst_core)
                )
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
        """Directed links from one device to another.

        Two cores of one chip: the D2D link between them (empty where the generation has none).
        Different chips: the dimension-order ICI route between the chips, and under
        `core_ici="via-core0"` the D2D hop from core 1 to core 0 before it and from core 0 to
        core 1 after it.
        """
        key = (src_device, dst_device)
        hit = self._device_route_cache.get(key)
        if hit is not None:
            return hit
        a, b = self.positions[src_device], self.positions[dst_device]
        if a.chip == b.chip:
            route: tuple[int, ...] = () if a.core == b.core else self._d2d(a.chip, a.core, b.core)
        else:
            route = self.route(a.chip, b.chip)
            if self.core_ici == "via-core0":
                route = self._d2d(a.chip, a.core, 0) + route + self._d2d(b.chip, 0, b.core)
        self._device_route_cache[key] = route
        return route

    def _d2d(self, chip: Coords, src_core: int, dst_core: int) -> tuple[int, ...]:
        """The D2D link from one core of `chip` to another, as a route (empty: same core or no D2D)."""
        if src_core == dst_core:
            return ()
        link = self.d2d_index.get((chip, src_core, dst_core))
        return () if link is None else (link,)

    # --- output ----------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "generation": self.generation,
            "shape": list(self.shape),
            "wrap": list(self.wrap),
            "cores_per_chip": self.cores_per_chip,
            "core_ici": self.core_ici,
            "chips": [
                {"id": c.id, "coords": list(c.coords), "device_ids": list(c.device_ids)} for c in self.chips
            ],
            "links": [l.to_json() for l in self.links],
            "hardware": self.chip_hardware.to_json(),
            "device_hardware": self.hardware.to_json(),
        }

    def __repr__(self) -> str:
        return f"Topology({self.route_key}, chips={self.num_chips}, links={len(self.links)}, wrap={self.wrap})"


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
def get_topology(name: str, core_ici: CoreIci = "direct") -> Topology:
    """The topology of a TPU slice named as JAX names it (e.g. `v5e:2x4`, `tpu7x:2x2x1`), built from libtpu.

    `core_ici` is the assumption on how a chip's cores reach its ICI links (see `Topology`).
    """
    generation, shape = parse_topology_name(name)
    canonical = f"{generation}:{'x'.join(map(str, shape))}"
    devices = compile_only_devices(canonical)
    kinds = {d.device_kind for d in devices}
    profile = hardware_profile(generation)
    if not kinds <= set(profile.device_kinds):
        raise TopologyError(f"libtpu describes {canonical} with device kind(s) {sorted(kinds)}, not {generation}")
    return Topology(canonical, generation, shape, devices, core_ici)
