"""Sharding rules per op: result shardings, the collectives they need, the compute they cost.

Each rule takes the propagator (what of it the rules use: `Propagator`, which `propagate.py`'s
`ShardingPropagator` is), the op, its operands' shardings (replicated inside a shard_map body,
`manual`) and the execution count, emits the op's nodes and collectives through the propagator,
and returns the result shardings. `propagate.py` has the rules in prose.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from aoizora.stage1.ir import (
    COLLECTIVE_OPS,
    Op,
    Sharding,
    TensorType,
    axis_size,
    contains_op,
    dot_free_dims,
    group_axes,
    same_shape,
)
from aoizora.stage1.shardings import fit, merge, replicated, reshape_groups, with_dims
from aoizora.workload import KernelCall

if TYPE_CHECKING:
    from aoizora.stage1.dag import KernelCostHook, Node
    from aoizora.stage1.events import CollectiveCause
    from aoizora.stage1.hints import BackwardHints
    from aoizora.stage1.ir import IRModule, Region, ShardyMesh
    from aoizora.stage1.shardings import AxisSizes


class Propagator(Protocol):
    """What the rules read and call of the propagator walking the program (`ShardingPropagator`)."""

    module: IRModule
    mesh: ShardyMesh
    sizes: AxisSizes
    kernel_cost: KernelCostHook | None
    nodes: list[Node]
    producer: dict[int, int]  # value -> index of the node that computes it
    frame: int  # one per function-call walk
    frames: int
    hints: BackwardHints
    prefetchable: set[tuple[int, int]]  # (frame, value) made from parameters alone

    def deps(self, values: tuple[int, ...]) -> tuple[int, ...]: ...

    def op_node(self, op: Op, flops: float, hbm: float, min_hbm: float, mult: int, **kw: Any) -> int: ...

    def collective(self, kind: str, axes: tuple[str, ...], payload: float, recv: float, mult: int, *,
                   cause: CollectiveCause, result_bytes: float, reason: str, deps: tuple[int, ...] = (),
                   prefetchable: bool = False) -> int: ...

    def note(self, text: str) -> None: ...

    def reshard(self, value: int, t: TensorType | None, src: Sharding, dst: Sharding, mult: int, reason: str,
                cause: CollectiveCause = "reshard") -> None: ...

    def resolve_partial(self, v: int, t: TensorType | None, s: Sharding, mult: int, reason: str) -> Sharding: ...

    def region(self, region: Region, arg_shardings: list[Sharding], mult: int, manual: bool) -> list[Sharding]: ...


Rule = Callable[[Propagator, Op, list[Sharding], int, bool], list[Sharding]]

# Ops that are pure plumbing (no compute, no HBM traffic of their own).
NO_COST = {
    "stablehlo.constant", "stablehlo.iota", "sdy.sharding_constraint", "func.return", "stablehlo.return",
    "sdy.return", "stablehlo.get_tuple_element", "stablehlo.tuple", "stablehlo.optimization_barrier",
    "stablehlo.reshape", "stablehlo.bitcast_convert",
}
# Elementwise ops linear in each operand: partial sums pass through them unreduced.
LINEAR_UNARY = {"stablehlo.convert", "stablehlo.negate", "stablehlo.reshape", "stablehlo.transpose"}
LINEAR_NARY = {"stablehlo.add", "stablehlo.subtract"}


def _rep_of(t: TensorType | None) -> Sharding:
    return replicated(t.rank if t else 0)


def cost_simple(w: Propagator, op: Op, ins: list[Sharding], outs: list[Sharding], mult: int,
                flops_per_elem: float = 1.0, min_bytes: float = 0.0) -> None:
    """An op node reading its operands and writing its results once, `flops_per_elem` per result element."""
    if op.name in NO_COST:
        return
    sizes = w.sizes
    out_bytes = sum(sizes.local_bytes(t, s) for t, s in zip(op.result_types, outs, strict=True))
    # `ins` may cover only the leading operands: a dynamic slice's or update's data, not its start indices
    in_bytes = sum(sizes.local_bytes(t, s) for t, s in zip(op.operand_types, ins, strict=False))
    elems = sum(math.prod(sizes.local_shape(t, s)) for t, s in zip(op.result_types, outs, strict=True) if t is not None)
    w.op_node(op, flops_per_elem * elems, in_bytes + out_bytes, min_bytes, mult)


def _elementwise(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    rank = op.result_type(0).rank  # `same_shape` chose this rule: the result is a tensor
    ranks = [t.rank if t is not None else 0 for t in op.operand_types]
    partials = {s.unreduced for s, r in zip(ins, ranks, strict=True) if r == rank}
    keep_partial: tuple[str, ...] = ()
    if op.name in LINEAR_UNARY and len(ins) == 1:
        keep_partial = ins[0].unreduced
    elif op.name in LINEAR_NARY and len(partials) == 1 and next(iter(partials)):
        keep_partial = next(iter(partials))
    target = merge(ins, ranks, rank, w.sizes)
    if not manual:
        dims = w.hints.preferred_dims(w.frame, op.results[0], op.result_type(0), list(target.dims), set(target.axes))
        target = with_dims(target, dims)
    for v, t, s, r in zip(op.operands, op.operand_types, ins, ranks, strict=True):
        if r == rank:
            src = s if not keep_partial else with_dims(s, s.dims)
            w.reshard(v, t, src, target, mult, "operand")
    out = with_dims(target, target.dims, keep_partial)
    cost_simple(w, op, [with_dims(s, s.dims) for s in ins], [out] * len(op.results), mult)
    return [out] * len(op.results)


# --- contractions


def _dot(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    lt, rt = op.operand_type(0), op.operand_type(1)
    ot = op.result_type(0)
    L = w.resolve_partial(op.operands[0], lt, ins[0], mult, "dot operand")
    R = w.resolve_partial(op.operands[1], rt, ins[1], mult, "dot operand")
    if not manual:
        L, R = _honour_requests(w, op, L, R, mult)
    lc = op.attrs["lhs_contract"]
    batch, contract, lfree, rfree, used = _dot_axes(w, op, L, R)
    out_dims = batch + lfree + rfree
    if not manual:
        out_dims = w.hints.preferred_dims(w.frame, op.results[0], ot, out_dims, used)
        nb, nl = len(batch), len(lfree)
        batch, lfree, rfree = out_dims[:nb], out_dims[nb:nb + nl], out_dims[nb + nl:]
    _split_one_sided_contractions(w, op, L, R, contract, used, w.sizes.local_bytes(ot, with_dims(L, out_dims)))
    Lt, Rt = _dot_operand_targets(op, L, R, batch, contract, lfree, rfree)
    w.reshard(op.operands[0], lt, L, Lt, mult, "dot lhs")
    w.reshard(op.operands[1], rt, R, Rt, mult, "dot rhs")
    partial = tuple(a for c in contract for a in c)
    out = with_dims(L, out_dims, partial)
    out_shape = w.sizes.local_shape(ot, out)
    contract_local = math.prod(w.sizes.local_shape(lt, Lt)[i] for i in lc)
    flops = 2.0 * math.prod(out_shape) * contract_local
    lb_bytes, rb_bytes = w.sizes.local_bytes(lt, Lt), w.sizes.local_bytes(rt, Rt)
    ob = w.sizes.local_bytes(ot, out)
    # a contraction reads both operands and writes its result (elementwise producers and
    # consumers may fuse into it, but they move at least as many bytes)
    w.op_node(op, flops, lb_bytes + rb_bytes + ob, lb_bytes + rb_bytes + ob, mult)
    return [out]


def _honour_requests(w: Propagator, op: Op, L: Sharding, R: Sharding, mult: int) -> tuple[Sharding, Sharding]:
    """Reshard each operand toward what constraints on the dot's result request (`hints.py`)."""
    lt, rt = op.operand_type(0), op.operand_type(1)
    ob = op.result_type(0).bytes / max(1, w.sizes.n(L.axes + R.axes))
    for k, v, t in ((0, op.operands[0], lt), (1, op.operands[1], rt)):
        cur = L if k == 0 else R
        want = w.hints.requested(w.frame, v, t, cur, ob)
        if want != cur:
            w.reshard(v, t, cur, want, mult, "dot operand (backward request)", cause="request")
            if k == 0:
                L = want
            else:
                R = want
    return L, R


def _dot_axes(w: Propagator, op: Op, L: Sharding, R: Sharding):
    """Axes of the batch, contracted (both sides split) and free dimensions, each axis used once."""
    lb, rb, lc, rc = op.attrs["lhs_batch"], op.attrs["rhs_batch"], op.attrs["lhs_contract"], op.attrs["rhs_contract"]
    lf, rf = dot_free_dims(op)
    n = w.sizes.n
    used: set[str] = set()

    def take(axes: tuple[str, ...]) -> tuple[str, ...]:
        keep = []
        for a in axes:
            if a in used:
                break
            keep.append(a)
        used.update(keep)
        return tuple(keep)

    batch = []
    for i, j in zip(lb, rb, strict=True):
        la, ra = L.dims[i], R.dims[j]
        batch.append(take(la if (la == ra or not ra or (la and n(la) >= n(ra))) else ra))
    common = [tuple(a for a in L.dims[i] if a in R.dims[j]) for i, j in zip(lc, rc, strict=True)]
    contract = [take(c) for c in common]
    lfree = [take(L.dims[d]) for d in lf]
    rfree = [take(R.dims[d]) for d in rf]
    return batch, contract, lfree, rfree, used


def _split_one_sided_contractions(w: Propagator, op: Op, L: Sharding, R: Sharding,
                                  contract: list[tuple[str, ...]], used: set[str], out_local: float) -> None:
    """A contraction axis only one operand splits: gather that operand, or slice the other one and
    reduce the result, whichever moves fewer bytes (the latter adds the axis to `contract`)."""
    lt, rt = op.operand_types
    for k, (i, j) in enumerate(zip(op.attrs["lhs_contract"], op.attrs["rhs_contract"], strict=True)):
        for side_axes in (L.dims[i], R.dims[j]):
            for a in side_axes:
                if a in used:
                    continue
                na = axis_size(w.sizes.sizes, a)
                gather_side = lt if side_axes is L.dims[i] else rt
                gather_sh = L if side_axes is L.dims[i] else R
                gather_cost = w.sizes.local_bytes(gather_side, gather_sh) * (na - 1)
                reduce_cost = 2 * out_local * (na - 1) / na
                if reduce_cost < gather_cost:
                    contract[k] = contract[k] + (a,)
                    used.add(a)


def _dot_operand_targets(op: Op, L: Sharding, R: Sharding, batch, contract, lfree, rfree) -> tuple[Sharding, Sharding]:
    """The shardings the dot reads its operands in."""
    lt, rt = op.operand_type(0), op.operand_type(1)
    lb, rb, lc, rc = op.attrs["lhs_batch"], op.attrs["rhs_batch"], op.attrs["lhs_contract"], op.attrs["rhs_contract"]
    lf, rf = dot_free_dims(op)
    Lw: list = [()] * lt.rank
    Rw: list = [()] * rt.rank
    for k, (i, j) in enumerate(zip(lb, rb, strict=True)):
        Lw[i] = Rw[j] = batch[k]
    for k, (i, j) in enumerate(zip(lc, rc, strict=True)):
        Lw[i] = Rw[j] = contract[k]
    for k, d in enumerate(lf):
        Lw[d] = lfree[k]
    for k, d in enumerate(rf):
        Rw[d] = rfree[k]
    return with_dims(L, Lw), with_dims(R, Rw)


def _reduce(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    dims = op.attrs.get("dimensions", ())
    ins = [w.resolve_partial(v, t, s, mult, "reduce")
           for v, t, s in zip(op.operands, op.operand_types, ins, strict=True)]
    src = ins[0]
    t0 = op.operand_type(0)
    reduced_axes = tuple(a for d in dims if d < len(src.dims) for a in src.dims[d])
    out_dims = tuple(src.dims[d] for d in range(len(src.dims)) if d not in dims) if len(src.dims) == t0.rank else ()
    outs = [with_dims(src, out_dims) if t is not None and t.rank == len(out_dims) else _rep_of(t)
            for t in op.result_types]
    # a reduction reads its input at least once, fused or not (possibly before an upcast that
    # fused into it: count at most 2 bytes per element)
    first = math.prod(w.sizes.local_shape(t0, ins[0])) * min(t0.itemsize, 2)
    cost_simple(w, op, ins, outs, mult, min_bytes=first)
    if reduced_axes and not manual:
        ob = sum(w.sizes.local_bytes(t, s) for t, s in zip(op.result_types, outs, strict=True))
        nn = w.sizes.n(reduced_axes)
        w.collective("all-reduce", reduced_axes, ob, 2 * ob * (nn - 1) / nn, mult, cause="sharded-reduce",
                     result_bytes=ob, reason="reduce over a sharded dimension", deps=(len(w.nodes) - 1,))
    return outs


# --- layout and data movement


def _transpose(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    perm = op.attrs["permutation"]
    s = ins[0]
    out = with_dims(s, [s.dims[p] for p in perm], s.unreduced) if len(s.dims) == len(perm) else replicated(len(perm))
    cost_simple(w, op, ins, [out], mult, 0.0)
    return [out]


def _reshape(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    """Axes follow the most major non-unit dimension of each merged or split group while they
    divide the output dimensions; axes that cannot follow are gathered first."""
    src_t, dst_t = op.operand_type(0), op.result_type(0)
    s = ins[0]
    out_dims: list[tuple[str, ...]] = [() for _ in dst_t.shape]
    lost: list[str] = []
    if len(s.dims) == src_t.rank and s.axes:
        for (i0, i1), (o0, o1) in reshape_groups(src_t.shape, dst_t.shape):
            axes_in = [a for d in range(i0, i1) for a in s.dims[d]]
            if not axes_in:
                continue
            # a merged dimension keeps only the sharding of its most major non-unit dimension
            real = [d for d in range(i0, i1) if src_t.shape[d] != 1] or [i0]
            lost.extend(a for d in range(i0, i1) if d != real[0] for a in s.dims[d])
            lost.extend(_hand_axes(w, s.dims[real[0]], dst_t, out_dims, o0, o1))
    if lost:
        kept = with_dims(s, [tuple(a for a in d if a not in lost) for d in s.dims], s.unreduced)
        w.reshard(op.operands[0], src_t, s, kept, mult, "reshape")
    return [with_dims(s, out_dims, s.unreduced)]


def _hand_axes(w: Propagator, axes_in: tuple[str, ...], dst_t: TensorType, out_dims: list[tuple[str, ...]],
               o0: int, o1: int) -> list[str]:
    """Hand `axes_in` to output dims [o0, o1), major to minor, while they divide; returns the
    axes that found no dimension."""
    lost = []
    d = o0
    for a in axes_in:
        na = axis_size(w.sizes.sizes, a)
        while d < o1 and dst_t.shape[d] % (w.sizes.n(out_dims[d]) * na) != 0:
            if out_dims[d]:
                break
            d += 1
        if d < o1 and dst_t.shape[d] % (w.sizes.n(out_dims[d]) * na) == 0:
            out_dims[d] = out_dims[d] + (a,)
        else:
            lost.append(a)
    return lost


def _broadcast(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    bd = op.attrs["broadcast_dimensions"]
    src_t, dst_t = op.operand_type(0), op.result_type(0)
    s = w.resolve_partial(op.operands[0], src_t, ins[0], mult, "broadcast")
    dims: list[tuple[str, ...]] = [() for _ in dst_t.shape]
    if len(s.dims) == src_t.rank:
        for i, d in enumerate(bd):
            if src_t.shape[i] == dst_t.shape[d]:
                dims[d] = s.dims[i]
    out = with_dims(s, dims)
    cost_simple(w, op, [s], [out], mult, 0.0)
    return [out]


def _concatenate(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    dim = op.attrs["dimension"]
    rank = op.result_type(0).rank
    ins = [w.resolve_partial(v, t, s, mult, "concatenate")
           for v, t, s in zip(op.operands, op.operand_types, ins, strict=True)]
    target = merge(ins, [rank] * len(ins), rank, w.sizes)
    target = with_dims(target, [() if i == dim else d for i, d in enumerate(target.dims)])
    for v, t, s in zip(op.operands, op.operand_types, ins, strict=True):
        w.reshard(v, t, s, target, mult, "concatenate")
    cost_simple(w, op, [target] * len(ins), [target], mult, 0.0)
    return [target]


def _slice_like(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    """slice / dynamic_slice / pad / reverse: dimensions that change size lose their sharding, but
    for a pad that only appends to a dimension: the partitioner pads each shard in place."""
    src_t, dst_t = op.operand_type(0), op.result_type(0)
    s = w.resolve_partial(op.operands[0], src_t, ins[0], mult, "slice")
    if len(s.dims) != src_t.rank or src_t.rank != dst_t.rank:
        return [replicated(dst_t.rank)]
    changed = [(src_t.shape[i] != dst_t.shape[i] and not _appended(op, i)) or op.name == "stablehlo.reverse"
               for i in range(src_t.rank)]
    kept = with_dims(s, [() if c else d for c, d in zip(changed, s.dims, strict=True)])
    w.reshard(op.operands[0], src_t, s, kept, mult, "slice")
    out = fit(kept, dst_t, w.sizes)
    cost_simple(w, op, [kept], [out], mult, 0.0)
    return [out]


def _appended(op: Op, dim: int) -> bool:
    """Whether `op` is a pad that only appends elements to `dim` (none before, none between).

    A pad of a sharded dimension partitions in place: libtpu pads the operand's shards to the
    result's shard boundaries, each device padding its own rows (v5e:4x4, 32,760 tokens padded to
    32,768 and sharded 16 ways: the token projection computes 2,048 rows per device, no
    collective; tests/stage1/test_dag.py).
    """
    return (op.name == "stablehlo.pad" and op.attrs["edge_padding_low"][dim] == 0
            and op.attrs["interior_padding"][dim] == 0)


def _dynamic_update_slice(w: Propagator, op: Op, ins: list[Sharding], mult: int,
                          manual: bool) -> list[Sharding]:
    t0, tu = op.operand_type(0), op.operand_type(1)
    base = w.resolve_partial(op.operands[0], t0, ins[0], mult, "update")
    upd = w.resolve_partial(op.operands[1], tu, ins[1], mult, "update")
    changed = [t0.shape[i] != tu.shape[i] for i in range(t0.rank)]
    base = with_dims(base, [() if c else d for c, d in zip(changed, base.dims, strict=True)])
    w.reshard(op.operands[0], t0, ins[0], base, mult, "update")
    w.reshard(op.operands[1], tu, upd, base, mult, "update")
    cost_simple(w, op, [base, base], [base], mult, 0.0)
    return [base]


def _constraint(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    t = op.result_types[0]
    target = fit(op.attrs["sharding"], t, w.sizes) if t is not None else replicated(0)
    if manual:
        return [_rep_of(t)]
    w.reshard(op.operands[0], t, ins[0], target, mult, "sharding constraint")
    if op.operands[0] in w.producer:
        w.producer[op.results[0]] = w.producer[op.operands[0]]
    return [target]


# --- kernels, shard_map bodies, collectives written in the program


def _custom_call(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    """An opaque kernel. Outside shard_map its operands must arrive replicated (no sharding rule)."""
    given = op.attrs.get("result_shardings")
    if not manual:
        for v, t, s in zip(op.operands, op.operand_types, ins, strict=True):
            if t is not None:
                w.reshard(v, t, s, replicated(t.rank), mult, f"kernel boundary ({op.attrs['target']})")
        ins = [replicated(len(s.dims)) for s in ins]
    outs = [
        fit(given[k], t, w.sizes) if (given and k < len(given) and t is not None) else _rep_of(t)
        for k, t in enumerate(op.result_types)
    ]
    lin = tuple(TensorType(w.sizes.local_shape(t, s), t.dtype) if t else None
                for t, s in zip(op.operand_types, ins, strict=True))
    lout = tuple(TensorType(w.sizes.local_shape(t, s), t.dtype) if t else None
                 for t, s in zip(op.result_types, outs, strict=True))
    io = sum(t.bytes for t in lin + lout if t is not None)
    cost = w.kernel_cost(KernelCall(op.attrs["target"], lin, lout, manual)) if w.kernel_cost else None
    flops = cost.flops if cost and cost.flops is not None else 0.0
    hbm = cost.hbm_bytes if cost and cost.hbm_bytes is not None else io
    if cost is None:
        w.note(f"no cost for kernel {op.attrs['target']}; counted its I/O bytes only")
    # nothing fuses into an opaque kernel: the bytes its cost hook reports are all unavoidable
    w.op_node(op, flops, hbm, hbm, mult, opaque=True, seconds=cost.seconds if cost else None,
              kernel=cost.kernel if cost else None)
    return outs


def _manual(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    """A shard_map: operands reshard to `in_shardings`, the body runs on local shapes."""
    in_sh, out_sh = op.attrs["in_shardings"], op.attrs["out_shardings"]
    body = op.regions[0]
    has_kernel = contains_op(w.module.funcs, body, "stablehlo.custom_call")
    reason = "kernel boundary (shard_map)" if has_kernel else "shard_map boundary"
    for v, t, s, want in zip(op.operands, op.operand_types, ins, in_sh, strict=True):
        if t is not None:
            w.reshard(v, t, s, fit(want, t, w.sizes), mult, reason)
    # the body's arguments are the operands' shards: a parameter stays a parameter inside
    w.prefetchable.update((w.frame, a) for a, v in zip(body.args, op.operands, strict=True)
                          if (w.frame, v) in w.prefetchable)
    w.region(body, [_rep_of(t) for t in body.arg_types], mult, manual=True)
    return [fit(s, t, w.sizes) if t is not None else replicated(0)
            for s, t in zip(out_sh, op.result_types, strict=True)]


def _collective(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    """A collective written in the program: its groups mapped back to mesh axes."""
    c = op.attrs["collective"]
    axes = group_axes(c.replica_groups, w.mesh) if c.replica_groups else ()
    if c.kind == "collective-permute" and c.source_target_pairs:
        axes = group_axes(tuple(tuple(p) for p in c.source_target_pairs), w.mesh)
    n = max((len(g) for g in c.replica_groups), default=w.sizes.n(axes) if axes else 1)
    t = op.operand_types[0]
    s = ins[0]
    payload = w.sizes.local_bytes(t, s)
    recv = {
        "all-reduce": 2 * payload * (n - 1) / n,
        "all-gather": payload * (n - 1),
        "reduce-scatter": payload * (n - 1) / n,
        "all-to-all": payload * (n - 1) / n,
    }.get(c.kind, payload)
    outs = [_rep_of(t) if manual else with_dims(s, s.dims) for t in op.result_types]
    if not manual and c.kind in ("all-gather", "reduce-scatter", "all-to-all"):
        outs = [_rep_of(t) for t in op.result_types]
    result_bytes = sum(w.sizes.local_bytes(t, o) for t, o in zip(op.result_types, outs, strict=True))
    i = w.collective(c.kind, axes, payload, recv, mult, cause="written", result_bytes=result_bytes,
                     reason="written in the program", deps=w.deps(op.operands))
    for r in op.results:
        w.producer[r] = i
    return outs


# --- regions: loops, calls, branches


def _while(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    trips = op.attrs.get("trip_count")
    if trips is None:
        w.note("a while loop without a recognisable trip count was counted once")
        trips = 1
    carried = [w.resolve_partial(v, t, s, mult, "loop carry")
               for v, t, s in zip(op.operands, op.operand_types, ins, strict=True)]
    body = op.regions[1]
    ret = body.ops[-1] if body.ops else None
    # prefetchable loop invariants (the stacked weights of a scan): passed through unchanged
    w.prefetchable.update((w.frame, a) for k, a in enumerate(body.args)
                          if ret is not None and k < len(ret.operands) and ret.operands[k] == a
                          and (w.frame, op.operands[k]) in w.prefetchable)
    returned = w.region(body, carried, mult * trips, manual)
    for k, (t, want) in enumerate(zip(op.result_types, carried, strict=True)):
        if k < len(returned) and t is not None and ret is not None:
            w.reshard(ret.operands[k], t, returned[k], want, mult * trips, "loop carry")
    return carried


def _call(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    f = w.module.funcs[op.attrs["callee"]]
    saved = w.frame
    prefetchable_in = [(saved, v) in w.prefetchable for v in op.operands]
    w.frames += 1
    w.frame = w.frames
    w.prefetchable.update((w.frame, a) for a, p in zip(f.body.args, prefetchable_in, strict=True) if p)
    returned = w.region(f.body, ins, mult, manual)
    prefetchable_out = [(w.frame, v) in w.prefetchable for v in (f.body.ops[-1].operands if f.body.ops else ())]
    w.frame = saved
    w.prefetchable.update((saved, r) for r, p in zip(op.results, prefetchable_out, strict=True) if p)
    ret = f.body.ops[-1] if f.body.ops else None
    if ret is not None:
        for r, v in zip(op.results, ret.operands, strict=True):
            if v in w.producer:
                w.producer[r] = w.producer[v]
    return [returned[k] if k < len(returned) else _rep_of(t) for k, t in enumerate(op.result_types)]


def _case(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    outs: list[Sharding] = []
    for r in op.regions:  # one branch runs: walked until one returns shardings
        outs = outs or w.region(r, [], mult, manual)
    return outs or [_rep_of(t) for t in op.result_types]


def _other(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    """Ops without a rule (gather, scatter, sort, ...): first operand's sharding if shapes agree."""
    outs = []
    first = op.operand_types[0] if op.operand_types else None
    for t in op.result_types:
        if t is not None and first is not None and first.shape == t.shape:
            outs.append(with_dims(ins[0], ins[0].dims))
        else:
            outs.append(_rep_of(t))
    cost_simple(w, op, ins, outs, mult)
    return outs


def window_reads(size: int, out_size: int, kernel: int, low: int, stride: int = 1, rhs_dilation: int = 1) -> int:
    """The (output position, kernel tap) pairs of one spatial dimension whose tap reads the input
    rather than its padding: `size` input positions, `low` padded below, `out_size` outputs."""
    reads = 0
    for k in range(kernel):
        offset = k * rhs_dilation - low  # output o reads input o * stride + offset
        first = -(offset // stride) if offset < 0 else 0  # ceil(-offset / stride)
        last = min(out_size - 1, (size - 1 - offset) // stride) if size - 1 - offset >= 0 else -1
        reads += max(0, last - first + 1)
    return reads


def _convolution(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    """A convolution: each device computes the output positions of its shard of the input's batch and
    spatial dimensions with the whole kernel and every input feature (the input's feature dimension
    and the kernel are gathered; the halo the partitioner exchanges at a shard's edge is not costed),
    2 flops per multiply-add over the taps that read the input, not its padding."""
    a = op.attrs
    lt, kt, ot = op.operand_type(0), op.operand_type(1), op.result_type(0)
    L = w.resolve_partial(op.operands[0], lt, ins[0], mult, "convolution input")
    K = w.resolve_partial(op.operands[1], kt, ins[1], mult, "convolution kernel")
    dims = list(L.dims) if len(L.dims) == lt.rank else [() for _ in range(lt.rank)]
    dims[a["input_feature"]] = ()
    Lt, Kt = with_dims(L, dims), replicated(kt.rank)
    w.reshard(op.operands[0], lt, L, Lt, mult, "convolution input")
    w.reshard(op.operands[1], kt, K, Kt, mult, "convolution kernel")
    out_dims: list[tuple[str, ...]] = [() for _ in range(ot.rank)]
    out_dims[a["output_batch"]] = Lt.dims[a["input_batch"]]
    for i, o in zip(a["input_spatial"], a["output_spatial"], strict=True):
        out_dims[o] = Lt.dims[i]
    out = with_dims(Lt, out_dims)
    taps = 1
    for d, (i, k, o) in enumerate(zip(a["input_spatial"], a["kernel_spatial"], a["output_spatial"], strict=True)):
        if a["lhs_dilation"][d] != 1:  # a transposed convolution: every tap of every output
            taps *= kt.shape[k] * ot.shape[o]
        else:
            taps *= window_reads(lt.shape[i], ot.shape[o], kt.shape[k], a["padding"][d][0], a["window_strides"][d],
                                 a["rhs_dilation"][d])
    macs = ot.shape[a["output_batch"]] * ot.shape[a["output_feature"]] * kt.shape[a["kernel_input_feature"]] * taps
    flops = 2.0 * macs / w.sizes.n(out.axes)
    moved = w.sizes.local_bytes(lt, Lt) + w.sizes.local_bytes(kt, Kt) + w.sizes.local_bytes(ot, out)
    w.op_node(op, flops, moved, moved, mult)
    return [out]


def _plumbing(w: Propagator, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
    return [_rep_of(t) for t in op.result_types]


RULES: dict[str, Rule] = {
    "stablehlo.dot_general": _dot,
    "stablehlo.convolution": _convolution,
    "stablehlo.reduce": _reduce,
    "stablehlo.transpose": _transpose,
    "stablehlo.reshape": _reshape,
    "stablehlo.broadcast_in_dim": _broadcast,
    "stablehlo.concatenate": _concatenate,
    "stablehlo.slice": _slice_like,
    "stablehlo.dynamic_slice": _slice_like,
    "stablehlo.pad": _slice_like,
    "stablehlo.reverse": _slice_like,
    "stablehlo.dynamic_update_slice": _dynamic_update_slice,
    "sdy.sharding_constraint": _constraint,
    "sdy.reshard": _constraint,
    "stablehlo.custom_call": _custom_call,
    "sdy.manual_computation": _manual,
    "stablehlo.while": _while,
    "func.call": _call,
    "stablehlo.case": _case,
    "stablehlo.if": _case,
    "stablehlo.constant": _plumbing,
    "stablehlo.iota": _plumbing,
}


def rule_for(op: Op) -> Rule:
    """The sharding rule of `op`: by name, else collectives written in the program, elementwise
    ops (every operand of the result's shape) and the fallback."""
    rule = RULES.get(op.name)
    if rule is not None:
        return rule
    if op.name in COLLECTIVE_OPS:
        return _collective
    if not op.regions and same_shape(op):
        return _elementwise
    return _other
