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
  chip's ports; groups that fit on one chip (several cores per chip) cost nothing. Plus one hop
  of latency per algorithm step.

How they combine is a switch, `overlap`:
* `"prefetch"` (default): collectives that move parameters (all-gathers of FSDP weights and
  slices of them: nothing computed precedes them, so the scheduler can issue them early and
  hide them) overlap compute; every other collective waits for the compute that produced its
  input and adds to it: `max(compute, prefetchable) + other communication`. Evidence on
  libtpu 0.0.42.1: the collectives the partitioner inserts on activations in the programs
  tested here are synchronous, and Q2 (`aoizora.cost`) serialises them with compute; the
  tests check Q1 <= Q2 for every placement on compiled programs.
* `"none"`: compute + all communication (no overlap at all).
* `"full"`: max(compute, communication), a bound even if every collective were hidden
  (collective matmul, async collectives), at the price of ranking power: it hides
  communication whenever compute is larger. See benchmarks/RESULTS.md for the recall of each.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from aoizora.stage1.dag import CommNode, OpNode, Prediction
from aoizora.topology import Topology

Overlap = Literal["prefetch", "none", "full"]


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


def best_group_bandwidth(topology: Topology, group_size: int) -> float:
    """Bytes/s into one device of a group of `group_size` devices under the best placement."""
    chips = math.ceil(group_size / topology.cores_per_chip)
    if group_size < 2 or chips < 2:
        return math.inf
    hw = topology.hardware
    links = 1 if chips == 2 else 2
    return min(links, hw.ici_ports_per_chip) * hw.link_bandwidth_Bps


def comm_seconds(node: CommNode, topology: Topology) -> float:
    """Lower bound on one execution of a collective on any placement."""
    bw = best_group_bandwidth(topology, node.group_size)
    if math.isinf(bw):
        return 0.0
    return node.recv_bytes / bw + node.steps * topology.hardware.hop_latency_s


def op_seconds(node: OpNode, topology: Topology) -> float:
    hw = topology.hardware
    if node.seconds is not None:
        return node.seconds
    return max(node.flops / hw.peak_bf16_flops, node.min_hbm_bytes / hw.hbm_bandwidth_Bps)


def q1(prediction: Prediction, topology: Topology, overlap: Overlap = "prefetch") -> Q1Result:
    """Q1 of a prediction on a slice (see the module docstring)."""
    compute = sum(op_seconds(n, topology) * n.multiplicity for n in prediction.ops)
    by_axes: dict[tuple[str, ...], float] = {}
    prefetch = 0.0
    for c in prediction.comms:
        t = comm_seconds(c, topology) * c.multiplicity
        by_axes[c.axes] = by_axes.get(c.axes, 0.0) + t
        if c.prefetchable:
            prefetch += t
    comm = sum(by_axes.values())
    if overlap == "full":
        total = max(compute, comm)
    elif overlap == "prefetch":
        total = max(compute, prefetch) + (comm - prefetch)
    else:
        total = compute + comm
    return Q1Result(total, compute, comm, prefetch, by_axes)
