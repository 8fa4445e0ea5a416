"""What XLA fuses on TPU, read off one region of the lowered program: the HBM model's view of ops.

Why: which values own a buffer, and until when, depends on fusion, not on sharding. XLA fuses
elementwise and data-movement ops into the ops that consume them; those consumers (contractions,
reductions, concatenates, collectives, kernels, loops, returns) read the fused value's inputs when
they run. These functions look at a region's ops only (never at shardings), so the HBM model
(`hbm.py`) can decide buffer lifetimes from the value events and this static view.
"""

from __future__ import annotations

from aoizora.stage1.ir import COLLECTIVE_OPS, RETURN_OPS, Op, Region, TensorType, same_shape, uses

# Ops that only relabel a buffer's elements: the compiler assigns layouts so that they cost no copy
# (except a reshape that moves elements across lanes, see `relayout`).
VIEW_OPS = {"stablehlo.transpose", "stablehlo.reshape"}

# Fused ops that compute nothing new from a buffer (a view, or values made from constants).
NON_COMPUTING = VIEW_OPS | {"stablehlo.broadcast_in_dim", "stablehlo.constant", "stablehlo.iota", "func.call"}

# Data-movement ops XLA fuses like elementwise ones (but a reshape across lanes is a copy, `relayout`)
FUSED_MOVES = {"stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.transpose", "stablehlo.slice",
               "stablehlo.convert", "sdy.sharding_constraint", "stablehlo.pad", "stablehlo.reverse",
               "stablehlo.dynamic_slice"}

# collectives libtpu runs on a written operand (no producer fused in): the all-to-all (Ulysses)
UNFUSED_COLLECTIVES = {"stablehlo.all_to_all"}

# Ops that take their operands as a region's arguments: a value they read is computed before the
# region starts, not inside it.
REGION_ENTRY_OPS = {"sdy.manual_computation", "stablehlo.while"} | RETURN_OPS

LANES = 128  # TPU tiles the two minor dimensions of an array (8, 128): the minor one in 128 lanes


def relayout(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Whether a reshape moves elements between lanes: it changes the minor (non-unit) dimension
    and one side's minor dimension is not a whole number of lane tiles (e.g. (..., 128) ->
    (..., 64, 2), the interleaved pairs of rotary embeddings)."""
    a = [d for d in src if d != 1]
    b = [d for d in dst if d != 1]
    if not a or not b or a[-1] == b[-1]:
        return False
    return a[-1] % LANES != 0 or b[-1] % LANES != 0


def continues_fusion(op: Op) -> bool:
    """Whether XLA fuses `op` into the computation of its operands (elementwise ops and data
    movement) instead of taking them as buffers."""
    if op.name == "stablehlo.reshape" and op.operand_types[0] is not None and op.result_types[0] is not None:
        return not relayout(op.operand_types[0].shape, op.result_types[0].shape)
    if op.name in FUSED_MOVES:
        return True
    return (not op.regions and op.name not in COLLECTIVE_OPS and op.name != "stablehlo.custom_call"
            and same_shape(op))


def _takes_written_operand(op: Op) -> bool:
    """Whether a fused computation ending at `op` is written out before `op` runs (a region's
    argument, or the operand a relayout reshape copies), so its inputs are free by then."""
    if op.name in REGION_ENTRY_OPS:
        return True
    return op.name == "stablehlo.reshape" and not continues_fusion(op)


def fusion_ends(region: Region) -> tuple[dict[int, int], set[int]]:
    """Up to which op (index) each fused value's inputs stay live, and which fused values are written out.

    XLA fuses elementwise and data-movement ops into their consumers; a computation ends at the
    ops that take buffers (contractions, reductions, concatenates, collectives, kernels, loops,
    returns), which read the fused value's inputs when they run, so the inputs stay live until
    then: libtpu holds a rotary embedding's float32 operand until the attention consumes q and k,
    and a GELU's input until the second MLP matmul. A computed value that several such ops read
    is written out once instead (a residual sum, the normalized activation feeding q, k and v),
    unless it is larger than the buffers it is computed from: a float32 cast of an activation, or
    the float32 exponentials of bf16 attention scores, are recomputed by each reader.
    docs/notebook/memory-model.md, "Fused values".
    """
    ops = region.ops
    fused = [continues_fusion(op) for op in ops]
    # the largest buffer each value is computed from (its own size when it is a buffer)
    source_bytes: dict[int, float] = {}
    for op, through in zip(ops, fused, strict=True):
        for r, t in zip(op.results, op.result_types, strict=True):
            own = t.bytes if t is not None else 0.0
            source_bytes[r] = max((source_bytes.get(v, 0.0) for v in op.operands), default=own) if through else own
    ends: dict[int, set[int]] = {}
    written: set[int] = set()
    for i in range(len(ops) - 1, -1, -1):
        op, through = ops[i], fused[i]
        if through and op.name not in NON_COMPUTING:
            sources = max((source_bytes.get(v, 0.0) for v in op.operands), default=0.0)
            written.update(r for r, t in zip(op.results, op.result_types, strict=True)
                           if len(ends.get(r, ())) > 1 and t is not None and t.bytes <= sources)
        for v in set(uses(op)):
            got = ends.setdefault(v, set())
            if through and not any(r in written for r in op.results):
                for r in op.results:
                    got.update(ends.get(r, ()))
            else:
                got.add(i)
    until = {v: max(e - 1 if _takes_written_operand(ops[e]) else e for e in es) for v, es in ends.items() if es}
    return until, written


def last_uses(region: Region) -> dict[int, int]:
    """The index of the last op of `region` that reads each value (nested regions included)."""
    last_use: dict[int, int] = {}
    for i, op in enumerate(region.ops):
        for v in uses(op):
            last_use[v] = i
    return last_use


def permute_issue_points(region: Region) -> dict[int, list[tuple[int, TensorType | None, int]]]:
    """Where each collective permute of `region` starts: right after its operand is defined.

    Why: libtpu's scheduler starts a permute as soon as its operand exists, so a chain of
    permutes (ring attention's K/V rotation, which needs no compute between steps) runs back to
    back before the first step's kernel and every step's K/V shard is live at once (Wan 14B
    720p/81f on v5e:2x4, context = 8: all 14 permuted shards hold their own buffer;
    docs/notebook/memory-model.md). Maps the index of the op after which a permute is issued (-1: before
    the first op) to (result, result type, the chain's first operand, whose sharding it has).
    """
    defined = {r: i for i, op in enumerate(region.ops) for r in op.results}
    root: dict[int, tuple[int, int]] = {}  # permute result -> (issue index, first operand)
    points: dict[int, list[tuple[int, TensorType | None, int]]] = {}
    for op in region.ops:
        if op.name != "stablehlo.collective_permute" or not op.operands or not op.results:
            continue
        v = op.operands[0]
        at, first = root.get(v, (defined.get(v, -1), v))
        root[op.results[0]] = (at, first)
        points.setdefault(at, []).append((op.results[0], op.result_types[0], first))
    return points
