"""What one collective sends where: a device-to-device byte matrix, its step count and hop depth.

Each collective is reconstructed as the algorithm the compiler chose (`algorithms`): rings for
all-gather, reduce-scatter and all-reduce (one ring per group, all groups at once), direct
pairwise exchanges for all-to-all, point-to-point for collective-permute. The bytes of each ring
phase and exchange are the bandwidth-optimal ones of `aoizora.hlo.traffic`.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from aoizora.cost.links import Incidence
from aoizora.hlo.program import Collective, CollectiveKind
from aoizora.hlo.traffic import all_to_all_chunk, ring_phases
from aoizora.placement import orders

_BRUTE_FORCE_MAX = 8  # rings up to 8 members: try every order (7!/2 tours at most)


@dataclass(frozen=True)
class Traffic:
    matrix: np.ndarray  # (N, N) bytes from row i to row j over the whole collective
    steps: int  # sequential algorithm steps
    max_hops: int  # longest route of any single step
    chain_hops: int = 0  # hops on the longest path one chunk travels (what the hop latency is paid on)


def ring_edges(order: tuple[int, ...]) -> list[tuple[int, int]]:
    return [(order[k], order[(k + 1) % len(order)]) for k in range(len(order))]


def ring_chain_hops(edge_hops: list[int]) -> int:
    """Hops on the longest path a chunk travels in one pass of a ring.

    A ring step forwards a chunk as soon as it has arrived (no barrier across the ring between
    steps), so the hop latency adds up along each chunk's path: the ring's len - 1 consecutive
    edges from where the chunk starts. The longest such path skips only the shortest edge. A
    ring laid out in the listed order of an open line (its closing edge spanning the line) pays
    that edge's hops once per pass, not once per step.
    """
    if len(edge_hops) < 2:
        return sum(edge_hops)
    return sum(edge_hops) - min(edge_hops)


def _ring_matrix(order: tuple[int, ...], n: int, per_edge: float, bidirectional: bool) -> np.ndarray:
    m = np.zeros((n, n))
    for a, b in ring_edges(order):
        if bidirectional:
            m[a, b] += per_edge / 2
            m[b, a] += per_edge / 2
        else:
            m[a, b] += per_edge
    return m


class RingOrderer:
    """Chooses the ring order over a group's members that the compiler would use (`best`).

    The order minimises the busiest link of the ring alone (its load over the link's bandwidth,
    relative to an ICI link), then its total hops. Routes are
    translation invariant, so the choice is cached by the members' positions relative to the
    group's corner: the many translated groups of one collective, and the same group shape in
    other placements, cost one search.
    """

    def __init__(self, inc: Incidence, positions: np.ndarray):
        self.inc = inc
        self.positions = positions  # (N, D) physical position of each incidence row
        self._cache: dict[tuple[tuple[int, ...], ...], tuple[int, ...]] = {}

    def best(self, group: tuple[int, ...], bidirectional: bool) -> tuple[int, ...]:
        members = sorted(group, key=lambda r: tuple(self.positions[r]))
        corner = self.positions[members].min(axis=0)
        key = tuple(tuple(int(v) for v in self.positions[r] - corner) for r in members) + ((int(bidirectional),),)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._search(tuple(members), bidirectional)
            self._cache[key] = hit
        return tuple(members[k] for k in hit)

    def _search(self, members: tuple[int, ...], bidirectional: bool) -> tuple[int, ...]:
        """Positions (into `members`) of the best ring order."""
        n = len(members)
        if n <= 3:
            return tuple(range(n))
        if n <= _BRUTE_FORCE_MAX:
            tours = np.array([(0, *p) for p in itertools.permutations(range(1, n)) if p[0] < p[-1]])
        else:
            tours = np.array([tuple(range(n)), self._nearest_neighbour(members), *self._grid_walks(members)])
        N = self.inc.num_devices
        idx = np.array(members)
        rows = self.inc.matrix[(idx[:, None] * N + idx[None, :]).ravel()].toarray().reshape(n, n, -1)
        src, dst = tours, np.roll(tours, -1, axis=1)
        loads = rows[src, dst].sum(axis=1)
        if bidirectional:
            loads = (loads + rows[dst, src].sum(axis=1)) / 2
        loads = loads * self.inc.weight  # time, not bytes: a D2D link carries its load faster
        hops = self.inc.hops[idx[src], idx[dst]].sum(axis=1)
        best = np.lexsort((hops, loads.max(axis=1)))[0]
        return tuple(int(v) for v in tours[best])

    def _grid_walks(self, members: tuple[int, ...]) -> list[tuple[int, ...]]:
        """Snake and Hamiltonian-cycle walks of the members' bounding box, when they fill it."""
        pos = self.positions[list(members)]
        corner = pos.min(axis=0)
        extent = tuple(int(v) for v in pos.max(axis=0) - corner + 1)
        if int(np.prod(extent)) != len(members):
            return []
        at = {tuple(int(v) for v in p - corner): k for k, p in enumerate(pos)}
        cells = list(np.ndindex(*extent))
        walks = []
        for perm in (orders.snake(extent), orders.cycle(extent)):
            if perm is not None:
                walks.append(tuple(at[cells[i]] for i in perm))
        return walks

    def _nearest_neighbour(self, members: tuple[int, ...]) -> tuple[int, ...]:
        left = list(range(1, len(members)))
        tour = [0]
        while left:
            nxt = min(left, key=lambda k: (self.inc.hops[members[tour[-1]], members[k]], k))
            tour.append(nxt)
            left.remove(nxt)
        return tuple(tour)


def collective_phases(
    coll: Collective,
    groups: list[tuple[int, ...]],
    pairs: list[tuple[int, int]],
    inc: Incidence,
    *,
    bidirectional: bool,
    reorder: RingOrderer | None,
    dims: tuple[int, ...] | None = None,
    positions: np.ndarray | None = None,
    dim_orders: Sequence[tuple[int, ...]] | None = None,
) -> list[Traffic]:
    """Traffic of one collective, phase by phase (phases run one after another).

    Groups and pairs are already in incidence rows. `dims` (from the algorithm config) lays each
    group on a grid for N-D ring strategies: a reduce-scatter runs one phase per grid dimension
    (the payload shrinking by each dimension's size), an all-gather the mirror image, an
    all-reduce both. The grid's lines are the group's physical lines when its chips fill a box of
    those extents (`positions` gives each row's physical position): libtpu prints the same N-D
    grid for every device order of a full-slice group, so the grid is physical, not logical.
    Members keep their listed order within a line.
    """
    n = inc.num_devices
    if coll.kind == CollectiveKind.COLLECTIVE_PERMUTE:
        return [_permute_traffic(coll, pairs, inc)]
    size = max((len(g) for g in groups), default=1)
    if size < 2:
        return []
    if coll.kind == CollectiveKind.ALL_TO_ALL:
        return [_all_to_all_traffic(coll, groups, size, inc)]
    dims = dims if dims and int(np.prod(dims)) == size else (size,)
    orders = [o for o in (dim_orders or []) if sorted(o) == list(range(len(dims)))] or [tuple(range(len(dims)))]
    # Each colour carries an equal share; the k-th phases of all colours run at the same time.
    slots: list[Traffic] = []
    for order in orders:
        for k, phase in enumerate(ring_phases(coll.kind, dims, order, coll.operand_bytes / len(orders))):
            d = phase.dim
            per_edge = phase.steps * phase.bytes_per_step
            m = np.zeros((n, n))
            hops = chain = 0
            for g in groups:
                for line in _grid_lines(g, dims, d, positions):
                    ring = reorder.best(line, bidirectional) if reorder is not None and len(dims) == 1 else line
                    m += _ring_matrix(ring, n, per_edge, bidirectional)
                    edge_hops = [int(inc.hops[a, b]) for a, b in ring_edges(ring)]
                    hops = max(hops, max(edge_hops))
                    chain = max(chain, ring_chain_hops(edge_hops))
            if k < len(slots):
                prev = slots[k]
                slots[k] = Traffic(prev.matrix + m, max(prev.steps, phase.steps), max(prev.max_hops, hops),
                                   max(prev.chain_hops, chain))
            else:
                slots.append(Traffic(m, phase.steps, hops, chain))
    return slots


def _permute_traffic(coll: Collective, pairs: list[tuple[int, int]], inc: Incidence) -> Traffic:
    """A collective-permute: each source sends its buffer to its target, in one step."""
    n = inc.num_devices
    m = np.zeros((n, n))
    for a, b in pairs:
        m[a, b] += coll.operand_bytes
    hops = max((int(inc.hops[a, b]) for a, b in pairs), default=0)
    return Traffic(m, 1 if pairs else 0, hops, hops)


def _all_to_all_traffic(coll: Collective, groups: list[tuple[int, ...]], size: int, inc: Incidence) -> Traffic:
    """An all-to-all: every member sends one chunk to every other member of its group, in one step."""
    n = inc.num_devices
    m = np.zeros((n, n))
    chunk = all_to_all_chunk(size, coll.operand_bytes)
    hops = 0
    for g in groups:
        for a in g:
            for b in g:
                if a != b:
                    m[a, b] += chunk
                    hops = max(hops, int(inc.hops[a, b]))
    return Traffic(m, 1, hops, hops)


def _grid_lines(
    group: tuple[int, ...], dims: tuple[int, ...], d: int, positions: np.ndarray | None = None
) -> list[tuple[int, ...]]:
    """Rings along dimension `d` of the group's grid: physical lines when the group's chips fill
    a box whose extents are `dims` (matched to physical axes in order), else the listed order laid
    row-major on `dims`."""
    if positions is not None:
        pos = positions[list(group)]
        spans = [a for a in range(pos.shape[1]) if np.ptp(pos[:, a]) > 0]
        extents = [int(np.ptp(pos[:, a])) + 1 for a in spans]
        if len(spans) == len(dims) and sorted(extents) == sorted(dims) and int(np.prod(extents)) == len(group):
            free = list(range(len(spans)))
            axis_of_dim = []
            for size in dims:  # grid dimension -> first unused physical axis of that extent
                k = next(i for i in free if extents[i] == size)
                free.remove(k)
                axis_of_dim.append(spans[k])
            along = axis_of_dim[d]
            lines: dict[tuple[int, ...], list[int]] = {}
            for row, p in zip(group, pos, strict=True):
                lines.setdefault(tuple(int(v) for i, v in enumerate(p) if i != along), []).append(int(row))
            return [tuple(v) for v in lines.values()]
    grid = np.array(group).reshape(dims)
    moved = np.moveaxis(grid, d, -1).reshape(-1, dims[d])
    return [tuple(int(v) for v in row) for row in moved]
