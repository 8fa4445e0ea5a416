"""Q2: the topology-aware, contention-aware latency of one compiled program on one placement.

Collective time = launch cost
                  + max over directed links of (bytes on the link / the link's bandwidth)
                  + (hops on the longest path one chunk travels) x per-hop latency,
phase by phase (an N-D strategy runs one ring pass per grid dimension), where the launch cost is
the fixed time every collective takes however small (`collective_launch_s` of the hardware
profile), a ring forwards each chunk as soon as it has arrived (see `traffic.ring_chain_hops`),
and every group of the collective runs at once and loads the same links (contention), and
collectives in flight at the same time carry their bytes over shared links in turn. Compute
time comes from the compiler's `estimated_cycles` / clock, else the roofline, and opaque kernels
from the cost the workload supplies. The schedule walks the program's DAG once per loop body and
scales the body by its trip count; an async collective overlaps the compute issued between its
start and its done, a sync one blocks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aoizora.cost.algorithms import Q2Options, ring_dim_orders, ring_dims, ring_is_bidirectional
from aoizora.cost.links import Incidence, incidence
from aoizora.cost.traffic import RingOrderer, collective_phases
from aoizora.errors import PlacementError
from aoizora.hlo.algorithm import RingOrder
from aoizora.hlo.program import Collective, Loop, Node, NodeKind, Program
from aoizora.placement import Placement
from aoizora.topology import Topology


@dataclass(frozen=True)
class CollectiveEstimate:
    index: int
    name: str
    kind: str
    seconds: float  # one execution
    bottleneck_bytes: float  # bytes on the bottleneck link (the link that takes longest)
    bottleneck_link: int | None
    steps: int
    max_hops: int
    multiplicity: int
    bidirectional: bool
    reordered: bool
    latency_seconds: float = 0.0  # the fixed part of `seconds`: launch cost and hop latencies

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class Q2Result:
    """Predicted latency of one program execution on one placement, with its breakdown."""

    step_seconds: float
    compute_seconds: float
    exposed_comm_seconds: float
    collectives: list[CollectiveEstimate]
    link_bytes: np.ndarray  # bytes per directed link (topology.links order) per program execution
    uncosted: list[str] = field(default_factory=list)  # opaque/unknown ops no hook costed
    timeline: list[dict[str, Any]] | None = None  # schedule segments, when asked for

    @property
    def comm_seconds(self) -> float:
        return sum(c.seconds * c.multiplicity for c in self.collectives)

    def to_json(self) -> dict[str, Any]:
        return {
            "step_seconds": self.step_seconds,
            "compute_seconds": self.compute_seconds,
            "exposed_comm_seconds": self.exposed_comm_seconds,
            "comm_seconds": self.comm_seconds,
            "collectives": [c.to_json() for c in self.collectives],
            "link_bytes": self.link_bytes.tolist(),
            "uncosted": list(self.uncosted),
            "timeline": self.timeline,
        }


def node_seconds(node: Node, topology: Topology) -> float | None:
    """Compute time of one node (`Node.compute_seconds`); None for an opaque or unknown op that
    nothing costs (no supplied seconds, no compiler cycles, no FLOPs or bytes)."""
    uncosted = node.seconds is None and node.estimated_cycles is None and not node.flops and not node.hbm_bytes
    if uncosted and node.kind in (NodeKind.OPAQUE, NodeKind.UNKNOWN):
        return None
    return node.compute_seconds(topology.hardware)


def placement_rows(program: Program, topology: Topology, placement: Placement, inc: Incidence) -> np.ndarray:
    """Incidence row of each logical device id of the program under the placement."""
    flat = placement.device_ids.ravel()
    if program.num_devices != flat.size:
        raise PlacementError(
            f"the program was compiled for {program.num_devices} devices but placement {placement.name!r} "
            f"has {flat.size}; use a placement of the program's mesh"
        )
    placement.check(topology)
    return np.array([inc.row[int(d)] for d in flat])


class _LinkQueue:
    """When collectives in flight at once share directed links, the links carry their bytes in turn.

    Each directed link is free from `free[link]` on; a collective started at `t` cannot finish
    before every link it uses has carried what was queued on it plus its own bytes (then its hop
    latencies), nor before its time alone (phases one after another). Concurrent collectives on disjoint links
    do not slow each other. This is the work-conserving view of shared links; the simulator's
    max-min sharing ends the last of two equal collectives at the same time.
    """

    def __init__(self, loads: list[np.ndarray], latencies: list[float], bandwidth_Bps: np.ndarray):
        self.loads = loads
        self.latencies = latencies
        self.bandwidth = bandwidth_Bps  # per directed link
        self.free = np.zeros(loads[0].size if loads else 0)

    def run(self, collective: int | None, start: float, alone_seconds: float) -> float:
        """Completion time of `collective` started at `start`; its bytes are queued on its links."""
        if collective is None or not self.free.size:
            return start + alone_seconds
        loads = self.loads[collective]
        used = loads > 0
        if not used.any():
            return start + alone_seconds
        cleared = np.maximum(self.free[used], start) + loads[used] / self.bandwidth[used]
        self.free[used] = cleared
        return max(start + alone_seconds, float(cleared.max()) + self.latencies[collective])

    def finish(self, collective: int | None, recorded: float) -> float:
        """Completion time of an asynchronous `collective` at its done node, given what `run`
        returned at its start: unchanged, since collectives started later queue behind it."""
        return recorded

    def shift(self, after: float, by: float) -> None:
        """A loop's remaining iterations were added at `after`: later reservations move with them."""
        self.free = np.where(self.free > after, self.free + by, self.free)


class CostModel:
    """Q2 for one slice. Reuse one instance across placements: routes and ring searches are cached.

    `link_sharing` is how concurrent collectives share directed links (the class built per
    evaluation, with `run`, `finish` and `shift`); a subclass may name another discipline."""

    link_sharing: type = _LinkQueue

    def __init__(self, topology: Topology, options: Q2Options | None = None):
        self.topology = topology
        self.options = options or Q2Options()
        self.inc = incidence(topology)
        positions = np.zeros((self.inc.num_devices, len(topology.shape) + 1), dtype=np.int64)
        for dev, row in self.inc.row.items():
            pos = topology.positions[dev]
            positions[row] = (*pos.chip, pos.core)
        self.orderer = RingOrderer(self.inc, positions)

    def collective_estimate(self, coll: Collective, rows: np.ndarray,
                            ring_order: RingOrder | None = None) -> tuple[CollectiveEstimate, np.ndarray]:
        """One collective's time and link loads on the devices at `rows`; `ring_order` overrides
        the model's ring-order switch for this estimate."""
        bidirectional = ring_is_bidirectional(coll.algorithm, self.options)
        reordered = (ring_order or self.options.order).reorders(coll.algorithm)
        groups = [tuple(int(rows[d]) for d in g) for g in coll.groups]
        pairs = [(int(rows[a]), int(rows[b])) for a, b in coll.source_target_pairs]
        dims = ring_dims(coll.algorithm, coll.group_size)
        phases = collective_phases(
            coll, groups, pairs, self.inc, bidirectional=bidirectional,
            reorder=self.orderer if reordered else None, dims=dims,
            positions=self.orderer.positions, dim_orders=ring_dim_orders(coll.algorithm, len(dims)),
        )
        hw = self.topology.hardware
        loads = np.zeros(len(self.topology.links))
        seconds, peak, top, steps, max_hops, latency = 0.0, 0.0, None, 0, 0, 0.0
        slowest = 0.0
        for phase in phases:
            phase_loads = self.inc.link_loads(phase.matrix)
            loads += phase_loads
            link_seconds = self.inc.link_seconds(phase_loads)
            phase_top = int(np.argmax(link_seconds)) if link_seconds.size else 0
            phase_transfer = float(link_seconds[phase_top]) if link_seconds.size else 0.0
            phase_latency = phase.chain_hops * hw.hop_latency_s
            latency += phase_latency
            seconds += phase_transfer + phase_latency
            if phase_transfer > slowest:
                slowest, peak, top = phase_transfer, float(phase_loads[phase_top]), phase_top
            steps += phase.steps
            max_hops = max(max_hops, phase.max_hops)
        if phases:  # a collective that moves nothing is not launched
            seconds += hw.collective_launch_s
            latency += hw.collective_launch_s
        est = CollectiveEstimate(
            coll.index, coll.name, coll.kind.value, seconds, peak, top, steps, max_hops,
            coll.multiplicity, bidirectional, reordered, latency,
        )
        return est, loads

    def order_sensitive_collectives(self, program: Program, placement: Placement) -> list[int]:
        """Indices of the collectives whose Q2 cost on `placement` (time and link loads) differs
        between a ring in the replica group's listed order and a ring in the best order: those for
        which it matters whether the compiler keeps a reordering map. Independent of the ring-order
        switch of this model."""
        rows = placement_rows(program, self.topology, placement, self.inc)
        sensitive = []
        for coll in program.collectives:
            listed, loads_listed = self.collective_estimate(coll, rows, RingOrder.LISTED)
            best, loads_best = self.collective_estimate(coll, rows, RingOrder.BEST)
            if listed.seconds != best.seconds or not np.array_equal(loads_listed, loads_best):
                sensitive.append(coll.index)
        return sensitive

    def evaluate(self, program: Program, placement: Placement, *, timeline: bool = False) -> Q2Result:
        """Predicted step latency of `program` with its logical devices laid out by `placement`.

        `timeline=True` also records the schedule's segments (for reports; slower)."""
        rows = placement_rows(program, self.topology, placement, self.inc)
        estimates: list[CollectiveEstimate] = []
        per_collective: list[np.ndarray] = []
        link_bytes = np.zeros(len(self.topology.links))
        for coll in program.collectives:
            est, loads = self.collective_estimate(coll, rows)
            estimates.append(est)
            per_collective.append(loads)
            link_bytes += loads * coll.multiplicity
        segments: list[dict[str, Any]] | None = [] if timeline else None
        links = self.link_sharing(per_collective, [e.latency_seconds for e in estimates], self.inc.bandwidth)
        step, compute, uncosted = _schedule(program, self.topology, estimates, segments, links)
        return Q2Result(step, compute, max(step - compute, 0.0), estimates, link_bytes, uncosted, segments)


def _schedule(
    program: Program,
    topology: Topology,
    estimates: list[CollectiveEstimate],
    timeline: list[dict[str, Any]] | None = None,
    links: _LinkQueue | None = None,
) -> tuple[float, float, list[str]]:
    """Walk the schedule once; loop bodies are timed once and scaled by their trip counts.

    One compute stream per chip (all chips run the same SPMD program, so one stream stands for
    all). A sync collective occupies the stream; an async one runs beside it from its start node
    and the stream waits at its done node only if it has not finished. When `timeline` is a
    list, it receives the segments of the walk (consecutive compute merged; a loop's remaining
    iterations as one `loop` segment).
    """

    loop_at_end = {lp.end: lp for lp in program.loops}
    loop_start_time: dict[int, float] = {}
    loop_compute: dict[int, float] = {}
    starts = {lp.start: lp.index for lp in program.loops}
    finish = np.zeros(len(program.nodes))
    pending: dict[int, float] = {}  # collective index -> completion time of an async collective
    clock = 0.0
    compute_total = 0.0
    uncosted: list[str] = []
    for node in program.nodes:
        i = node.index
        for lp_index in _loops_starting(starts, i, program):
            loop_start_time[lp_index] = clock
            loop_compute[lp_index] = compute_total
        ready = max((finish[d] for d in node.deps if d < i), default=0.0)
        if node.kind == NodeKind.LOOP:
            lp = loop_at_end.get(i)
            if lp is not None and lp.index in loop_start_time:
                clock, compute_total = _repeat_body(lp, clock, compute_total, loop_start_time[lp.index],
                                                    loop_compute[lp.index], timeline, links)
            finish[i] = clock
        elif node.kind in _COLLECTIVE_NODES:
            est = estimates[node.collective] if node.collective is not None else None
            clock, finish[i] = _collective_step(node, est, clock, ready, pending, timeline, links)
        else:
            seconds = node_seconds(node, topology)
            if seconds is None:
                uncosted.append(node.name)
                seconds = 0.0
            begin = max(clock, ready)
            clock = begin + seconds
            _record(timeline, "compute", node.name, begin, clock)
            compute_total += seconds
            finish[i] = clock
    return clock, compute_total, uncosted


_COLLECTIVE_NODES = (NodeKind.COLLECTIVE, NodeKind.COLLECTIVE_START, NodeKind.COLLECTIVE_DONE)


def _record(timeline: list[dict[str, Any]] | None, kind: str, name: str, start: float, end: float) -> None:
    """Append a segment of the walk to `timeline` (when one is kept), merged with a compute segment it continues."""
    if timeline is None or end <= start:
        return
    last = timeline[-1] if timeline else None
    if kind == "compute" and last is not None and last["kind"] == "compute" and abs(last["end"] - start) < 1e-15:
        last["end"] = end
        return
    timeline.append({"kind": kind, "name": name, "start": start, "end": end})


def _repeat_body(lp: Loop, clock: float, compute_total: float, body_start: float, compute_at_start: float,
                 timeline: list[dict[str, Any]] | None, links: _LinkQueue | None) -> tuple[float, float]:
    """At a loop's end node, its remaining iterations, each as long as the body's walk just timed:
    the stream's clock and compute total after them."""
    trips = lp.trip_count or 1
    body = clock - body_start
    _record(timeline, "loop", f"{lp.name}: {trips - 1} more iterations", clock, clock + body * (trips - 1))
    if links is not None:
        links.shift(clock, body * (trips - 1))
    return clock + body * (trips - 1), compute_total + (compute_total - compute_at_start) * (trips - 1)


def _collective_step(node: Node, est: CollectiveEstimate | None, clock: float, ready: float,
                     pending: dict[int, float], timeline: list[dict[str, Any]] | None,
                     links: _LinkQueue | None) -> tuple[float, float]:
    """A collective node: (the stream's clock after it, the node's finish). A start launches its
    collective beside the stream, a done waits for it, a sync collective occupies the stream."""
    name = est.name if est else node.name
    alone = est.seconds if est else 0.0
    begin = max(clock, ready)
    coll = node.collective
    assert coll is not None, f"collective node {node.name} names no collective (the HLO builder sets it)"
    if node.kind == NodeKind.COLLECTIVE_START:
        pending[coll] = links.run(coll, begin, alone) if links else begin + alone
        _record(timeline, "async", name, begin, pending[coll])
        return clock, begin
    if node.kind == NodeKind.COLLECTIVE_DONE:
        end = pending.pop(coll, 0.0)
        clock = max(begin, links.finish(coll, end) if links else end)
        _record(timeline, "wait", name, begin, clock)
        return clock, clock
    clock = links.run(coll, begin, alone) if links else begin + alone
    _record(timeline, "comm", name, begin, clock)
    return clock, clock


def _loops_starting(starts: dict[int, int], index: int, program: Program) -> list[int]:
    """Loops whose body begins at `index`, outermost first."""
    if index not in starts:
        return []
    found = [lp.index for lp in program.loops if lp.start == index]
    return sorted(found, key=lambda k: program.loops[k].multiplicity)
