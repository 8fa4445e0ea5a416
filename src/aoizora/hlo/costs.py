"""FLOPs and HBM bytes of compute instructions, derived from shapes alone.

Why from shapes: the compiler's ``cost_analysis()`` counts a while-loop body once and gives
Pallas kernels ~0 cost, so the cost model needs per-op numbers it can scale by trip counts.

Conventions (documented so the cost model can rely on them):

* ``dot``: 2 · (result elements) · (product of the lhs contracting dimensions).
* ``convolution`` (libtpu prints most matmuls as convolutions, e.g. ``dim_labels=bf_io->bf``):
  2 · (result elements) · (kernel input-feature size) · (product of kernel spatial sizes).
  The kernel's input-feature dimension already holds C_in / feature_group_count.
* elementwise arithmetic / transcendental ops: one FLOP per result element; ``reduce`` and
  ``reduce-window``: one per *input* element (times the window for reduce-window); data
  movement (copy, transpose, slice, broadcast, gather, pad, ...): zero FLOPs.
* ``fusion``: sum of its body's FLOPs (recursing into nested fusions); HBM bytes of a fusion
  (and of any top-level op) = bytes of its operands + bytes of its result that live in HBM
  (layout memory space 0; ``S(1)`` VMEM operands were prefetched by a separately costed
  ``copy-start``), i.e. the traffic of a kernel whose intermediates stay on chip. Logical
  bytes, TPU tiling padding ignored.
* ``estimated_cycles``: the compiler's own estimate, read from ``backend_config`` (top level
  or ``window_config``) when present.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from math import prod
from typing import Any

import numpy as np

from aoizora.hlo.attrs import parse_int_list
from aoizora.hlo.parser import Computation, Instruction
from aoizora.hlo.shapes import Shape

ELEMENTWISE_FLOP_OPS = frozenset(
    """abs add and atan2 cbrt ceil clamp clz compare complex convert divide erf exponential
    exponential-minus-one floor imag is-finite log log-plus-one logistic maximum minimum multiply
    negate not or popcnt power real reduce-precision remainder round-nearest-afz
    round-nearest-even rsqrt select shift-left shift-right-arithmetic shift-right-logical sign
    sine cosine sqrt stochastic-convert subtract tan tanh xor""".split()
)
"""Ops costed at one FLOP per result element (comparisons and conversions included: they
occupy the vector units like arithmetic does)."""

MOVEMENT_OPS = frozenset(
    """bitcast bitcast-convert broadcast concatenate copy dynamic-slice dynamic-update-slice
    gather iota pad reshape reverse scatter slice transpose get-tuple-element tuple parameter
    constant partition-id replica-id""".split()
)


_NO_ESTIMATE = 2**63 - 1  # INT64_MAX: what libtpu prints when its cost model has no estimate


def estimated_cycles(backend_config: Mapping[str, Any] | str | None) -> int | None:
    """The compiler's ``estimated_cycles`` for an op, None when it did not print one.

    libtpu 0.0.42.1 prints ``"estimated_cycles":"9223372036854775807"`` (INT64_MAX) for some
    TPU7x copies: no estimate, not a cost (taken literally it is ~5e9 s per copy). Ops then get
    the roofline like any op without an estimate.
    """
    if not isinstance(backend_config, Mapping):
        return None
    v = backend_config.get("estimated_cycles")
    if v is None:
        wc = backend_config.get("window_config")
        if isinstance(wc, Mapping):
            v = wc.get("estimated_cycles")
    if v is None:
        return None
    try:
        cycles = int(v)
    except (TypeError, ValueError):
        return None
    return None if cycles >= _NO_ESTIMATE else cycles


def dot_flops(inst: Instruction, lhs: Shape) -> float:
    """2 · result elements · contracted size of a ``dot``."""
    contracting = parse_int_list(inst.attr("lhs_contracting_dims"))
    k = prod(lhs.dims[d] for d in contracting) if contracting else 1
    return 2.0 * inst.shape.num_elements * k


def _window(inst: Instruction, spatial: int) -> dict[str, list]:
    """The ``window={size=.. pad=.. stride=.. lhs_dilate=.. rhs_dilate=..}`` attribute, per spatial dim."""
    out: dict[str, list] = {"size": [1] * spatial, "pad": [(0, 0)] * spatial, "stride": [1] * spatial,
                            "lhs_dilate": [1] * spatial, "rhs_dilate": [1] * spatial}
    for part in (inst.attr("window") or "").strip("{}").split():
        key, _, value = part.partition("=")
        if key not in out or not value:
            continue
        items = value.split("x")
        if len(items) != spatial:
            continue
        if key == "pad":
            out[key] = [tuple(int(v) for v in item.split("_")) for item in items]
        else:
            out[key] = [int(v) for v in items]
    return out


def _valid_pairs(out_size: int, k_size: int, in_size: int, stride: int, pad_lo: int, lhs_dil: int, rhs_dil: int) -> int:
    """(output position, kernel position) pairs that read a real input element, not padding."""
    o = np.arange(out_size)[:, None]
    k = np.arange(k_size)[None, :]
    pos = o * stride + k * rhs_dil - pad_lo
    real = (pos >= 0) & (pos % lhs_dil == 0) & (pos // lhs_dil < in_size)
    return int(real.sum())


def convolution_flops(inst: Instruction, lhs: Shape, rhs: Shape) -> float:
    """2 · MACs of a ``convolution``, counting only window positions that read real input.

    libtpu lowers some dot_generals to convolutions whose window slides over padding (e.g.
    ``size=1x16 pad=0_0x15_15`` on a spatial dimension of size 1): counting the full window
    would overstate those dots many times.
    """
    labels = inst.attr("dim_labels")
    out = inst.shape.leaves()[0] if inst.shape.is_tuple else inst.shape
    if not labels or "_" not in labels or "->" not in labels:
        return 2.0 * out.num_elements  # unknown labelling: count one MAC per output
    lhs_labels, rest = labels.split("_", 1)
    rhs_labels, out_labels = rest.split("->", 1)
    if len(lhs_labels) != len(lhs.dims) or len(rhs_labels) != len(rhs.dims) or len(out_labels) != len(out.dims):
        return 2.0 * out.num_elements
    spatial = sorted(ch for ch in rhs_labels if ch.isdigit())
    win = _window(inst, len(spatial))
    pairs = 1
    for n, ch in enumerate(spatial):
        pairs *= _valid_pairs(
            out.dims[out_labels.index(ch)], rhs.dims[rhs_labels.index(ch)], lhs.dims[lhs_labels.index(ch)],
            win["stride"][n], win["pad"][n][0], win["lhs_dilate"][n], win["rhs_dilate"][n],
        )
    batch = out.dims[out_labels.index("b")] if "b" in out_labels else 1
    out_features = out.dims[out_labels.index("f")] if "f" in out_labels else 1
    in_features = rhs.dims[rhs_labels.index("i")] if "i" in rhs_labels else 1
    return 2.0 * batch * out_features * in_features * pairs


def instruction_flops(
    inst: Instruction,
    operand_shapes: list[Shape],
    fused_flops: Callable[[str], float],
) -> float:
    """FLOPs of one instruction (``fused_flops`` answers for called fusion computations)."""
    op = inst.opcode
    if op == "fusion":
        callee = inst.attr("calls")
        return fused_flops(callee) if callee else 0.0
    if op == "dot" and operand_shapes:
        return dot_flops(inst, operand_shapes[0])
    if op == "convolution" and len(operand_shapes) >= 2:
        return convolution_flops(inst, operand_shapes[0], operand_shapes[1])
    if op in ELEMENTWISE_FLOP_OPS:
        return float(sum(s.num_elements for s in inst.shape.leaves()))
    if op == "reduce" and operand_shapes:
        half = max(1, len(operand_shapes) // 2)  # variadic reduce: inputs then init values
        return float(sum(s.num_elements for s in operand_shapes[:half]))
    if op == "reduce-window" and operand_shapes:
        window = inst.attr("window") or ""
        size = 1
        for part in window.split():
            if part.startswith("size="):
                for d in part[5:].split("x"):
                    if d.isdigit():
                        size *= int(d)
        return float(inst.shape.num_elements * size)
    return 0.0


def hbm_size(shape: Shape) -> int:
    """Bytes of the arrays of ``shape`` that live in HBM (layout memory space 0)."""
    return sum(leaf.byte_size for leaf in shape.leaves() if leaf.memory_space == 0)


def io_bytes(inst: Instruction, operand_shapes: list[Shape]) -> int:
    """HBM bytes read (operands) plus written (result) by a top-level op.

    Buffers whose layout puts them in another memory space (``S(1)`` VMEM, ``S(2)`` SMEM/sflags,
    ...) are left out: moving them there was a separate op (a ``copy-start`` prefetch) that is
    costed on its own.
    """
    return sum(hbm_size(s) for s in operand_shapes) + hbm_size(inst.shape)


class FusionCoster:
    """FLOPs of fused computations, computed once per computation name and cached."""

    __slots__ = ("_computations", "_cache")

    def __init__(self, computations: Mapping[str, Computation]) -> None:
        self._computations = computations
        self._cache: dict[str, float] = {}

    def flops(self, name: str) -> float:
        """Sum of the FLOPs of a fused computation's instructions (nested fusions included)."""
        key = name.lstrip("%")
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        comp = self._computations.get(key)
        if comp is None:
            return 0.0
        self._cache[key] = 0.0  # guards against (invalid) recursion
        total = 0.0
        by_name = comp.by_name
        for inst in comp.instructions:
            shapes = [by_name[o].shape for o in inst.operands if o in by_name]
            total += instruction_flops(inst, shapes, self.flops)
        self._cache[key] = total
        return total
