"""Collective algorithms as DAGs of point-to-point transfers over the placed devices.

Each collective instance becomes a list of `Transfer`s (one chunk of one step from one device
to another) with prerequisites: a ring step forwards data it must first have received (store
and forward, per chunk), so chunk c of step s from device i waits for chunk c of step s-1 into
i. Transfers that leave one device along one ring direction form a *sender* queue and leave in
(step, chunk) order, one at a time, which pipelines chunks along the ring.

The compiled algorithm config is read, with Q2, into `aoizora.hlo.AlgorithmConfig` (rules and
evidence in `aoizora.hlo.algorithm`). The simulator's choices on top of it:

* ring direction (`ring_direction="auto"`): the direction the config names, else
  `default_direction` (bidirectional unless told otherwise: the textbook V/W_bidi assumption);
* N-D strategies (the config's ``grid``, ``StrategyND`` as well as ``...NDRingStrategy``): one
  ring per grid dimension, in phases. Assumption: such a strategy names *physical* dimensions
  (on v5e:4x4 a 16-device group prints ``dim_sizes:4,4``, the slice's own extents, whatever the
  group's device order), so when the group's chips fill an a x b box, strategy dim k runs along
  the k-th physical axis of that extent; otherwise the listed order is laid row-major on the
  grid. Each line (a ring along one dimension) goes through its members in their listed order
  (``ring_order="listed"``) or in their best order (``"best"``); each colour carries 1/colours of
  the data and walks the dimensions in its ``dim_used`` order (reduce-scatter phases, then
  all-gather phases in reverse for an all-reduce). Each per-dimension ring is uni- or
  bidirectional as above.
"""

from __future__ import annotations

import functools
import itertools
import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from aoizora.hlo.algorithm import AlgorithmConfig, RingDirection, RingOrder, resolve_direction
from aoizora.hlo.program import Collective, CollectiveKind
from aoizora.hlo.traffic import all_to_all_chunk, ring_phases
from aoizora.topology import Topology


def ring_direction(algorithm: AlgorithmConfig | None,
                   default: RingDirection = RingDirection.BIDIRECTIONAL) -> RingDirection:
    """Uni- or bidirectional ring for a compiled collective: the config's direction, else `default`."""
    return resolve_direction(None, algorithm, default)


@dataclass(frozen=True)
class NDLayout:
    """An N-D strategy: grid dimension sizes and, per color, the order the dimensions are used."""

    dim_sizes: tuple[int, ...]
    dim_orders: tuple[tuple[int, ...], ...]


def nd_layout(algorithm: AlgorithmConfig | None, group_size: int) -> NDLayout | None:
    """The N-D layout of an N-D strategy's config when it fits the group, else None (1-D ring)."""
    grid = algorithm.grid_of(group_size) if algorithm is not None else None
    if grid is None or algorithm is None:
        return None
    return NDLayout(grid, algorithm.dim_orders_of(len(grid)))


# --- ring order ------------------------------------------------------------------------------


def ring_link_loads(topology: Topology, order: tuple[int, ...], bidirectional: bool) -> dict[int, int]:
    """Directed-link load (hops crossing each link) of one ring in `order`, both ways if bidi."""
    n = len(order)
    loads: dict[int, int] = {}
    pairs = [(order[i], order[(i + 1) % n]) for i in range(n)]
    if bidirectional:
        pairs += [(b, a) for a, b in pairs]
    for a, b in pairs:
        for l in topology.device_route(a, b):
            loads[l] = loads.get(l, 0) + 1
    return loads


_LINK_WEIGHTS: weakref.WeakKeyDictionary[Topology, np.ndarray] = weakref.WeakKeyDictionary()


def _link_weights(topology: Topology) -> np.ndarray:
    """Time per byte of each link relative to an ICI link: 1 for ICI, less for a faster D2D link."""
    weights = _LINK_WEIGHTS.get(topology)
    if weights is None:
        weights = np.array(topology.link_time_weights, dtype=float)
        weights.flags.writeable = False
        _LINK_WEIGHTS[topology] = weights
    return weights


def ring_cost(topology: Topology, order: tuple[int, ...], bidirectional: bool) -> tuple[float, int, int]:
    """A ring over `order`, scored (smaller is better): its slowest link's weighted load, longest hop, total hops."""
    loads = ring_link_loads(topology, order, bidirectional)
    weights = _link_weights(topology)
    hops = [len(topology.device_route(order[i], order[(i + 1) % len(order)])) for i in range(len(order))]
    return (max((n * weights[l] for l, n in loads.items()), default=0.0), max(hops, default=0), sum(hops))


# best_ring_order depends on nothing but the slice and the listed group, and the same groups recur
# in every collective of a program and in every placement the oracle simulates: an 8-member
# group's exact search (5,040 orders) is paid once per slice, not once per collective per placement.
_RING_ORDERS: weakref.WeakKeyDictionary[Topology, dict[tuple[tuple[int, ...], bool], tuple[int, ...]]] = (
    weakref.WeakKeyDictionary()
)


def best_ring_order(topology: Topology, group: tuple[int, ...], bidirectional: bool) -> tuple[int, ...]:
    """The order of the group's devices minimising (bottleneck link load, longest hop, total hops);
    a link's load counts in time (hops over it divided by its bandwidth relative to an ICI link).

    Exact (all cyclic orders, first device fixed) up to 8 members; above that a deterministic
    2-opt local search started from the listed order, a nearest-neighbour order and, when the
    chips fill a rectangle, its closed snake. Ties keep the earliest order found, so the
    listed order wins whenever it is already optimal. Memoised per slice.
    """
    memo = _RING_ORDERS.setdefault(topology, {})
    key = (tuple(group), bidirectional)
    order = memo.get(key)
    if order is None:
        order = memo[key] = search_ring_order(topology, key[0], bidirectional)
    return order


def clear_ring_order_memo() -> None:
    """Forget every memoised ring order (benchmarks time the search itself with it)."""
    _RING_ORDERS.clear()


def search_ring_order(topology: Topology, group: tuple[int, ...], bidirectional: bool) -> tuple[int, ...]:
    """The ring order the simulator uses for `group`: exact up to 8 members, 2-opt from seeds beyond."""
    n = len(group)
    if n <= 3:
        return group
    if n <= 8:
        return exact_ring_order(topology, group, bidirectional)
    best = group
    best_cost = ring_cost(topology, group, bidirectional)
    for seed in (group, *_seed_orders(topology, group)):
        cand, cost = _two_opt(topology, seed, bidirectional)
        if cost < best_cost:
            best, best_cost = cand, cost
    return best


def exact_ring_order(topology: Topology, group: tuple[int, ...], bidirectional: bool) -> tuple[int, ...]:
    """The best of all cyclic orders with the first device fixed, costed together (numpy).

    Same cost and tie rule as `ring_cost` over `itertools.permutations` order: the first
    minimum wins, and the listed order is the first permutation.
    """
    n = len(group)
    routes = {(a, b): topology.device_route(group[a], group[b]) for a in range(n) for b in range(n) if a != b}
    links = {l: k for k, l in enumerate(sorted({l for r in routes.values() for l in r}))}
    incidence = np.zeros((n, n, max(1, len(links))), dtype=np.int32)  # [from, to, link]: hops over it
    hops = np.zeros((n, n), dtype=np.int64)
    for (a, b), route in routes.items():
        for l in route:
            incidence[a, b, links[l]] += 1
        hops[a, b] = len(route)
    perms, nxt = _cyclic_orders(n)
    loads = incidence[perms, nxt].sum(axis=1)
    if bidirectional:
        loads += incidence[nxt, perms].sum(axis=1)
    weights = _link_weights(topology)[sorted(links, key=links.__getitem__)] if links else np.ones(1)
    bottleneck = (loads * weights).max(axis=1)  # time, not hops: a D2D link carries its share faster
    step_hops = hops[perms, nxt]
    # lexicographic (bottleneck, longest hop, total hops); lexsort is stable, so the first minimum wins
    best = np.lexsort((step_hops.sum(axis=1), step_hops.max(axis=1), bottleneck))[0]
    return tuple(group[i] for i in perms[int(best)])


@functools.lru_cache(maxsize=8)
def _cyclic_orders(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every order of positions 0..n-1 starting at 0, in `itertools.permutations` order, and each
    position's successor on the ring (the same for every group of n devices)."""
    perms = np.array([(0, *rest) for rest in itertools.permutations(range(1, n))], dtype=np.intp)
    nxt = np.roll(perms, -1, axis=1)
    perms.flags.writeable = nxt.flags.writeable = False  # shared by every caller
    return perms, nxt


def _two_opt(topology: Topology, order: tuple[int, ...], bidirectional: bool
             ) -> tuple[tuple[int, ...], tuple[float, int, int]]:
    """Deterministic first-improvement 2-opt on the ring cost, from `order`."""
    best, best_cost = order, ring_cost(topology, order, bidirectional)
    n = len(order)
    improved = True
    while improved:
        improved = False
        for i in range(1, n - 1):
            for j in range(i + 1, n):
                cand = best[:i] + tuple(reversed(best[i : j + 1])) + best[j + 1 :]
                cost = ring_cost(topology, cand, bidirectional)
                if cost < best_cost:
                    best, best_cost, improved = cand, cost, True
    return best, best_cost


def _seed_orders(topology: Topology, group: tuple[int, ...]) -> list[tuple[int, ...]]:
    """Starting orders for the local search: greedy nearest neighbour, and when the group's chips
    fill a 2-D rectangle with an even side, the closed snake (a neighbour-only Hamiltonian cycle)."""
    seeds = []
    left = list(group[1:])
    path = [group[0]]
    while left:
        cur = path[-1]
        nxt = min(left, key=lambda d: (len(topology.device_route(cur, d)), left.index(d)))
        path.append(nxt)
        left.remove(nxt)
    seeds.append(tuple(path))
    chips = {topology.positions[d].chip: d for d in group}
    if len(chips) == len(group):
        coords = list(chips)
        varying = [k for k in range(len(coords[0])) if len({c[k] for c in coords}) > 1]
        if len(varying) == 2:
            a, b = varying
            ra = sorted({c[a] for c in coords})
            rb = sorted({c[b] for c in coords})
            if len(ra) * len(rb) == len(group) and (len(ra) % 2 == 0 or len(rb) % 2 == 0):
                if len(ra) % 2:
                    a, b, ra, rb = b, a, rb, ra
                fixed = coords[0]

                def at(x: int, y: int) -> int:
                    c = list(fixed)
                    c[a], c[b] = x, y
                    return chips[tuple(c)]

                order = []
                for r, x in enumerate(ra):
                    ys = rb[1:] if r % 2 == 0 else list(reversed(rb[1:]))
                    order += [at(x, y) for y in ys]
                order += [at(x, rb[0]) for x in reversed(ra)]
                seeds.append(tuple(order))
    return seeds


# --- transfer DAGs ---------------------------------------------------------------------------


@dataclass
class TransferPlan:
    """The transfers of one collective instance (physical device ids), shared by all its runs."""

    src: list[int] = field(default_factory=list)
    dst: list[int] = field(default_factory=list)
    nbytes: list[float] = field(default_factory=list)
    route: list[tuple[int, ...]] = field(default_factory=list)
    sender: list[int] = field(default_factory=list)
    seq: list[int] = field(default_factory=list)
    prereqs: list[tuple[int, ...]] = field(default_factory=list)
    members: tuple[int, ...] = ()
    n_senders: int = 0
    # derived by `finish`
    dependents: list[list[int]] = field(default_factory=list)
    by_device: dict[int, list[int]] = field(default_factory=dict)
    involvement: dict[int, int] = field(default_factory=dict)
    description: str = ""

    def add(self, topology: Topology, src: int, dst: int, nbytes: float, sender: int, seq: int,
            prereqs: tuple[int, ...]) -> int:
        self.src.append(src)
        self.dst.append(dst)
        self.nbytes.append(nbytes)
        self.route.append(topology.device_route(src, dst))
        self.sender.append(sender)
        self.seq.append(seq)
        self.prereqs.append(prereqs)
        return len(self.src) - 1

    def new_sender(self) -> int:
        self.n_senders += 1
        return self.n_senders - 1

    def finish(self, members: tuple[int, ...]) -> TransferPlan:
        """Index dependents and per-device involvement once the DAG is built."""
        self.members = members
        self.dependents = [[] for _ in self.src]
        for t, pre in enumerate(self.prereqs):
            for p in pre:
                self.dependents[p].append(t)
        self.by_device = {d: [] for d in members}
        self.involvement = {d: 0 for d in members}
        for t, (s, d) in enumerate(zip(self.src, self.dst, strict=True)):
            self.by_device[s].append(t)
            self.involvement[s] += 1
            if d != s:
                self.by_device[d].append(t)
                self.involvement[d] += 1
        return self


def _ring(plan: TransferPlan, topology: Topology, order: tuple[int, ...], steps: int, step_bytes: float,
          direction: int, chunks: int, prior: dict[int, tuple[int, ...]],
          seq_base: int) -> dict[int, tuple[int, ...]]:
    """Add one one-way ring of `steps` store-and-forward steps; return each device's last receipts.

    `prior[d]`: transfers that must be delivered before device d sends its first step (earlier
    phases of an N-D algorithm).
    """
    n = len(order)
    if n < 2 or steps <= 0:
        return {d: prior.get(d, ()) for d in order}
    senders = [plan.new_sender() for _ in range(n)]
    chunk_bytes = step_bytes / chunks
    prev: list[list[int]] = [[] for _ in range(n)]  # prev[i][c]: transfer of the last step into i
    for s in range(steps):
        cur: list[list[int]] = [[0] * chunks for _ in range(n)]
        for c in range(chunks):
            for i in range(n):
                j = (i + direction) % n
                if s == 0:
                    pre = prior.get(order[i], ())
                else:
                    pre = (prev[i][c],)
                t = plan.add(topology, order[i], order[j], chunk_bytes, senders[i], seq_base + s * chunks + c, pre)
                cur[j][c] = t
        prev = cur
    return {order[i]: tuple(prev[i]) for i in range(n)}


def _rings(plan: TransferPlan, topology: Topology, order: tuple[int, ...], steps: int, step_bytes: float,
           bidirectional: bool, chunks: int, prior: dict[int, tuple[int, ...]], seq_base: int
           ) -> dict[int, tuple[int, ...]]:
    """A one-way ring, or two opposite rings carrying half the bytes each."""
    if not bidirectional:
        return _ring(plan, topology, order, steps, step_bytes, +1, chunks, prior, seq_base)
    a = _ring(plan, topology, order, steps, step_bytes / 2, +1, chunks, prior, seq_base)
    b = _ring(plan, topology, order, steps, step_bytes / 2, -1, chunks, prior, seq_base)
    return {d: a.get(d, ()) + b.get(d, ()) for d in order}


def _ring_steps(kind: CollectiveKind, n: int, payload: float) -> tuple[int, float]:
    """(steps, bytes per step per device) of a bandwidth-optimal 1-D ring: an all-reduce runs its
    reduce-scatter and all-gather passes as one ring of 2(n-1) steps (each step sends 1/n of the
    payload in both passes), chunks flowing on without a barrier between the passes."""
    phases = ring_phases(kind, (n,), (0,), payload)
    if not phases:
        raise ValueError(kind)
    return sum(p.steps for p in phases), phases[0].bytes_per_step


def _nd(plan: TransferPlan, topology: Topology, kind: CollectiveKind, order: tuple[int, ...], layout: NDLayout,
        payload: float, bidirectional: bool, chunks: int, reorder: bool) -> None:
    """Phased per-dimension rings of an N-D strategy (see the module docstring)."""
    sizes = layout.dim_sizes
    colors = layout.dim_orders
    strides = [math.prod(sizes[k + 1 :]) for k in range(len(sizes))]
    listed_pos = {d: i for i, d in enumerate(order)}
    order = _physical_grid(topology, order, sizes) or order

    def lines(dim: int) -> list[tuple[int, ...]]:
        out = []
        others = [range(n) if k != dim else range(1) for k, n in enumerate(sizes)]
        for base in itertools.product(*others):
            start = sum(b * st for b, st in zip(base, strides, strict=True))
            line = tuple(order[start + k * strides[dim]] for k in range(sizes[dim]))
            if reorder:
                line = best_ring_order(topology, line, bidirectional)
            else:
                line = tuple(sorted(line, key=listed_pos.__getitem__))
            out.append(line)
        return out

    line_cache = {d: lines(d) for d in range(len(sizes))}
    for dims in colors:
        # a standalone all-gather walks the colour's printed order; an all-reduce gathers in reverse
        scatter_order = tuple(reversed(dims)) if kind is CollectiveKind.ALL_GATHER else dims
        prior: dict[int, tuple[int, ...]] = {}
        seq_base = 0
        for phase in ring_phases(kind, sizes, scatter_order, payload / len(colors)):
            nxt: dict[int, tuple[int, ...]] = {}
            for line in line_cache[phase.dim]:
                nxt.update(_rings(plan, topology, line, phase.steps, phase.bytes_per_step, bidirectional, chunks,
                                  prior, seq_base))
            prior = nxt
            seq_base += phase.steps * chunks


def _physical_grid(topology: Topology, group: tuple[int, ...], sizes: tuple[int, ...]) -> tuple[int, ...] | None:
    """The group laid row-major on the strategy grid by *physical* coordinates (strategy dim k on
    the k-th physical axis of that extent), or None when its chips do not fill such a box."""
    chips = {topology.positions[d].chip: d for d in group}
    if len(chips) != len(group):
        return None
    coords = list(chips)
    lows = [min(c[a] for c in coords) for a in range(len(coords[0]))]
    extents = [max(c[a] for c in coords) - lows[a] + 1 for a in range(len(coords[0]))]
    varying = [a for a, e in enumerate(extents) if e > 1]
    used: list[int] = []
    for n in sizes:
        axis = next((a for a in varying if a not in used and extents[a] == n), None)
        if axis is None:
            return None
        used.append(axis)
    if len(used) != len(varying) or math.prod(sizes) != len(group):
        return None
    out = []
    for idx in itertools.product(*(range(n) for n in sizes)):
        c = list(lows)
        for axis, i in zip(used, idx, strict=True):
            c[axis] = lows[axis] + i
        d = chips.get(tuple(c))
        if d is None:
            return None
        out.append(d)
    return tuple(out)


def build_plan(collective: Collective, logical_to_device: list[int], topology: Topology, *,
               ring_order: RingOrder, chunks: int, direction: RingDirection | None,
               default_direction: RingDirection) -> TransferPlan:
    """All transfers of one run of `collective`, all groups at once, on physical devices.

    `direction` forces the ring direction; None reads it from the config, else `default_direction`.
    """
    plan = TransferPlan()
    kind = collective.kind
    payload = float(collective.payload_bytes or collective.operand_bytes)
    members: list[int] = []
    if kind is CollectiveKind.COLLECTIVE_PERMUTE:
        for s, t in collective.source_target_pairs:
            src, dst = logical_to_device[s], logical_to_device[t]
            members += [src, dst]
            plan.add(topology, src, dst, payload, plan.new_sender(), 0, ())
        plan.description = f"permute x{len(collective.source_target_pairs)}"
        return plan.finish(tuple(dict.fromkeys(members)))
    bidi = resolve_direction(direction, collective.algorithm, default_direction) is RingDirection.BIDIRECTIONAL
    reorder = ring_order.reorders(collective.algorithm)
    desc = []
    # HLO's empty replica_groups={} means one group of every device
    groups = collective.groups or (tuple(range(len(logical_to_device))),)
    for group in groups:
        devs = tuple(logical_to_device[g] for g in group)
        members += devs
        n = len(devs)
        if n < 2:
            continue
        if kind is CollectiveKind.ALL_TO_ALL:
            for a in devs:
                for b in devs:
                    if a != b:
                        plan.add(topology, a, b, all_to_all_chunk(n, payload), plan.new_sender(), 0, ())
            desc.append("pairwise")
            continue
        layout = nd_layout(collective.algorithm, n)
        if layout is not None:
            _nd(plan, topology, kind, devs, layout, payload, bidi, chunks, reorder)
            desc.append(f"nd{layout.dim_sizes}")
            continue
        order = best_ring_order(topology, devs, bidi) if reorder else devs
        steps, step_bytes = _ring_steps(kind, n, payload)
        _rings(plan, topology, order, steps, step_bytes, bidi, chunks, {}, 0)
        desc.append("ring")
    plan.description = f"{'bidirectional' if bidi else 'unidirectional'} {sorted(set(desc))}"
    return plan.finish(tuple(dict.fromkeys(members)))
