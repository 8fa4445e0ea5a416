"""Enumerate the distinct physical placements of a logical mesh on a slice.

Every physical axis (ICI dimensions, then the core-on-chip axis where a chip exposes several
devices) is split into prime "digits", major to minor; so is every logical axis. A placement
maps logical digits one-to-one onto physical digits of equal size: this covers every
factorisation of the physical axes into sub-axes and every assignment of logical axes to them in
every order (the paper's physical axis orders). On top, each logical axis that spans several
physical coordinates may walk them in a ring-friendly order (snake, Hamiltonian cycle, folded
line; see `orders`). Placements equal up to a symmetry of the slice are merged (`symmetry`), and
JAX's own choice is always included as `jax-default`.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aoizora.errors import PlacementError
from aoizora.placement import orders
from aoizora.placement.jax_default import jax_default_placement
from aoizora.placement.mesh_spec import MeshSpec
from aoizora.placement.placement import Placement
from aoizora.placement.symmetry import canonical_keys
from aoizora.topology import Topology

DEFAULT_MAX_CANDIDATES = 200_000
_AXIS_LETTERS = "xyz"


@dataclass(frozen=True)
class Digit:
    """One prime factor of a physical axis: `size` values at `stride` along `axis`."""

    axis: int
    index: int  # 0 = most major digit of its axis
    size: int
    stride: int


@dataclass
class PlacementSet:
    """The outcome of enumeration: distinct placements (jax-default first) and how many were generated."""

    topology: Topology
    mesh: MeshSpec
    placements: list[Placement]
    generated: int
    notes: list[str] = field(default_factory=list)

    @property
    def distinct(self) -> int:
        return len(self.placements)

    def by_name(self, name: str) -> Placement:
        for p in self.placements:
            if p.name == name:
                return p
        raise PlacementError(
            f"no placement named {name!r}; choose one of: {', '.join(p.name for p in self.placements)}")


def prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def physical_axes(topology: Topology) -> tuple[list[int], list[str]]:
    sizes = list(topology.shape)
    names = [_AXIS_LETTERS[i] if i < 3 else f"d{i}" for i in range(len(sizes))]
    if topology.cores_per_chip > 1:
        sizes.append(topology.cores_per_chip)
        names.append("core")
    return sizes, names


def physical_digits(topology: Topology) -> list[Digit]:
    digits = []
    for axis, size in enumerate(physical_axes(topology)[0]):
        factors = prime_factors(size)
        for index, f in enumerate(factors):
            digits.append(Digit(axis, index, f, math.prod(factors[index + 1 :])))
    return digits


@dataclass(frozen=True)
class _Coordinate:
    """A run of digits of one physical axis that a logical axis walks as one coordinate."""

    axis: int
    stride: int
    size: int
    digits: tuple[Digit, ...]


def _coordinates(digits: list[Digit]) -> list[_Coordinate]:
    """Merge consecutive digits (logical major to minor) that form one contiguous physical run."""
    coords: list[_Coordinate] = []
    for d in digits:
        last = coords[-1] if coords else None
        if last is not None and last.axis == d.axis and last.stride == d.stride * d.size:
            coords[-1] = _Coordinate(d.axis, d.stride, last.size * d.size, last.digits + (d,))
        else:
            coords.append(_Coordinate(d.axis, d.stride, d.size, (d,)))
    return coords


def _axis_orders(coords: list[_Coordinate]) -> list[tuple[str, tuple[int, ...]]]:
    """Distinct walks of one logical axis over its coordinates: (label, permutation)."""
    sizes = tuple(c.size for c in coords)
    candidates: list[tuple[str, tuple[int, ...] | None]] = [("", orders.raster(sizes))]
    if len(coords) >= 2:
        candidates += [("snake", orders.snake(sizes)), ("cycle", orders.cycle(sizes))]
    elif coords:
        candidates.append(("fold", orders.folded(sizes[0])))
    seen, out = set(), []
    for label, perm in candidates:
        if perm is not None and perm not in seen:
            seen.add(perm)
            out.append((label, perm))
    return out


def _digit_label(d: Digit, axis_names: list[str], digits_per_axis: dict[int, int]) -> str:
    return axis_names[d.axis] if digits_per_axis[d.axis] == 1 else f"{axis_names[d.axis]}{d.index}"


def _coord_label(c: _Coordinate, axis_names: list[str], digits_per_axis: dict[int, int]) -> str:
    if len(c.digits) == digits_per_axis[c.axis]:
        return axis_names[c.axis]  # the whole physical axis, in order
    return "".join(_digit_label(d, axis_names, digits_per_axis) for d in c.digits)


def enumerate_placements(
    topology: Topology,
    mesh: MeshSpec,
    *,
    max_candidates: int = DEFAULT_MAX_CANDIDATES,
    deduplicate: bool = True,
) -> PlacementSet:
    """All distinct placements of `mesh` on `topology`, with `jax-default` first.

    With `deduplicate=False` every generated candidate is returned (for inspection and tests).
    """
    mesh.check_fits(topology.num_devices, topology.name)
    candidates = _candidates(topology, mesh, max_candidates)
    stacked = np.stack([c.coords.reshape(-1, c.coords.shape[-1]) for c in candidates])
    keys = canonical_keys(stacked, topology)

    default = jax_default_placement(topology, mesh)
    default_key = canonical_keys(default.coords(topology).reshape(1, -1, stacked.shape[-1]), topology)[0]

    id_of = {pos.chip + ((pos.core,) if topology.cores_per_chip > 1 else ()): d
             for d, pos in topology.positions.items()}
    placements: list[Placement] = []
    seen: dict[bytes, str] = {}
    for key, c in zip(keys, candidates, strict=True):
        if deduplicate and key in seen:
            continue
        seen[key] = c.name
        if deduplicate and key == default_key:
            default = Placement(default.name, f"{default.description}; same geometry as {c.name} ({c.description})",
                                mesh, default.device_ids)
            continue
        ids = np.array([id_of[tuple(int(v) for v in xyz)] for xyz in c.coords.reshape(-1, c.coords.shape[-1])])
        placements.append(Placement(c.name, c.description, mesh, ids.reshape(mesh.shape)))
    notes = []
    if default_key not in seen:
        notes.append("jax-default is not among the enumerated axis orders")
    result = PlacementSet(topology, mesh, [default, *placements], len(candidates) + 1, notes)
    for p in result.placements:
        p.check(topology)
    return result


@dataclass(frozen=True)
class _Candidate:
    """One generated placement: its sort rank, name, description and physical coordinates."""

    rank: tuple[int, int, str]
    name: str
    description: str
    coords: np.ndarray


def _candidates(topology: Topology, mesh: MeshSpec, max_candidates: int) -> list[_Candidate]:
    """Every assignment of the mesh's prime factors to physical digits, times every walk of each
    logical axis over its coordinates, ranked (plain walks and fewer coordinates first)."""
    phys = physical_digits(topology)
    phys_sizes, axis_names = physical_axes(topology)
    digits_per_axis = {a: sum(1 for d in phys if d.axis == a) for a in range(len(phys_sizes))}
    logical = [(j, f) for j, n in enumerate(mesh.axis_sizes) for f in prime_factors(n)]
    # Equal products have equal prime factors, so a digit bijection always exists.
    assert sorted(f for _, f in logical) == sorted(d.size for d in phys)

    assignments = [
        perm for perm in itertools.permutations(phys)
        if all(p.size == f for p, (_, f) in zip(perm, logical, strict=True))
    ]
    assignments = list(dict.fromkeys(assignments))
    candidates: list[_Candidate] = []
    for perm in assignments:
        per_axis: list[list[Digit]] = [[] for _ in mesh.axis_sizes]
        for (j, _), d in zip(logical, perm, strict=True):
            per_axis[j].append(d)
        axis_coords = [_coordinates(ds) for ds in per_axis]
        axis_walks = [_axis_orders(cs) for cs in axis_coords]
        total = math.prod(len(w) for w in axis_walks) * len(assignments)
        if total > max_candidates:
            raise PlacementError(
                f"mesh {mesh} on {topology.name} has about {total} candidate placements, more than the limit "
                f"{max_candidates}; plan on a smaller sub-slice or raise --max-candidates"
            )
        for walks in itertools.product(*axis_walks):
            contrib = [_axis_contribution(cs, perm_j, len(phys_sizes))
                       for cs, (_, perm_j) in zip(axis_coords, walks, strict=True)]
            labels, descs = _walk_labels(mesh, axis_coords, walks, axis_names, digits_per_axis)
            rank = (sum(1 for label, _ in walks if label), sum(len(cs) for cs in axis_coords), " ".join(labels))
            candidates.append(_Candidate(rank, " ".join(labels), "; ".join(descs), _combine(contrib, mesh.shape)))
    candidates.sort(key=lambda c: c.rank)
    return candidates


def _walk_labels(mesh: MeshSpec, axis_coords: list[list[_Coordinate]], walks: tuple[tuple[str, Any], ...],
                 axis_names: list[str], digits_per_axis: dict[int, int]) -> tuple[list[str], list[str]]:
    """Per logical axis, its short name (`x=y0.x~snake`) and description (`x on y[2 step 1] ...`)."""
    labels, descs = [], []
    for name, cs, (label, _) in zip(mesh.axis_names, axis_coords, walks, strict=True):
        if not cs:
            continue  # a size-1 axis occupies no physical digit
        where = ".".join(_coord_label(c, axis_names, digits_per_axis) for c in cs)
        labels.append(f"{name}={where}" + (f"~{label}" if label else ""))
        descs.append(
            f"{name} on "
            + " x ".join(f"{axis_names[c.axis]}[{c.size} step {c.stride}]" for c in cs)
            + (f" ({label})" if label else "")
        )
    return labels, descs


def _axis_contribution(coords: list[_Coordinate], perm: tuple[int, ...], ndim: int) -> np.ndarray:
    """(axis size, ndim) physical offsets of each ring position of one logical axis."""
    sizes = [c.size for c in coords]
    n = math.prod(sizes)
    out = np.zeros((n, ndim), dtype=np.int64)
    for pos, raster_index in enumerate(perm):
        rem = raster_index
        for c, size in zip(reversed(coords), reversed(sizes), strict=True):
            out[pos, c.axis] += (rem % size) * c.stride
            rem //= size
    return out


def _combine(contrib: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """Sum per-axis offsets into a (mesh shape + (ndim,)) array of physical coordinates."""
    total = np.zeros(tuple(shape) + (contrib[0].shape[-1],), dtype=np.int64)
    for j, c in enumerate(contrib):
        view = [1] * len(shape) + [c.shape[-1]]
        view[j] = shape[j]
        total = total + c.reshape(view)
    return total
