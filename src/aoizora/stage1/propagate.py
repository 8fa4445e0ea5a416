"""The sharding propagator: the per-device compute and the collectives the partitioner will insert.

Why: a lowered module only states the shardings the program asks for (arguments, results,
constraints, shard_map boundaries). Every collective outside shard_map bodies is the SPMD
partitioner's decision, made at compile time. Stage 1 predicts those collectives from a small,
explicit set of rules so that strategies can be ranked without compiling:

* **resharding** a value between two shardings: an axis that moves from one dimension to
  another is an all-to-all over it; an axis that disappears is an all-gather over it; an axis
  that only appears is a local slice (no communication); pending partial sums become an
  all-reduce, or a reduce-scatter when the target shards a dimension over the same axis;
* **contractions over a sharded dimension** (`dot_general`): both operands split the
  contraction over an axis -> local dot, then partial sums (all-reduce / reduce-scatter when
  consumed); only one operand split -> the cheaper of all-gathering it or slicing the other
  operand and all-reducing the result; `reduce` over a sharded dimension -> all-reduce;
* **opaque kernel boundaries**: operands of a custom call outside shard_map must arrive
  replicated; operands of a shard_map (which is how kernels such as splash attention are
  written) must arrive in its `in_shardings`;
* **explicit collectives** written inside shard_map bodies, with their replica groups mapped
  back to mesh axes.

Shardings of intermediate values come from a forward propagation through elementwise ops,
dot_general, reshape, transpose, reduce, broadcast, concatenate, slices and pads (conflicts
resolved by keeping the most sharded operand; the rules per op are in `op_rules.py`), reset by
every sharding constraint, and informed by two backward hints (`hints.py`: requests and
preferences). Shardy also propagates backwards in full; this forward pass is cheaper and is
checked against compiled HLO in the tests. Loop bodies (scans) are walked once and scaled by
their trip count.

The propagator knows nothing about memory: as it walks it emits value events (`events.py`) —
regions entered and left, ops started and finished with their per-device operand and result
bytes, collectives issued — which the HBM model (`hbm.py`) turns into buffers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aoizora.stage1.dag import CommNode, KernelCostHook, Node, OpNode
from aoizora.stage1.events import (
    CollectiveCause,
    CollectiveIssued,
    OpFinished,
    OpStarted,
    RegionEntered,
    RegionLeft,
    Value,
    ValueEvent,
)
from aoizora.stage1.hints import BackwardHints
from aoizora.stage1.ir import RETURN_OPS, IRModule, Op, Region, Sharding, TensorType
from aoizora.stage1.op_rules import rule_for
from aoizora.stage1.shardings import AxisSizes, add_axes, fit, replicated, with_dims

# Ops that keep a value prefetchable (made from parameters alone): slices and layout.
PREFETCH_PRESERVING = {
    "stablehlo.slice", "stablehlo.dynamic_slice", "stablehlo.reshape", "stablehlo.transpose",
    "stablehlo.convert", "stablehlo.broadcast_in_dim", "sdy.sharding_constraint",
}


@dataclass
class Propagation:
    """What the propagator found for one program (per device, one execution)."""

    mesh_axes: tuple[tuple[str, int], ...]
    nodes: list[Node]
    argument_bytes: float
    output_bytes: float
    notes: list[str] = field(default_factory=list)


class ShardingPropagator:
    """One walk of a program (`run`): shardings forward, nodes out, value events to `listener`."""

    def __init__(self, module: IRModule, kernel_cost: KernelCostHook | None,
                 listener: Callable[[ValueEvent], None] | None = None):
        self.module = module
        # where value events go as they happen (e.g. `HbmModel.feed`); streamed, not kept: a Wan
        # program has some 10^5 of them
        self.emit: Callable[[ValueEvent], None] = listener or (lambda event: None)
        self.mesh = module.mesh
        self.sizes = AxisSizes(self.mesh.sizes)
        self.kernel_cost = kernel_cost
        self.nodes: list[Node] = []
        self.notes: list[str] = []
        self.producer: dict[int, int] = {}  # value -> index of the node that computes it
        self.frame = 0  # one per function-call walk: value ids repeat across calls of one callee
        self.frames = 0
        self.hints = BackwardHints(self.sizes)
        self._resharded: set[tuple[Any, ...]] = set()  # reshards already emitted (the compiler CSEs them)
        # (frame, value) made from parameters alone (parameters, loop invariants and slices of
        # them): available before any compute of their region, so the scheduler may issue their
        # all-gathers early (prefetchable collectives)
        self.prefetchable: set[tuple[int, int]] = set()

    # -- nodes and events
    def deps(self, values: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted({self.producer[v] for v in values if v in self.producer}))

    def op_node(self, op: Op, flops: float, hbm: float, min_hbm: float, mult: int, **kw: Any) -> int:
        i = len(self.nodes)
        self.nodes.append(OpNode(i, op.name, flops, hbm, min_hbm, mult, self.deps(op.operands), **kw))
        for r in op.results:
            self.producer[r] = i
        return i

    def collective(self, kind: str, axes: tuple[str, ...], payload: float, recv: float, mult: int, *,
                   cause: CollectiveCause, result_bytes: float, reason: str, deps: tuple[int, ...] = (),
                   prefetchable: bool = False) -> int:
        """Add a collective node and report it (`CollectiveIssued`); returns its index."""
        i = len(self.nodes)
        n = self.sizes.n(axes) if axes else 1
        self.nodes.append(CommNode(i, kind, tuple(axes), n, payload, recv, mult, cause == "written", reason, deps,
                                   prefetchable))
        self.emit(CollectiveIssued(kind, payload, result_bytes, cause))
        return i

    def value(self, v: int, t: TensorType | None, sh: Sharding | None) -> Value:
        return Value(v, self.sizes.local_bytes(t, sh), (self.frame, v) in self.prefetchable)

    def note(self, text: str) -> None:
        self.notes.append(text)

    # -- resharding
    def reshard(self, value: int, t: TensorType | None, src: Sharding, dst: Sharding, mult: int, reason: str,
                cause: CollectiveCause = "reshard") -> None:
        """Emit the collectives that turn `src` into `dst`."""
        if t is None or t.rank != len(dst.dims):
            return
        src = src if len(src.dims) == t.rank else replicated(t.rank)
        key = (self.frame, value, src, with_dims(dst, dst.dims))
        if key in self._resharded:  # the compiler emits one collective for identical reshards (CSE)
            return
        self._resharded.add(key)
        deps = self.deps((value,))
        # axes that only appear are a local slice: take it first, it shrinks everything after
        src_axes = set(src.axes) | set(src.unreduced)
        fresh = tuple(a for a in dst.axes if a not in src_axes)
        if fresh:
            src = add_axes(src, dst, fresh)
        if src.unreduced:
            src = self._sum_partials(t, src, dst, mult, reason, cause, deps)
        cur = self.sizes.local_bytes(t, src)
        prefetchable = (self.frame, value) in self.prefetchable
        where_src = {a: i for i, d in enumerate(src.dims) for a in d}
        where_dst = {a: i for i, d in enumerate(dst.dims) for a in d}
        moved = tuple(a for a, i in where_src.items() if a in where_dst and where_dst[a] != i)
        removed = tuple(a for a in where_src if a not in where_dst)
        if moved:
            n = self.sizes.n(moved)
            self.collective("all-to-all", moved, cur, cur * (n - 1) / n, mult, cause=cause, result_bytes=cur,
                            reason=f"{reason}: move {'+'.join(moved)}", deps=deps, prefetchable=prefetchable)
        if removed:
            n = self.sizes.n(removed)
            self.collective("all-gather", removed, cur, cur * (n - 1), mult, cause=cause, result_bytes=cur * n,
                            reason=f"{reason}: gather {'+'.join(removed)}", deps=deps, prefetchable=prefetchable)

    def _sum_partials(self, t: TensorType, src: Sharding, dst: Sharding, mult: int, reason: str,
                      cause: CollectiveCause, deps: tuple[int, ...]) -> Sharding:
        """Pending partial sums: reduce-scatter over the axes `dst` shards a dimension over,
        all-reduce over the others; returns `src` without unreduced axes."""
        cur = self.sizes.local_bytes(t, src)
        dst_axes = set(dst.axes)
        scatter = tuple(a for a in src.unreduced if a in dst_axes)
        reduce = tuple(a for a in src.unreduced if a not in dst_axes)
        if scatter:
            n = self.sizes.n(scatter)
            scattered = add_axes(src, dst, scatter)  # the scattered axis now shards its target dimension
            after = self.sizes.local_bytes(t, scattered)
            self.collective("reduce-scatter", scatter, cur, cur * (n - 1) / n, mult, cause=cause, result_bytes=after,
                            reason=f"{reason}: partial sums", deps=deps)
            src, cur = scattered, after
        if reduce:
            n = self.sizes.n(reduce)
            self.collective("all-reduce", reduce, cur, 2 * cur * (n - 1) / n, mult, cause=cause, result_bytes=cur,
                            reason=f"{reason}: partial sums", deps=deps)
        return with_dims(src, src.dims)

    def resolve_partial(self, v: int, t: TensorType | None, s: Sharding, mult: int, reason: str) -> Sharding:
        """`s` with its pending partial sums reduced (a collective when it has any)."""
        if not s.unreduced or t is None:
            return s
        target = with_dims(s, s.dims)
        self.reshard(v, t, s, target, mult, reason)
        return target

    # -- walking
    def run(self) -> Propagation:
        f = self.module.entry
        shardings = [
            fit(s, t, self.sizes) if (s is not None and t is not None) else replicated(t.rank if t else 0)
            for s, t in zip(f.arg_shardings, f.arg_types, strict=True)
        ]
        self.prefetchable.update((self.frame, a) for a in f.body.args)
        arg_bytes = sum(self.sizes.local_bytes(t, s) for t, s in zip(f.arg_types, shardings, strict=True))
        results = self.region(f.body, shardings, 1, manual=False)
        out_bytes = 0.0
        ret = f.body.ops[-1] if f.body.ops else None
        for k, (t, want) in enumerate(zip(f.result_types, f.result_shardings, strict=True)):
            have = results[k] if k < len(results) else replicated(t.rank if t else 0)
            target = fit(want, t, self.sizes) if (want is not None and t is not None) else with_dims(have, have.dims)
            if t is not None:
                self.reshard(ret.operands[k] if ret else -1, t, have, target, 1, "result")
                out_bytes += self.sizes.local_bytes(t, target)
        return Propagation(self.mesh.axes, self.nodes, arg_bytes, out_bytes, self.notes)

    def region(self, region: Region, arg_shardings: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
        """Walk a region (reporting it as value events); returns the shardings it returns."""
        env: dict[int, Sharding] = dict(zip(region.args, arg_shardings, strict=True))
        self.hints.collect_requests(region, self.frame)
        self.hints.collect_preferences(region, self.frame)
        self.emit(RegionEntered(region, tuple(self.value(a, t, env.get(a))
                                                       for a, t in zip(region.args, region.arg_types, strict=True))))
        for op in region.ops:
            if op.name in RETURN_OPS:
                returned = [env.get(v, replicated(t.rank if t else 0))
                            for v, t in zip(op.operands, op.operand_types, strict=True)]
                self.emit(RegionLeft(returned=True))
                return returned
            ins = self._operand_shardings(op, env, manual)
            self.emit(OpStarted(op, tuple(self.value(v, t, s)
                                          for v, t, s in zip(op.operands, op.operand_types, ins, strict=True))))
            outs = self.op(op, ins, mult, manual)
            for r, _t, s in zip(op.results, op.result_types, outs, strict=True):
                env[r] = s
            if op.name in PREFETCH_PRESERVING and op.operands and (self.frame, op.operands[0]) in self.prefetchable:
                self.prefetchable.update((self.frame, r) for r in op.results)
            self.emit(OpFinished(op, tuple(self.value(r, t, s)
                                           for r, t, s in zip(op.results, op.result_types, outs, strict=True))))
        self.emit(RegionLeft(returned=False))
        return []

    @staticmethod
    def _operand_shardings(op: Op, env: dict[int, Sharding], manual: bool) -> list[Sharding]:
        """The operands' shardings as the op reads them (replicated inside a shard_map body)."""
        ins = [env.get(v, replicated(t.rank if t else 0)) if t is not None else replicated(0)
               for v, t in zip(op.operands, op.operand_types, strict=True)]
        if manual:
            ins = [replicated(len(s.dims)) for s in ins]
        return ins

    def op(self, op: Op, ins: list[Sharding], mult: int, manual: bool) -> list[Sharding]:
        """Propagate shardings through one op and emit its nodes; returns the result shardings."""
        return rule_for(op)(self, op, ins, mult, manual)
