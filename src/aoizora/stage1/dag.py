"""The prediction DAG: per-device compute and the communication the partitioner will insert.

A `Prediction` is what Stage 1 knows about one lowered strategy: `OpNode`s (compute, HBM
traffic) and `CommNode`s (collectives written in the program or predicted for the SPMD
partitioner), with the program's argument, output and temporary bytes. `predict`
(`predict.py`) builds it in two parts that share nothing but a stream of value events (`events.py`):

* the sharding propagator (`propagate.py`, rules per op in `op_rules.py`, backward hints in
  `hints.py`) walks the program once, decides every value's sharding and the collectives
  resharding needs, emits the nodes and reports what happens to values;
* the HBM model (`hbm.py`, fusion in `fusion.py`, the heap in `heap.py`; rules listed in
  `memory.py`) turns those events into buffers and packs them as libtpu packs its temp.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aoizora.hlo.program import OpaqueCost
from aoizora.topology import KernelWork
from aoizora.workload import KernelCall

KernelCostHook = Callable[[KernelCall], "OpaqueCost | None"]


@dataclass
class OpNode:
    """One op of the program, costed per device for one execution (scale by `multiplicity`)."""

    index: int
    op: str
    flops: float
    hbm_bytes: float  # operands read + results written, as if unfused
    min_hbm_bytes: float  # bytes no fusion can avoid (contraction operands and result, reduction input, kernel I/O)
    multiplicity: int
    deps: tuple[int, ...]
    opaque: bool = False
    seconds: float | None = None  # from a kernel cost hook that answers in time
    kernel: KernelWork | None = None  # what bounds an opaque kernel besides FLOPs and bytes (OpaqueCost)


@dataclass
class CommNode:
    """A collective: written by the program (`explicit`) or predicted for the partitioner.

    `payload_bytes` follows `aoizora.hlo.program`'s convention per device (all-gather: the shard;
    all-reduce, reduce-scatter, all-to-all: the input); `recv_bytes` is the bandwidth-optimal
    bytes each device must receive.
    """

    index: int
    kind: str
    axes: tuple[str, ...]
    group_size: int
    payload_bytes: float
    recv_bytes: float
    multiplicity: int
    explicit: bool
    reason: str
    deps: tuple[int, ...]
    prefetchable: bool = False  # moves a parameter (or a slice of one): no compute precedes it

    @property
    def steps(self) -> int:
        """Sequential ring steps of the bandwidth-optimal algorithm (latency term)."""
        n = self.group_size
        if n < 2:
            return 0
        return {"all-reduce": 2 * (n - 1), "all-gather": n - 1, "reduce-scatter": n - 1}.get(self.kind, 1)


Node = OpNode | CommNode


@dataclass
class Prediction:
    """What Stage 1 predicts for one lowered strategy (per device, one program execution)."""

    mesh_axes: tuple[tuple[str, int], ...]
    nodes: list[Node]
    argument_bytes: float
    output_bytes: float
    # temporaries as memory_analysis() reports them: libtpu's temp allocation, packed from the
    # walk's buffers as the compiler packs them (`heap.Timeline.packed_bytes`), plus `outside_bytes`
    peak_temp_bytes: float
    notes: list[str] = field(default_factory=list)
    # the peak of what libtpu holds outside its buffer assignment (async collective fusion copies,
    # all-reduce scratch): in memory_analysis(), not in the compiler's HBM check
    outside_bytes: float = 0.0
    # the most temporary bytes live at once, outside ones included (perfect packing would need this)
    live_peak_temp_bytes: float = 0.0
    # collective permutes issued ahead of their op (`fusion.permute_issue_points`)
    hoisted_permutes: int = 0

    @property
    def ops(self) -> list[OpNode]:
        return [n for n in self.nodes if isinstance(n, OpNode)]

    @property
    def comms(self) -> list[CommNode]:
        return [n for n in self.nodes if isinstance(n, CommNode)]

    @property
    def flops(self) -> float:
        return sum(n.flops * n.multiplicity for n in self.ops)

    @property
    def hbm_bytes(self) -> float:
        return sum(n.hbm_bytes * n.multiplicity for n in self.ops)

    def comm_by_axes(self) -> dict[tuple[str, ...], float]:
        """Bytes received per device per execution, keyed by the mesh axes of the groups."""
        out: dict[tuple[str, ...], float] = {}
        for c in self.comms:
            out[c.axes] = out.get(c.axes, 0.0) + c.recv_bytes * c.multiplicity
        return out

    def comm_per_axis(self) -> dict[str, float]:
        """Bytes received per device per execution by collectives spanning each mesh axis."""
        out = {name: 0.0 for name, _ in self.mesh_axes}
        for axes, b in self.comm_by_axes().items():
            for a in axes:
                out[a.split(":")[0]] = out.get(a.split(":")[0], 0.0) + b
        return out

    def collective_traffic(self) -> list[list[Any]]:
        """The collectives as `[kind, axes, payload bytes, multiplicity]`, equal (kind, axes,
        payload) merged (multiplicities added), in order of first appearance: what is needed to
        rebuild the program's communication over any device order (`aoizora.stage2.compile_order`)."""
        merged: dict[tuple[str, tuple[str, ...], float], int] = {}
        for c in self.comms:
            key = (c.kind, c.axes, float(c.payload_bytes))
            merged[key] = merged.get(key, 0) + c.multiplicity
        return [[kind, list(axes), payload, mult] for (kind, axes, payload), mult in merged.items()]

    def summary(self) -> dict[str, Any]:
        kinds: dict[str, int] = {}
        for c in self.comms:
            key = f"{c.kind}[{'+'.join(c.axes)}]{'' if c.explicit else '*'}"
            kinds[key] = kinds.get(key, 0) + c.multiplicity
        return {
            "flops": self.flops,
            "hbm_bytes": self.hbm_bytes,
            "comm_per_axis": self.comm_per_axis(),
            "collectives": kinds,
            "collective_traffic": self.collective_traffic(),
            "argument_bytes": self.argument_bytes,
            "output_bytes": self.output_bytes,
            "peak_temp_bytes": self.peak_temp_bytes,
            "outside_bytes": self.outside_bytes,
            "live_peak_temp_bytes": self.live_peak_temp_bytes,
        }
