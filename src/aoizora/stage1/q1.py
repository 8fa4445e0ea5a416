"""Q1: a step-latency bound that holds for every placement of the logical mesh on the slice.

Why a bound: Stage 1 must not lose the best strategy (high recall) before Stage 2 has seen any
placement. Q1 charges each strategy only what no placement can avoid:

* compute: every op at the roofline, `max(flops / peak, unavoidable HBM bytes / HBM bandwidth)`
  (unavoidable = operands and result of a contraction, the input of a reduction, the I/O of
  opaque kernels; elementwise and layout ops may be fused away), or the seconds an
  opaque-kernel cost hook supplies;
* communication: each collective's bytes received per device over the most bandwidth any
  placement could give its groups. The best embedding of a group of N chips on a 2-D/3-D slice
  is a ring of neighbour links (a Hamiltonian cycle of a sub-block, or a wrapped axis), run in
  both directions: 2 links into each chip for N > 2, 1 link for N = 2, never more than the
  chip's ports; a group that fits on one chip (several cores per chip) moves its bytes over the
  cores' die-to-die link (TPU7x), or costs nothing where the cores share memory (v4). Plus one
  hop of latency per algorithm step across chips. A collective permute is not a ring collective:
  each device receives its block from one source (StableHLO allows one source per target), along
  one dimension-order route, so on chips of one core it gets one link's bandwidth wherever the
  group is placed (on chips of several cores a placement may put each source on its target's
  chip, and the group's bound stands).

How they combine is a switch, `overlap`:
* `"async"` (default): collectives that move parameters (all-gathers of FSDP weights and
  slices of them: nothing computed precedes them, so the scheduler can issue them early) overlap
  all compute; all-gathers and collective-permutes of activations overlap the compute that is
  independent of them (neither feeds them nor needs their result) in the same loop iteration,
  each op's time hiding at most one collective, nearest ops first; all-reduces, reduce-scatters
  and all-to-alls add: `max(compute, prefetchable) + exposed async + other communication`.
  Evidence on libtpu 0.0.42.1 (docs/notebook/q1-and-recall.md, "Q1 with asynchronous all-gathers"):
  compiled Wan programs run activation all-gathers as async collective fusions and permutes as
  start/done pairs around independent fusions, while every all-reduce and all-to-all is a
  synchronous instruction.
* `"prefetch"`: as `"async"`, but every collective on activations adds (what Q1 did before).
* `"none"`: compute + all communication (no overlap at all).
* `"full"`: max(compute, communication), a bound even if every collective were hidden
  (collective matmul), at the price of ranking power: it hides communication whenever compute
  is larger. See docs/notebook/q1-and-recall.md for the recall of each. The tests check Q1 <= Q2 for
  every placement on compiled programs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from aoizora.stage1.dag import CommNode, OpNode, Prediction
from aoizora.topology import Topology

Overlap = Literal["async", "prefetch", "none", "full"]

# libtpu issues these asynchronously (async collective fusions, start/done pairs); the others are
# single synchronous instructions in compiled programs
ASYNC_KINDS = frozenset({"all-gather", "collective-permute"})


@dataclass(frozen=True)
class Q1Result:
    seconds: float  # the bound
    compute_seconds: float
    comm_seconds: float
    prefetch_seconds: float = 0.0  # the part of comm_seconds that moves parameters
    comm_seconds_by_axes: dict[tuple[str, ...], float] = field(default_factory=dict)

    @property
    def serial_seconds(self) -> float:
        """compute + communication (breaks ties between equal bounds under `overlap="full"`)."""
        return self.compute_seconds + self.comm_seconds

    def to_json(self) -> dict:
        return {
            "seconds": self.seconds,
            "compute_seconds": self.compute_seconds,
            "comm_seconds": self.comm_seconds,
            "prefetch_seconds": self.prefetch_seconds,
            "comm_seconds_by_axes": {"+".join(k) or "-": v for k, v in self.comm_seconds_by_axes.items()},
        }

    @classmethod
    def from_json(cls, d: dict) -> Q1Result:
        """The result `to_json` wrote (mesh axis names never contain "+")."""
        by_axes = {(() if k == "-" else tuple(k.split("+"))): float(v) for k, v in d["comm_seconds_by_axes"].items()}
        return cls(float(d["seconds"]), float(d["compute_seconds"]), float(d["comm_seconds"]),
                   float(d["prefetch_seconds"]), by_axes)


def fits_one_chip(topology: Topology, group_size: int) -> bool:
    """Whether a group of `group_size` devices can be placed on one chip's cores (no ICI hop)."""
    return group_size <= topology.cores_per_chip


def best_group_bandwidth(topology: Topology, group_size: int) -> float:
    """Bytes/s into one device of a group of `group_size` devices under the best placement."""
    hw = topology.hardware
    if group_size < 2:
        return math.inf
    if fits_one_chip(topology, group_size):  # its cores' die-to-die link, if the chip has one
        return hw.d2d_bandwidth_Bps or math.inf
    links = 1 if math.ceil(group_size / topology.cores_per_chip) == 2 else 2
    return min(links, hw.ici_ports_per_chip) * hw.link_bandwidth_Bps


def comm_seconds(node: CommNode, topology: Topology) -> float:
    """Lower bound on one execution of a collective on any placement."""
    bw = best_group_bandwidth(topology, node.group_size)
    if node.kind == "collective-permute" and topology.cores_per_chip == 1:
        bw = min(bw, topology.hardware.link_bandwidth_Bps)
    if math.isinf(bw):
        return 0.0
    if fits_one_chip(topology, node.group_size):
        return node.recv_bytes / bw
    return node.recv_bytes / bw + node.steps * topology.hardware.hop_latency_s


def op_seconds(node: OpNode, topology: Topology) -> float:
    hw = topology.hardware
    if node.seconds is not None:
        return node.seconds
    return hw.roofline_seconds(node.flops, node.min_hbm_bytes, node.kernel)


def q1(prediction: Prediction, topology: Topology, overlap: Overlap = "async") -> Q1Result:
    """Q1 of a prediction on a slice (see the module docstring)."""
    op_time = {n.index: op_seconds(n, topology) for n in prediction.ops}
    compute = sum(t * prediction.nodes[i].multiplicity for i, t in op_time.items())
    by_axes: dict[tuple[str, ...], float] = {}
    prefetch = 0.0
    exposed = 0.0
    hidden_by = _Overlap(prediction, op_time) if overlap == "async" else None
    for c in prediction.comms:
        alone = comm_seconds(c, topology)
        t = alone * c.multiplicity
        by_axes[c.axes] = by_axes.get(c.axes, 0.0) + t
        if c.prefetchable:
            prefetch += t
        elif hidden_by is not None and c.kind in ASYNC_KINDS:
            exposed += hidden_by.exposed(c, alone) * c.multiplicity
        else:
            exposed += t
    comm = sum(by_axes.values())
    if overlap == "full":
        total = max(compute, comm)
    elif overlap in ("prefetch", "async"):
        total = max(compute, prefetch) + exposed
    else:
        total = compute + comm
    return Q1Result(total, compute, comm, prefetch, by_axes)


class _Overlap:
    """Compute that an asynchronous collective can hide behind: ops of the same loop iteration
    (same multiplicity) that are neither its ancestors nor its descendants. An implicit
    collective (resharding a value) has no consumers of its own in the DAG, so everything
    downstream of the value it reshards counts as dependent. Each op's time is used once."""

    def __init__(self, prediction: Prediction, op_time: dict[int, float]):
        nodes = prediction.nodes
        self.ancestors = [0] * len(nodes)  # bitsets over node indices
        for n in nodes:
            a = 0
            for d in n.deps:
                a |= self.ancestors[d] | (1 << d)
            self.ancestors[n.index] = a
        self.descendants = [0] * len(nodes)
        for n in reversed(nodes):
            for d in n.deps:
                self.descendants[d] |= self.descendants[n.index] | (1 << n.index)
        self.left = dict(op_time)  # compute time not yet used to hide a collective
        by_mult: dict[int, list[int]] = {}
        for i in op_time:
            by_mult.setdefault(nodes[i].multiplicity, []).append(i)
        self.by_mult = by_mult

    def exposed(self, c: CommNode, seconds: float) -> float:
        """The part of one execution of `c` (`seconds` alone) that independent compute cannot hide."""
        dependent = self.ancestors[c.index] | self.descendants[c.index]
        for d in c.deps:
            dependent |= self.descendants[d]
        candidates = [i for i in self.by_mult.get(c.multiplicity, ()) if not (dependent >> i) & 1 and self.left[i] > 0]
        need = seconds
        for i in sorted(candidates, key=lambda i: abs(i - c.index)):
            take = min(need, self.left[i])
            self.left[i] -= take
            need -= take
            if need <= 0:
                return 0.0
        return need
