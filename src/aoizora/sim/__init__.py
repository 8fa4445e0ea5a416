"""Reference simulator: event-driven, flow-level execution of one program on one placement.

Independent of the cost model Q2 so that Q2 can be validated against it. Shared with Q2: the
topology (links, routes), the program graph, the compute model (compiler cycles, else the
roofline) and the hardware profile's figures (link bandwidth, per-hop latency, the fixed launch
cost of a collective). Modelled here on its own: how collectives move data (transfer DAGs, chunk
pipelining, store and forward), how flows share links (max-min), how hop latency and launch cost
combine with transfers in time, and the schedule. Entry point: `simulate`. See
`aoizora.sim.engine` for the execution model, `aoizora.sim.algorithms` for how compiled
algorithm configs become transfer DAGs, `aoizora.sim.network` for max-min fair link sharing.

What it models: a fixed launch cost per collective run and device (``collective_launch_s``: its
transfers start that long after the device issued it); every ring step / exchange as chunked
point-to-point transfers over dimension-order routes (die-to-die links between the two cores of
a TPU7x chip included); store-and-forward per chunk; max-min fair sharing of every directed link
at its own bandwidth, re-solved whenever a flow starts or ends; hops x hop latency per transfer;
all groups of a collective at once; per-device in-order compute; async start/done overlap; loops
walked per iteration (or skipped once provably periodic).

What it leaves out, on purpose or for now: HBM contention between compute and DMA; the compute
of reductions inside reduce-scatter / all-reduce steps; compute fused into collective fusions
(a collective node costs only its network time); injection limits per chip other than its
links; congestion control and packetisation; the exact chunk sizes of libtpu's emitters
(``chunks`` is a parameter). ``ring_order="best"`` optimises each group on its own, not the
groups of a collective jointly.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from aoizora.hlo.algorithm import RingDirection, RingOrder
from aoizora.hlo.program import Program
from aoizora.placement import Placement
from aoizora.sim.algorithms import best_ring_order, ring_direction
from aoizora.sim.engine import OpaqueSeconds, Simulator
from aoizora.sim.network import FlowNetwork, max_min_rates
from aoizora.sim.result import CollectiveTiming, SimResult
from aoizora.topology import Topology

__all__ = [
    "CollectiveTiming",
    "FlowNetwork",
    "SimResult",
    "best_ring_order",
    "max_min_rates",
    "ring_direction",
    "simulate",
    "simulate_placements",
]


def simulate(program: Program, topology: Topology, placement: Placement, *,
             ring_order: RingOrder | str = RingOrder.LISTED, opaque_seconds: OpaqueSeconds = None,
             chunks: int = 4, ring_direction: RingDirection | str | None = "auto",
             default_direction: RingDirection | str = RingDirection.BIDIRECTIONAL,
             extrapolate_loops: bool = True, default_trip_count: int | None = None) -> SimResult:
    """Simulate one execution of `program` with logical device i on `placement.device_ids.flat[i]`.

    ring_order: ``"listed"`` rings follow each group's listed order; ``"best"`` reorders each
        group's members to minimise its bottleneck link load (the compiler *may* reorder; the
        evidence is open, hence a switch); ``"reordering-map"`` reorders only collectives whose
        algorithm config says ``has_reordering_map: true``.
    opaque_seconds: seconds of opaque/unknown nodes, by node name (mapping) or a callable taking
        the `Node` (None = use the node's own cost).
    chunks: pieces each ring step's payload is split into and pipelined.
    ring_direction: ``"auto"`` or None (from the compiled algorithm config, see `ring_direction`),
        or force ``"unidirectional"`` / ``"bidirectional"``.
    The ring switches take the `RingOrder` / `RingDirection` enums Q2 shares, or their values.
    default_direction: what ``"auto"`` uses when the config names no direction.
    extrapolate_loops: skip loop iterations once provably periodic (exact up to float rounding).
    default_trip_count: trip count for loops whose count the parser could not tell.
    Raises `aoizora.errors.SimulationError` on inputs that do not fit together.
    """
    sim = Simulator(program, topology, placement, ring_order=ring_order, opaque_seconds=opaque_seconds,
                    chunks=chunks, ring_direction=ring_direction, default_direction=default_direction,
                    extrapolate_loops=extrapolate_loops, default_trip_count=default_trip_count)
    sim.run()
    forced = sim.ring_direction.value if sim.ring_direction is not None else "auto"
    return sim.result({"ring_order": sim.ring_order.value, "chunks": chunks, "ring_direction": forced,
                       "default_direction": sim.default_direction.value, "extrapolate_loops": extrapolate_loops})


def simulate_placements(program: Program, topology: Topology, placements: Iterable[Placement],
                        **options: Any) -> list[tuple[Placement, SimResult]]:
    """`simulate` on each placement; (placement, result) pairs, fastest first (ties: input order)."""
    runs = [(p, simulate(program, topology, p, **options)) for p in placements]
    return sorted(runs, key=lambda pr: pr[1].step_seconds)
