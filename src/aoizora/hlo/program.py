"""The program model: what a TPU-compiled program communicates and computes, in order.

This module is the interface between the compiled-HLO parser and its two consumers, the
topology-aware cost model (Q2) and the event-driven reference simulator. Both need the same
things from a compiled program and nothing else, so the model is flat, typed and cheap.
Build it with `aoizora.hlo.analyze` (HLO text or a jax compiled object) or
`aoizora.hlo.build_program`.

`Program.nodes` — the schedule view
    Every costed instruction of the entry computation in program order (the compiler's
    schedule: libtpu prints modules with ``is_scheduled=true``, so text order is execution
    order). ``call``s are inlined. Loop bodies appear **once**, inline, right before the
    ``loop`` node that closes them, and are *not* unrolled. Each `Node` has

    * ``deps`` — indices of earlier nodes whose results it reads. Data flowing through free
      ops (parameter, constant, tuple, get-tuple-element, bitcast, copy-done, ...) is traced
      through them element by element, so a dep is always a real producer. A node inside a
      loop body that reads the loop's carried state depends on the producers of the loop's
      initial value (loop-carried dependencies are implied by walking the body once per
      iteration, in order). Consumers of a loop's result depend on its ``loop`` node.
    * ``multiplicity`` — product of the trip counts of all enclosing loops (1 outside loops):
      the number of times the node runs per program execution. A scheduler either walks the
      body range of each `Loop` ``trip_count`` times (`Program.execution_order` does exactly
      that), or walks the list once and scales by ``multiplicity``.
    * ``loop`` — index into `Program.loops` of the innermost enclosing loop, or None.
    * ``kind`` — one of `NodeKind`: ``compute``, ``opaque`` (custom call whose cost the caller
      supplies), ``collective`` (synchronous collective or collective fusion),
      ``collective-start`` / ``collective-done`` (the two halves of an asynchronous one),
      ``loop`` (closes a loop body; zero cost), ``unknown`` (an op this parser does not know:
      kept in place with its HBM bytes, cost left to the hook, listed in
      `Program.unknown_ops`, never dropped).
    * ``collective`` — index into `Program.collectives` for collective nodes, and for the
      compute nodes of an async collective fusion that also advance a started collective.
    * compute costs: ``flops`` (dot/convolution 2·MACs plus one per element of
      elementwise/reduce work, fusions summed over their bodies — see `aoizora.hlo.costs`),
      ``hbm_bytes`` (operands read + results written that live in HBM, i.e. layout memory
      space 0: the traffic of a fused kernel whose internals stay on chip; VMEM-resident
      ``S(1)`` operands arrive through separately costed ``copy-start``s),
      ``estimated_cycles`` (the compiler's own cost model from ``backend_config``, None when
      absent) and ``seconds`` (only set by an opaque-cost hook that answers in time).

`Program.collectives` — one `Collective` per collective instance, with

    * ``kind`` (`CollectiveKind`) and ``mode`` (`CollectiveMode`): ``sync`` (one instruction),
      ``async`` (``*-start``/``*-done`` pair or ``async-start``/``async-done`` wrapping the
      op), ``fusion`` (a kCustom fusion holding the collective, e.g. libtpu's
      ``SingleInputAllReduceScatterFusion`` = all-reduce + dynamic-slice, reported as a
      reduce-scatter), ``async-fusion`` (libtpu's async collective fusion: a fusion ending in
      an ``AsyncCollectiveStart`` custom call, compute fusions carrying its steps — listed in
      ``steps`` — and a fusion ending in ``AsyncCollectiveDone``);
    * ``start`` / ``done`` node indices (equal when synchronous) and ``overlap``: the compute /
      opaque nodes scheduled strictly between them;
    * ``groups`` — tuples of *logical device ids*: positions in the program's device
      assignment, i.e. ``mesh.devices.flat`` order for a ``jax.jit`` over a ``Mesh``
      (`Program.device_ids` maps them to runtime device ids when built from a compiled
      object); ``source_target_pairs`` for permutes (``groups`` is then empty);
    * sizes (below), ``dtype``, ``dimensions``, ``channel_id``, ``multiplicity``, ``loop``;
    * ``algorithm`` — the parsed ``collective_algorithm_config`` (`AlgorithmConfig`: emitter,
      strategy names, colors, phases, has_reordering_map, is_multistep, every debug field, and
      the ring direction, N-D grid and per-colour dimension orders read from them; see
      `aoizora.hlo.algorithm`), None when the compiler printed none (async collective fusions
      print ``async_collective_fusion_config`` instead, kept in ``async_fusion_configs``).

`Program.loops` — one `Loop` per ``while``: trip count and its source (``backend_config``
    ``known_trip_count``, or ``induction``: the condition compares a loop-state element with
    a constant and the body adds a constant to it, seen through copies, converts and
    fusions), the node range ``[start, end)`` of its body in `Program.nodes` (``end`` is the
    closing ``loop`` node), its parent loop and multiplicity. An unknown trip count is None
    and counts as 1.

Sizes (per device, in bytes; N = group size, S = operand bytes on one device):

=====================  ===================  ===================================================
kind                   ``payload_bytes``    ``send_bytes`` / ``recv_bytes`` (bandwidth-optimal)
=====================  ===================  ===================================================
all-reduce             S                    2·(N−1)/N·S each (reduce-scatter + all-gather)
all-gather             S (the shard)        (N−1)·S each
reduce-scatter         S (the full input)   (N−1)/N·S each
all-to-all             S                    (N−1)/N·S each
collective-permute     S                    S per pair the device is source / target of
=====================  ===================  ===================================================

``operand_bytes`` / ``result_bytes`` are the collective's input / output buffers on one
device; ``array_bytes`` is V of the textbook formulas (all-gather / reduce-scatter ≈ V/W on a
ring): the gathered result of an all-gather, the input of a reduce-scatter / all-reduce, N·S
for an all-to-all, S for a permute. Sizes are logical (TPU tile padding ignored).

The send/receive figures are algorithm-independent lower bounds on each device's traffic
(`aoizora.hlo.traffic`, the one traffic formula of the package);
how that traffic maps onto links (ring order and direction, reordering, colors) is the
business of the models that read ``algorithm``.

Opaque ops: custom calls (``tpu_custom_call`` for Pallas kernels such as splash attention) have
no derivable cost. `build_program` / `analyze` accept ``opaque_cost``, a callable receiving an
`OpaqueOp` (name, target, kernel name, operand and result shapes, backend config, op_name and
raw frontend attributes such as Pallas ``kernel_metadata``) and returning an `OpaqueCost`
(flops / hbm_bytes and/or seconds) or None; `Program.with_opaque_cost` re-costs a built
program with another hook without re-parsing.

Known limits: ``conditional`` is one compute node costed as its most expensive branch, after an
opaque node for each custom kernel of the branch whose kernels move the most bytes (a collective
inside a branch is not modelled; the conditional is then listed in ``unknown_ops``); an async
collective whose start and done sit on different sides of a loop boundary keeps the start's
multiplicity; ``send``/``recv`` are costed as compute.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from aoizora.hlo.algorithm import AlgorithmConfig
from aoizora.hlo.shapes import Shape
from aoizora.topology import KernelWork

if TYPE_CHECKING:  # the program model does not depend on the hardware at run time
    from aoizora.topology.hardware import HardwareProfile


class NodeKind(str, enum.Enum):
    """What a schedule node is, for a scheduler deciding which resource it occupies."""

    COMPUTE = "compute"
    OPAQUE = "opaque"
    COLLECTIVE = "collective"
    COLLECTIVE_START = "collective-start"
    COLLECTIVE_DONE = "collective-done"
    LOOP = "loop"
    UNKNOWN = "unknown"


class CollectiveKind(str, enum.Enum):
    """The five collective patterns the cost model routes (HLO opcode spelling)."""

    ALL_REDUCE = "all-reduce"
    ALL_GATHER = "all-gather"
    REDUCE_SCATTER = "reduce-scatter"
    ALL_TO_ALL = "all-to-all"
    COLLECTIVE_PERMUTE = "collective-permute"


class CollectiveMode(str, enum.Enum):
    """How the collective is issued, which decides whether compute can overlap it."""

    SYNC = "sync"  # one instruction, blocks the core
    ASYNC = "async"  # -start / -done pair (or async-start/async-done wrapping the op)
    FUSION = "fusion"  # a collective fusion (kCustom fusion whose body holds the collective)
    ASYNC_FUSION = "async-fusion"  # async collective fusion / AsyncCollectiveStart..Done pair


#: the kinds of instruction whose compiler estimate a generation's profile corrects by what the chip
#: ran them in (`HardwareProfile.estimate_scale`; see `estimate_kind`)
ESTIMATE_KINDS = ("output", "loop", "input", "fusion", "copy", "other")


def estimate_kind(opcode: str, fusion_kind: str | None) -> str:
    """The kind of an instruction's estimate, as the chip's profiles group it: ``output`` (a
    kOutput fusion, rooted at a matmul or convolution, or a bare ``dot``/``convolution``: MXU
    work), ``loop`` (a kLoop fusion: elementwise work), ``input`` (a kInput fusion: a reduction),
    ``fusion`` (a fusion of any other kind), ``copy`` (``copy``, ``copy-start``), ``other``."""
    if opcode == "fusion":
        return {"kOutput": "output", "kLoop": "loop", "kInput": "input"}.get(fusion_kind or "", "fusion")
    if opcode in ("dot", "convolution"):
        return "output"
    return "copy" if opcode in ("copy", "copy-start") else "other"


@dataclass(slots=True)
class Node:
    """One costed instruction in program order (see the module docstring)."""

    index: int
    name: str
    opcode: str
    kind: NodeKind
    computation: str
    shape: Shape
    operand_shapes: tuple[Shape, ...]
    deps: tuple[int, ...]
    multiplicity: int
    loop: int | None
    flops: float = 0.0
    hbm_bytes: int = 0
    estimated_cycles: int | None = None
    seconds: float | None = None
    collective: int | None = None  # index into Program.collectives
    custom_call_target: str | None = None
    fusion_kind: str | None = None
    backend_config: Mapping[str, Any] | None = None
    kernel: KernelWork | None = None  # what bounds an opaque kernel besides FLOPs and bytes (see OpaqueCost)

    def compute_seconds(self, hardware: HardwareProfile) -> float:
        """Time of this node on one device: the seconds a hook supplied, else the compiler's cycle
        estimate at the device's clock, corrected for its kind where the generation's chip measured
        it (`estimate_kind`, `HardwareProfile.estimate_scale`), else the roofline of its FLOPs and
        HBM bytes. Q2 and the simulator cost compute here."""
        if self.seconds is not None:
            return float(self.seconds)
        if self.estimated_cycles is not None:
            seconds = self.estimated_cycles / hardware.clock_hz
            if not hardware.estimate_scale:  # a generation not measured per operation: the estimate as is
                return seconds
            return seconds * hardware.estimate_scale.get(estimate_kind(self.opcode, self.fusion_kind), 1.0)
        return hardware.roofline_seconds(self.flops, self.hbm_bytes, self.kernel)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict of the schedule entry."""
        return {
            "index": self.index,
            "name": self.name,
            "opcode": self.opcode,
            "kind": self.kind.value,
            "computation": self.computation,
            "shape": str(self.shape),
            "deps": list(self.deps),
            "multiplicity": self.multiplicity,
            "loop": self.loop,
            "flops": self.flops,
            "hbm_bytes": self.hbm_bytes,
            "estimated_cycles": self.estimated_cycles,
            "seconds": self.seconds,
            "collective": self.collective,
            "custom_call_target": self.custom_call_target,
        }


@dataclass(slots=True)
class Collective:
    """One collective operation with everything a link-level model needs."""

    index: int
    name: str
    kind: CollectiveKind
    mode: CollectiveMode
    start: int  # node index of the issuing node (== done for SYNC / FUSION)
    done: int  # node index where the result becomes available
    groups: tuple[tuple[int, ...], ...]  # logical device ids; () for collective-permute
    source_target_pairs: tuple[tuple[int, int], ...]  # permutes only
    dtype: str
    operand_bytes: int  # per device: bytes of the collective's input buffer(s)
    result_bytes: int  # per device: bytes of its output buffer(s)
    payload_bytes: int  # per device: the conventional size (see the module docstring)
    array_bytes: int  # V of the textbook costs: bytes of the full array the group works on
    send_bytes: int  # per device (max over devices), bandwidth-optimal lower bound
    recv_bytes: int
    group_size: int
    multiplicity: int
    loop: int | None
    channel_id: int | None
    dimensions: tuple[int, ...]
    algorithm: AlgorithmConfig | None
    overlap: tuple[int, ...] = ()  # compute/opaque node indices between start and done
    fused_compute: tuple[str, ...] = ()  # for collective fusions: compute opcodes fused in
    steps: tuple[int, ...] = ()  # async collective fusions (compute nodes) that advance it
    # ``async_collective_fusion_config`` of the start and of each step (e.g. flag_start/end)
    async_fusion_configs: tuple[Mapping[str, Any], ...] = ()

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return {
            "index": self.index,
            "name": self.name,
            "kind": self.kind.value,
            "mode": self.mode.value,
            "start": self.start,
            "done": self.done,
            "groups": [list(g) for g in self.groups],
            "source_target_pairs": [list(p) for p in self.source_target_pairs],
            "dtype": self.dtype,
            "operand_bytes": self.operand_bytes,
            "result_bytes": self.result_bytes,
            "payload_bytes": self.payload_bytes,
            "array_bytes": self.array_bytes,
            "send_bytes": self.send_bytes,
            "recv_bytes": self.recv_bytes,
            "group_size": self.group_size,
            "multiplicity": self.multiplicity,
            "loop": self.loop,
            "channel_id": self.channel_id,
            "dimensions": list(self.dimensions),
            "algorithm": self.algorithm.to_json() if self.algorithm else None,
            "overlap": list(self.overlap),
            "fused_compute": list(self.fused_compute),
            "steps": list(self.steps),
            "async_fusion_configs": [dict(c) for c in self.async_fusion_configs],
        }


@dataclass(slots=True)
class Loop:
    """A ``while`` loop kept as a loop: its body nodes are ``Program.nodes[start:end]``."""

    index: int
    name: str
    trip_count: int | None  # None when neither backend_config nor the induction tells
    trip_count_source: str  # "backend_config" | "induction" | "unknown"
    start: int
    end: int  # index of the closing LOOP node
    parent: int | None
    multiplicity: int  # runs of each body node per program execution

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)


@dataclass(frozen=True, slots=True)
class OpaqueOp:
    """What an opaque-cost hook is told about a custom call."""

    name: str
    target: str
    operand_shapes: tuple[Shape, ...]
    result_shape: Shape
    backend_config: Mapping[str, Any] | str | None
    kernel_name: str | None  # e.g. "splash_mha_fwd_no_residuals" (Pallas kernel name)
    op_name: str | None = None  # metadata op_name (the jax source path of the call)
    frontend_attributes: str | None = None  # raw, e.g. Pallas kernel_metadata (block sizes)


@dataclass(frozen=True, slots=True)
class OpaqueCost:
    """A hook's answer: any of flops / HBM bytes / seconds (None = unknown).

    `kernel` lets the hardware roofline see what bounds the kernel besides FLOPs and bytes
    (`KernelWork`, `HardwareProfile.roofline_seconds`).
    """

    flops: float | None = None
    hbm_bytes: int | None = None
    seconds: float | None = None
    kernel: KernelWork | None = None


OpaqueCostHook = Callable[[OpaqueOp], "OpaqueCost | None"]


@dataclass(slots=True)
class Program:
    """A compiled program as a loop-aware dependency graph (see the module docstring)."""

    module_name: str
    num_partitions: int
    replica_count: int
    nodes: list[Node]
    collectives: list[Collective]
    loops: list[Loop]
    unknown_ops: list[str] = field(default_factory=list)  # "name (opcode)" per unknown op
    device_ids: tuple[int, ...] | None = None  # device assignment (logical id -> device id)
    _opaque_ops: dict[int, OpaqueOp] = field(default_factory=dict, repr=False)

    @property
    def num_devices(self) -> int:
        """Devices taking part in the program (replicas × partitions)."""
        return self.num_partitions * self.replica_count

    @property
    def opaque(self) -> list[Node]:
        """Nodes whose cost the compiler's text cannot tell (custom calls and unknown ops)."""
        return [n for n in self.nodes if n.kind in (NodeKind.OPAQUE, NodeKind.UNKNOWN)]

    def opaque_op(self, node: Node) -> OpaqueOp:
        """The description an opaque-cost hook receives for ``node``."""
        return self._opaque_ops[node.index]

    def with_opaque_cost(self, hook: OpaqueCostHook) -> Program:
        """A copy whose opaque nodes are costed by ``hook`` (other nodes are shared)."""
        nodes = list(self.nodes)
        for idx, op in self._opaque_ops.items():
            cost = hook(op)
            if cost is None:
                continue
            old = nodes[idx]
            nodes[idx] = dataclasses.replace(
                old,
                flops=old.flops if cost.flops is None else float(cost.flops),
                hbm_bytes=old.hbm_bytes if cost.hbm_bytes is None else int(cost.hbm_bytes),
                seconds=cost.seconds,
                kernel=cost.kernel,
            )
        return dataclasses.replace(self, nodes=nodes)

    def execution_order(self) -> Iterator[tuple[Node, tuple[int, ...]]]:
        """Nodes as they execute: loop bodies repeated ``trip_count`` times (1 if unknown).

        Yields ``(node, iterations)`` where ``iterations`` holds the iteration number of each
        enclosing loop, outermost first. The walk a simulator wants; it costs
        sum(multiplicity) steps, so prefer `nodes` + ``multiplicity`` for closed forms.
        """
        children: dict[int | None, list[Loop]] = {}
        for lp in self.loops:
            children.setdefault(lp.parent, []).append(lp)

        def run(start: int, end: int, parent: int | None, its: tuple[int, ...]):
            subs = {lp.start: lp for lp in children.get(parent, ()) if start <= lp.start <= end}
            i = start
            while i < end:
                lp = subs.get(i)
                if lp is not None and lp.end < end:
                    for t in range(lp.trip_count if lp.trip_count is not None else 1):
                        yield from run(lp.start, lp.end, lp.index, its + (t,))
                    yield self.nodes[lp.end], its
                    i = lp.end + 1
                    continue
                yield self.nodes[i], its
                i += 1

        yield from run(0, len(self.nodes), None, ())

    def total_flops(self) -> float:
        """FLOPs of one program execution (loop bodies scaled by their trip counts)."""
        return sum(n.flops * n.multiplicity for n in self.nodes)

    def total_estimated_cycles(self) -> int:
        """Sum of the compiler's per-op cycle estimates, scaled by multiplicity."""
        return sum((n.estimated_cycles or 0) * n.multiplicity for n in self.nodes)

    def to_json(self) -> dict[str, Any]:
        """The whole model as JSON-ready data (schedule, collectives, loops)."""
        return {
            "module": self.module_name,
            "num_partitions": self.num_partitions,
            "replica_count": self.replica_count,
            "device_ids": list(self.device_ids) if self.device_ids else None,
            "nodes": [n.to_json() for n in self.nodes],
            "collectives": [c.to_json() for c in self.collectives],
            "loops": [lp.to_json() for lp in self.loops],
            "unknown_ops": list(self.unknown_ops),
        }
