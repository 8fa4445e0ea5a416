"""Reference simulator: event-driven, flow-level execution of one program on one placement.

Independent of the cost model Q2 so that Q2 can be validated against it: the two share their
inputs and a few definitions, and model the execution each its own way. Entry points:
`simulate` and `simulate_placements`. See `aoizora.sim.engine` for the execution model, `aoizora.sim.algorithms` for how
compiled collectives become transfer DAGs, `aoizora.sim.network` for max-min fair link sharing.

Shared with Q2 (one implementation, used by both):

* the parsed program (`aoizora.hlo.Program`): schedule order, dependencies, loops and trip
  counts, collectives with their groups, pairs, sizes and start/done nodes;
* the compiler's algorithm choice as parsed with it (`aoizora.hlo.AlgorithmConfig`: ring
  direction, N-D grid and per-colour dimension orders, reordering map) and the switches over it
  (`aoizora.hlo.RingOrder`, `aoizora.hlo.RingDirection`);
* the traffic function (`aoizora.hlo.traffic`): the bandwidth-optimal bytes of every ring phase
  and all-to-all exchange;
* the compute time of a node (`Node.compute_seconds`: supplied seconds, else compiler cycles at
  the clock, else `HardwareProfile.roofline_seconds`);
* the slice (`aoizora.topology.Topology`: chips, directed ICI and die-to-die links,
  dimension-order routes, link time weights), the hardware profile's figures (link bandwidths,
  per-hop latency, the fixed launch cost of a collective) and the placement.

Modelled here on its own:

* scheduling: every device walks the program on its own in-order compute stream; sync and async
  collectives block at their issue or ``-done`` node; loops are walked iteration by iteration
  (or skipped once provably periodic), where Q2 walks a body once and scales it;
* collective algorithms: every ring step or exchange as chunked point-to-point transfers with
  store-and-forward prerequisites per chunk, N-D strategies as phases whose lines wait for the
  previous phase, and its own best ring order (`best_ring_order`: bottleneck link, longest hop,
  total hops);
* contention: concurrent flows share every directed link max-min fairly at its own bandwidth,
  re-solved whenever a flow starts or ends, where Q2 times a collective by its busiest link and
  lets collectives in flight at once carry their bytes over shared links in turn;
* link-level timing: a transfer is one cut-through flow over its route, delivered hops x hop
  latency after its last byte; a collective run starts ``collective_launch_s`` after a device
  issues it;
* where it reads the shared config otherwise than Q2: libtpu's ``StrategyND`` runs in phases on
  its grid (Q2 costs it as one ring), a standalone N-D all-gather walks each colour's printed
  dimension order (Q2 the reverse), and a config that names no direction gets
  `default_direction` (Q2: bidirectional).

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
from aoizora.sim.engine import OpaqueSeconds, Simulator
from aoizora.sim.result import SimResult
from aoizora.topology import Topology


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
