"""What an HLO instruction says, read for the program builder (`builder.py`): the opcode
tables (free, collective, known) and each instruction's kernel name, collective kind, shapes,
algorithm config and per-device traffic."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from aoizora.hlo.algorithm import AlgorithmConfig, parse_algorithm_config
from aoizora.hlo.costs import ELEMENTWISE_FLOP_OPS, MOVEMENT_OPS
from aoizora.hlo.parser import Computation, Instruction
from aoizora.hlo.program import CollectiveKind
from aoizora.hlo.shapes import Shape
from aoizora.hlo.traffic import bytes_sent_per_device

FREE_OPS = frozenset(
    """parameter constant get-tuple-element tuple bitcast after-all partition-id replica-id
    add-dependency opt-barrier optimization-barrier domain copy-done slice-done
    get-dimension-size""".split()
)
COLLECTIVE_OPCODES = {
    "all-reduce": CollectiveKind.ALL_REDUCE,
    "all-gather": CollectiveKind.ALL_GATHER,
    "reduce-scatter": CollectiveKind.REDUCE_SCATTER,
    "all-to-all": CollectiveKind.ALL_TO_ALL,
    "ragged-all-to-all": CollectiveKind.ALL_TO_ALL,
    "collective-permute": CollectiveKind.COLLECTIVE_PERMUTE,
}
ASYNC_STARTS = {f"{k}-start": v for k, v in COLLECTIVE_OPCODES.items()}
ASYNC_DONES = {f"{k}-done": v for k, v in COLLECTIVE_OPCODES.items()}
OTHER_KNOWN = frozenset(
    """dot convolution fusion custom-call reduce reduce-window select-and-scatter sort map
    call while conditional copy-start slice-start send send-done recv recv-done infeed outfeed
    rng rng-get-and-update-state rng-bit-generator fft cholesky triangular-solve topk
    batch-norm-training batch-norm-inference batch-norm-grad dynamic-reshape
    set-dimension-size async-start async-update async-done call-start call-done""".split()
)
KNOWN_OPCODES = (
    FREE_OPS | ELEMENTWISE_FLOP_OPS | MOVEMENT_OPS | set(COLLECTIVE_OPCODES) | set(ASYNC_STARTS)
    | set(ASYNC_DONES) | OTHER_KNOWN
)
"""Every opcode the builder understands; anything else becomes an ``unknown`` node."""

FREE_CUSTOM_CALLS = frozenset(
    {"AllocateBuffer", "ConcatBitcast", "Sharding", "SPMDFullToShardShape",
     "SPMDShardToFullShape", "MoveToHost", "MoveToDevice", "LayoutConstraint",
     "PrepareAsyncCallStart", "PrepareAsyncCallDone"}
)
"""libtpu-internal custom calls that are buffer bookkeeping, costed like compute (bytes only),
not opaque kernels. (`PrepareAsyncCall*` set up a TPU7x SparseCore call of an offloaded collective.)"""

ASYNC_COLLECTIVE_START = "AsyncCollectiveStart"
ASYNC_COLLECTIVE_DONE = "AsyncCollectiveDone"



def async_fusion_config(inst: Instruction) -> Mapping[str, Any] | None:
    bc = inst.backend_config
    if isinstance(bc, Mapping) and isinstance(bc.get("async_collective_fusion_config"), Mapping):
        return bc["async_collective_fusion_config"]
    return None


def unquote(s: str) -> str:
    return s[1:-1] if len(s) >= 2 and s[0] == '"' and s[-1] == '"' else s


def is_async_collective_custom_call(inst: Instruction, target: str) -> bool:
    return inst.opcode == "custom-call" and unquote(inst.attr("custom_call_target") or "") == target


def branch_names(inst: Instruction) -> list[str]:
    raw = inst.attr("branch_computations")
    if raw:
        return [n.strip() for n in raw.strip("{}").split(",") if n.strip()]
    return [n for n in (inst.attr("true_computation"), inst.attr("false_computation")) if n]


def op_name(inst: Instruction) -> str | None:
    md = inst.attr("metadata")
    if not md:
        return None
    i = md.find('op_name="')
    if i < 0:
        return None
    j = md.find('"', i + 9)
    return md[i + 9 : j] if j > 0 else None


def kernel_name(inst: Instruction) -> str | None:
    """The kernel's name: from the custom-call config, the op_name before ``/pallas_call``,
    or the instruction name without its ``.N`` suffix."""
    bc = inst.backend_config
    if isinstance(bc, Mapping):
        cc = bc.get("custom_call_config")
        if isinstance(cc, Mapping):
            for key in ("kernel_name", "name"):
                if isinstance(cc.get(key), str):
                    return cc[key]
    name = op_name(inst)
    if name and "/pallas_call" in name:
        head = name.rsplit("/pallas_call", 1)[0]
        return head.rsplit("/", 1)[-1] or None
    base = inst.name.split(".", 1)[0]
    return base or None


def collective_kind(opcode: str, operand_bytes: int, result_bytes: int) -> CollectiveKind:
    """The kind of a collective op (``-start`` / ``-done`` spellings included); a custom-call
    collective without a recognisable inner op is an all-gather when it grows its buffer, else an
    all-reduce."""
    for suffix in ("-start", "-done"):
        if opcode.endswith(suffix):
            opcode = opcode[: -len(suffix)]
    kind = COLLECTIVE_OPCODES.get(opcode)
    if kind is None:
        kind = CollectiveKind.ALL_GATHER if result_bytes > operand_bytes else CollectiveKind.ALL_REDUCE
    return kind


def collective_shapes(coll_inst: Instruction, where: Computation) -> tuple[list[Shape], Shape]:
    """(operand shapes, result shape) of the collective op itself, per device."""
    in_shapes = [where.by_name[o].shape for o in coll_inst.operands if o in where.by_name]
    if (
        coll_inst.opcode.endswith("-start")
        and coll_inst.opcode != "all-reduce-start"  # its (tuple of) results only
        and coll_inst.shape.is_tuple
    ):
        return in_shapes, start_result(coll_inst, in_shapes)
    return in_shapes, coll_inst.shape


def fused_compute_ops(inner_comp: Computation, coll_inst: Instruction) -> tuple[str, ...]:
    """The compute opcodes fused with a collective in the computation that wraps it."""
    return tuple(
        i.opcode for i in inner_comp.instructions
        if i is not coll_inst and i.opcode not in FREE_OPS and i.opcode not in MOVEMENT_OPS
        and not is_async_collective_custom_call(i, ASYNC_COLLECTIVE_START)
    )


def array_bytes(kind: CollectiveKind, operand_bytes: int, result_bytes: int, group_size: int) -> int:
    """The size of the whole array a collective moves pieces of, per group."""
    if kind is CollectiveKind.ALL_GATHER:
        return max(result_bytes, operand_bytes * group_size)
    if kind is CollectiveKind.ALL_TO_ALL:
        return operand_bytes * group_size
    return operand_bytes


def algorithm_config(inst: Instruction, coll_inst: Instruction) -> AlgorithmConfig | None:
    """libtpu's ``collective_algorithm_config`` of the instruction or of the collective it wraps."""
    for bc in (inst.backend_config, coll_inst.backend_config):
        if isinstance(bc, Mapping) and isinstance(bc.get("collective_algorithm_config"), Mapping):
            cfg = parse_algorithm_config(bc["collective_algorithm_config"])
            if cfg is not None:
                return cfg
    return None


def start_result(inst: Instruction, in_shapes: list[Shape]) -> Shape:
    """The result buffer inside a ``*-start`` tuple: (operands..., results..., scratch...)."""
    elems = list(inst.shape.tuple_shapes)
    n_in = len(in_shapes)
    if len(elems) > n_in:
        res = elems[n_in]
        if n_in > 1 and len(elems) >= 2 * n_in:
            return Shape("tuple", (), None, tuple(elems[n_in : 2 * n_in]))
        return res
    return elems[-1] if elems else inst.shape


def traffic(
    kind: CollectiveKind,
    operand_bytes: int,
    result_bytes: int,
    n: int,
    pairs: tuple[tuple[int, int], ...],
) -> tuple[int, int, int]:
    """(payload, send, recv) bytes per device under a bandwidth-optimal algorithm (whole bytes)."""
    s = operand_bytes
    if kind is not CollectiveKind.COLLECTIVE_PERMUTE:
        t = int(bytes_sent_per_device(kind, n, Fraction(s))) if n > 1 else 0
        return s, t, t
    # collective-permute: a device sends its buffer once per pair it is the source of
    sends: dict[int, int] = {}
    recvs: dict[int, int] = {}
    for a, b in pairs:
        if a == b:
            continue
        sends[a] = sends.get(a, 0) + 1
        recvs[b] = recvs.get(b, 0) + 1
    return s, s * max(sends.values(), default=0), s * max(recvs.values(), default=0)
