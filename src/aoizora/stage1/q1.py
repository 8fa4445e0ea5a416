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
* `"none"` (default): compute + communication. A bound as long as the compiler does not hide
  collectives behind compute. Evidence on libtpu 0.0.42.1: the collectives the partitioner
  inserts in the programs tested here are synchronous (sync all-reduce / all-gather /
  all-to-all), and Q2 (`aoizora.cost`) serialises them with compute; the tests check
  Q1 <= Q2 for every placement on compiled programs. It ranks far better than the max: on the
  v5e:2x4 recall check (benchmarks/RESULTS.md) Q2's best strategy is Q1's rank 1 with it and
  rank 9 with the max, because the max hides communication whenever compute is larger.
* `"full"`: max(compute, communication), a bound even if every collective were overlapped
  (collective matmul, async collectives), at the price of ranking power.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from aoizora.stage1.dag import CommNode, OpNode, Prediction
from aoizora.topology import Topology

Overlap = Literal["full", "none"]


@dataclass(frozen=True)
class Q1Result:
    seconds: float  # the bound
    compute_seconds: float
    comm_seconds: float
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


def q1(prediction: Prediction, topology: Topology, overlap: Overlap = "none") -> Q1Result:
    """Q1 of a prediction on a slice (see the module docstring)."""
    compute = sum(op_seconds(n, topology) * n.multiplicity for n in prediction.ops)
    by_axes: dict[tuple[str, ...], float] = {}
    for c in prediction.comms:
        by_axes[c.axes] = by_axes.get(c.axes, 0.0) + comm_seconds(c, topology) * c.multiplicity
    comm = sum(by_axes.values())
    total = max(compute, comm) if overlap == "full" else compute + comm
    return Q1Result(total, compute, comm, by_axes)
