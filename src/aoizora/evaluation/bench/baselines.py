"""The baselines aoizora is measured against.

* expert: the deployments the workload documents for the slice's generation
  (`StrategySpace.expert_deployments`; for Wan, MaxDiffusion's, `aoizora.models.wan.kernels.experts`), each
  on JAX's default placement, the first of them the primary one;
* logical search: an Alpa-style search over the same logical space. Every strategy Stage 1 lowered
  and found to fit is costed by an alpha-beta model per mesh axis that knows nothing of the
  topology (every axis is a uniform channel: `alpha` per algorithm step, `beta` bytes/s per
  device), plus roofline compute, with no overlap (Alpa's intra-operator cost adds communication
  to compute); the cheapest is laid out with `jax-default`.
"""

from __future__ import annotations

from dataclasses import dataclass

from aoizora.stage1 import Stage1Result
from aoizora.stage1.q1 import op_seconds
from aoizora.topology import Topology


@dataclass(frozen=True)
class AlphaBeta:
    """Per-axis channel: seconds per algorithm step and bytes per second into a device."""

    alpha_s: float
    beta_Bps: float

    @classmethod
    def for_topology(cls, topology: Topology) -> AlphaBeta:
        """One ICI link per axis: what a topology-blind model assumes of every mesh axis."""
        hw = topology.hardware
        return cls(alpha_s=hw.hop_latency_s, beta_Bps=hw.link_bandwidth_Bps)


@dataclass(frozen=True)
class LogicalChoice:
    key: str
    seconds: float  # the alpha-beta model's step time
    compute_seconds: float
    comm_seconds: float
    ranking: tuple[tuple[str, float], ...]  # every costed strategy, cheapest first


def logical_search(stage1: Stage1Result, topology: Topology, channel: AlphaBeta | None = None) -> LogicalChoice:
    """The strategy an alpha-beta search without topology picks among Stage 1's fitting strategies.

    Needs Stage 1 run with `keep_predictions=True` (the per-collective volumes).
    """
    channel = channel or AlphaBeta.for_topology(topology)
    costed = []
    for e in stage1.ranked:
        if e.prediction is None:
            raise ValueError("logical_search needs run_stage1(..., keep_predictions=True)")
        compute = sum(op_seconds(n, topology) * n.multiplicity for n in e.prediction.ops)
        comm = sum((c.steps * channel.alpha_s + c.recv_bytes / channel.beta_Bps) * c.multiplicity
                   for c in e.prediction.comms if c.group_size > 1)
        costed.append((compute + comm, compute, comm, e.rank or 0, e.key))
    if not costed:
        raise ValueError("no strategy fits: nothing to search")
    costed.sort()
    total, compute, comm, _, key = costed[0]
    return LogicalChoice(key, total, compute, comm, tuple((k, t) for t, _, _, _, k in costed))
