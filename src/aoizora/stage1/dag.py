"""The prediction DAG: per-device compute and the communication the partitioner will insert.

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
resolved by keeping the most sharded operand), reset by every sharding constraint. Shardy also
propagates backwards; this forward pass is cheaper and is checked against compiled HLO in the
tests. Loop bodies (scans) are walked once and scaled by their trip count.

The same walk is a liveness walk: every buffer it holds (materialized results, loop state,
transients of one op, what libtpu keeps outside its buffer assignment) goes on a
`heap.Timeline`, which packs them as libtpu packs its temp (`memory.py` has the rules).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aoizora.hlo.program import OpaqueCost
from aoizora.stage1.heap import Timeline
from aoizora.stage1.ir import COLLECTIVE_OPS, IRModule, Op, Region, Sharding, TensorType, axis_size, group_axes
from aoizora.workload import KernelCall

# Ops that are pure plumbing (no compute, no HBM traffic of their own).
NO_COST = {
    "stablehlo.constant", "stablehlo.iota", "sdy.sharding_constraint", "func.return", "stablehlo.return",
    "sdy.return", "stablehlo.get_tuple_element", "stablehlo.tuple", "stablehlo.optimization_barrier",
    "stablehlo.reshape", "stablehlo.bitcast_convert",
}
# Ops that keep a value "early" (computable before the region's compute): slices and layout.
EARLY_PASS = {
    "stablehlo.slice", "stablehlo.dynamic_slice", "stablehlo.reshape", "stablehlo.transpose",
    "stablehlo.convert", "stablehlo.broadcast_in_dim", "sdy.sharding_constraint",
}
# Elementwise ops linear in each operand: partial sums pass through them unreduced.
LINEAR_UNARY = {"stablehlo.convert", "stablehlo.negate", "stablehlo.reshape", "stablehlo.transpose"}
LINEAR_NARY = {"stablehlo.add", "stablehlo.subtract"}


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
    score_elements: float | None = None  # an attention kernel's score-matrix elements (OpaqueCost)
    matmul_dim: int | None = None  # an opaque kernel's narrowest matmul dimension (OpaqueCost)


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
    # collective permutes the walk issued ahead of their op (`_permute_issue_points`)
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
            "argument_bytes": self.argument_bytes,
            "output_bytes": self.output_bytes,
            "peak_temp_bytes": self.peak_temp_bytes,
            "outside_bytes": self.outside_bytes,
            "live_peak_temp_bytes": self.live_peak_temp_bytes,
        }


# --- sharding helpers -------------------------------------------------------------------------


# Ops that only relabel a buffer's elements: the compiler assigns layouts so that they cost no copy
# (except a reshape that moves elements across lanes, see `_relayout`).
VIEW_OPS = {"stablehlo.transpose", "stablehlo.reshape"}

# How far ahead of its first use a gathered weight is fetched, in buffer-writing ops. libtpu's
# depth varies with the program (probes on v5e:2x4, scanned layers of FSDP weights gathered up
# front: 3 of 6 32 MiB weights live at once, 4 of 6 72 MiB ones, all 4 of 4 128 MiB ones); 3
# reproduces the two probes where it holds back. On the 741 Wan 14B programs of the grid the
# compiler accepts, depths 3 to 8 fit its buffer assignments about equally (docs/notebook/memory-model.md,
# "Weights fetched ahead of use, and lane relayouts").
WEIGHT_PREFETCH_OPS = 3

# Fused ops that compute nothing new from a buffer (a view, or values made from constants).
NON_COMPUTING = VIEW_OPS | {"stablehlo.broadcast_in_dim", "stablehlo.constant", "stablehlo.iota", "func.call"}


def _rep(rank: int) -> Sharding:
    return Sharding("", tuple(() for _ in range(rank)))


def _with(sh: Sharding, dims: tuple[tuple[str, ...], ...] | list, unreduced: tuple[str, ...] = ()) -> Sharding:
    return Sharding(sh.mesh, tuple(tuple(d) for d in dims), (), tuple(unreduced))


class _Sizes:
    def __init__(self, sizes: Mapping[str, int]):
        self.sizes = dict(sizes)

    def n(self, axes: tuple[str, ...] | list[str]) -> int:
        return math.prod(axis_size(self.sizes, a) for a in axes)

    def local_shape(self, t: TensorType, sh: Sharding | None) -> tuple[int, ...]:
        if sh is None or len(sh.dims) != t.rank:
            return t.shape
        return tuple(-(-d // self.n(ax)) if ax else d for d, ax in zip(t.shape, sh.dims))

    def local_bytes(self, t: TensorType | None, sh: Sharding | None) -> float:
        if t is None:
            return 0.0
        return math.prod(self.local_shape(t, sh)) * t.itemsize


def _fit(sh: Sharding, t: TensorType, sizes: _Sizes) -> Sharding:
    """Drop axes that do not divide their dimension (the partitioner would pad; we replicate)."""
    if len(sh.dims) != t.rank:
        return _rep(t.rank)
    dims = []
    for d, ax in zip(t.shape, sh.dims):
        keep: list[str] = []
        for a in ax:
            if d % (sizes.n(keep) * axis_size(sizes.sizes, a)) == 0:
                keep.append(a)
            else:
                break
        dims.append(tuple(keep))
    return _with(sh, dims, sh.unreduced)


# --- the walker -------------------------------------------------------------------------------


class _Walker:
    def __init__(self, module: IRModule, kernel_cost: KernelCostHook | None, hoist_permutes: bool = True):
        self.module = module
        self.hoist_permutes = hoist_permutes
        self.hoisted_permutes = 0
        self.mesh = module.mesh
        self.sizes = _Sizes(self.mesh.sizes)
        self.kernel_cost = kernel_cost
        self.nodes: list[Node] = []
        self.producer: dict[int, int] = {}
        self.notes: list[str] = []
        self.frame = 0  # one per function-call walk: value ids repeat across calls of one callee
        self.frames = 0
        self.done: set[tuple[Any, ...]] = set()
        self.demand: dict[tuple[int, int], list[tuple[tuple[str, ...], ...]]] = {}
        self.desire: dict[tuple[int, int], tuple[tuple[str, ...], ...]] = {}
        # values available before any compute of their region (parameters, loop invariants and
        # slices of them): the scheduler may issue their all-gathers early (prefetchable comm).
        # Their gathered buffers are counted at their consumer only: compiled Wan programs hold
        # one layer weight's gather at a time, not the whole layer's (docs/notebook/memory-model.md)
        self.early: set[tuple[int, int]] = set()
        # results of all-gathers of computed values (activations) written in the program: libtpu
        # runs them as async collective fusions, which hold a second buffer of the result outside
        # the buffer assignment while it is live (docs/notebook/memory-model.md, "Async collective fusion buffers").
        # The compiler's HBM check does not count these copies (they go on the timeline as `outside`).
        self.async_gathered: set[tuple[int, int]] = set()
        # the walk's current region: its arguments, live buffers and computed fused values (for
        # `_while`'s loop state and `_manual`'s written arguments)
        self.region_args: set[int] = set()
        self.live_now: dict[int, float] = {}
        self.computed_now: set[int] = set()
        self._kernel_funcs: dict[str, bool] = {}
        # every buffer the walk holds, with the ticks it is live in: libtpu's temp allocation is
        # packed from these (`heap.py`); `walked` says an op's handler walked a region, which
        # then recorded its own buffers
        self.timeline = Timeline()
        self.walked = False

    # -- node emission
    def _deps(self, values: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(sorted({self.producer[v] for v in values if v in self.producer}))

    def op_node(self, op: Op, flops: float, hbm: float, min_hbm: float, mult: int, **kw: Any) -> int:
        i = len(self.nodes)
        self.nodes.append(OpNode(i, op.name, flops, hbm, min_hbm, mult, self._deps(op.operands), **kw))
        for r in op.results:
            self.producer[r] = i
        return i

    def comm(self, kind: str, axes: tuple[str, ...], payload: float, recv: float, mult: int, explicit: bool,
             reason: str, deps: tuple[int, ...] = (), prefetchable: bool = False) -> int:
        i = len(self.nodes)
        n = self.sizes.n(axes) if axes else 1
        self.nodes.append(CommNode(i, kind, tuple(axes), n, payload, recv, mult, explicit, reason, deps, prefetchable))
        return i

    # -- resharding
    def reshard(self, value: int, t: TensorType | None, src: Sharding, dst: Sharding, mult: int, reason: str) -> float:
        """Emit the collectives that turn `src` into `dst`; returns the largest transient buffer."""
        if t is None or t.rank != len(dst.dims):
            return 0.0
        src = src if len(src.dims) == t.rank else _rep(t.rank)
        key = (self.frame, value, src, _with(dst, dst.dims))
        if key in self.done:  # the compiler emits one collective for identical reshards (CSE)
            return 0.0
        self.done.add(key)
        deps = self._deps((value,))
        early = (self.frame, value) in self.early
        transient = 0.0
        # axes that only appear are a local slice: take it first, it shrinks everything after
        src_axes = set(src.axes) | set(src.unreduced)
        fresh = tuple(a for a in dst.axes if a not in src_axes)
        if fresh:
            src = _add_axes(src, dst, fresh)
        cur = self.sizes.local_bytes(t, src)
        if src.unreduced:
            dst_axes = set(dst.axes)
            scatter = tuple(a for a in src.unreduced if a in dst_axes)
            reduce = tuple(a for a in src.unreduced if a not in dst_axes)
            if scatter:
                n = self.sizes.n(scatter)
                self.comm("reduce-scatter", scatter, cur, cur * (n - 1) / n, mult, False, f"{reason}: partial sums", deps)
                # the scattered axis now shards its target dimension
                src = _add_axes(src, dst, scatter)
                cur = self.sizes.local_bytes(t, src)
            if reduce:
                n = self.sizes.n(reduce)
                self.comm("all-reduce", reduce, cur, 2 * cur * (n - 1) / n, mult, False, f"{reason}: partial sums", deps)
                # libtpu's all-reduce also takes a scratch buffer of its payload, outside the assignment
                self.timeline.momentary(cur, outside=True, label=f"all-reduce scratch ({reason})")
            src = _with(src, src.dims)
        where_src = {a: i for i, d in enumerate(src.dims) for a in d}
        where_dst = {a: i for i, d in enumerate(dst.dims) for a in d}
        moved = tuple(a for a, i in where_src.items() if a in where_dst and where_dst[a] != i)
        removed = tuple(a for a in where_src if a not in where_dst)
        if moved:
            n = self.sizes.n(moved)
            self.comm("all-to-all", moved, cur, cur * (n - 1) / n, mult, False, f"{reason}: move {'+'.join(moved)}", deps, early)
            self.timeline.momentary(cur, outside=True, label=f"all-to-all scratch ({reason})")
            transient = max(transient, cur)
        if removed:
            n = self.sizes.n(removed)
            self.comm("all-gather", removed, cur, cur * (n - 1), mult, False, f"{reason}: gather {'+'.join(removed)}", deps, early)
            transient = max(transient, cur * n)
        return transient

    # -- walking
    def run(self) -> Prediction:
        f = self.module.entry
        shardings = [
            _fit(s, t, self.sizes) if (s is not None and t is not None) else _rep(t.rank if t else 0)
            for s, t in zip(f.arg_shardings, f.arg_types)
        ]
        self.early.update((self.frame, a) for a in f.body.args)
        arg_bytes = sum(self.sizes.local_bytes(t, s) for t, s in zip(f.arg_types, shardings))
        results = self.region(f.body, shardings, 1, manual=False)
        out_bytes = 0.0
        ret = f.body.ops[-1] if f.body.ops else None
        for k, (t, want) in enumerate(zip(f.result_types, f.result_shardings)):
            have = results[k] if k < len(results) else _rep(t.rank if t else 0)
            target = _fit(want, t, self.sizes) if (want is not None and t is not None) else _with(have, have.dims)
            if t is not None:
                self.reshard(ret.operands[k] if ret else -1, t, have, target, 1, "result")
                out_bytes += self.sizes.local_bytes(t, target)
        outside = self.timeline.live_peak(outside=True)
        return Prediction(self.mesh.axes, self.nodes, arg_bytes, out_bytes, self.timeline.packed_bytes() + outside,
                          self.notes, outside, self.timeline.live_peak(), self.hoisted_permutes)

    def region(self, region: Region, arg_shardings: list[Sharding], mult: int, manual: bool,
               owned_args: dict[int, float] | None = None) -> list[Sharding]:
        """Walk a region, recording its buffers on the timeline; returns the shardings it returns.

        `owned_args`: arguments written out for this region (bytes), live until their last use in it.
        """
        env: dict[int, Sharding] = dict(zip(region.args, arg_shardings))
        types: dict[int, TensorType | None] = dict(zip(region.args, region.arg_types))
        last_use: dict[int, int] = {}
        for i, op in enumerate(region.ops):
            for v in _uses(op):
                last_use[v] = i
        fused_until, written_out = _fusion_ends(region)
        self._demands(region)
        self._desires(region)
        # A materialized result owns a buffer until its last use. A fused result owns none: the
        # ops its computation ends at compute it, and read the buffers it is made of then
        # (`_fusion_ends`). A view of a buffer (transpose, reshape) keeps that buffer live until the view's
        # last use.
        live: dict[int, float] = {}
        free_at: dict[int, int] = {}
        backing: dict[int, tuple[int, ...]] = {}
        computed: set[int] = set()  # fused results that compute something (not a view)
        # collective permutes start as soon as their operand exists (see `_permute_issue_points`)
        issued_at = _permute_issue_points(region) if self.hoist_permutes else {}
        issued = {r for points in issued_at.values() for r, _, _ in points}
        self.hoisted_permutes += len(issued)

        handles: dict[int, list[int]] = {}  # a live buffer's timeline entries
        # A weight gathered by a sharding constraint (an early value: a parameter or a slice of
        # one) is not held from the constraint on: libtpu's scheduler issues each weight's
        # all-gather a few ops ahead of its first use (`WEIGHT_PREFETCH_OPS`).
        prefetched: dict[int, tuple[float, str]] = {}  # gathered weights not yet fetched
        compute_ticks: list[int] = []  # ticks of the ops that wrote a buffer, in order
        region_start = self.timeline.now
        tl = self.timeline

        def issue(at: int) -> None:
            for r, t, operand in issued_at.get(at, ()):
                if r in last_use:
                    live[r] = self.sizes.local_bytes(t, env.get(operand))
                    free_at[r] = last_use[r]
                    handles[r] = [tl.open(live[r], label=f"permute {t}")]

        owned_args = owned_args or {}
        owned = set(owned_args)
        for a, b in owned_args.items():
            handles[a] = [tl.open(b, label=f"written region argument {types.get(a)}")]
            live[a], free_at[a], backing[a] = b, last_use.get(a, 0), (a,)
        returned: list[Sharding] = []
        enclosing = (self.region_args, self.live_now, self.computed_now)
        self.region_args, self.live_now, self.computed_now = set(region.args), live, computed
        issue(-1)  # permutes of the region's arguments
        for i, op in enumerate(region.ops):
            for v, t in zip(op.operands, op.operand_types):
                types.setdefault(v, t)
            if op.name in RETURN_OPS:
                returned = [env.get(v, _rep(t.rank if t else 0)) for v, t in zip(op.operands, op.operand_types)]
                for held in handles.values():  # what is still live ends with the region
                    for h in held:
                        tl.close(h)
                break
            self.walked = False
            op_tick = tl.tick()
            outs, transient, materialize = self.op(op, env, mult, manual)
            walked = self.walked
            if op.results and op.results[0] in issued:
                transient = 0.0  # an issued permute: its buffer is already live
            written = 0.0
            if self._is_kernel_call(op) or op.name in UNFUSED_COLLECTIVES:
                # nothing fuses into an opaque kernel or an all-to-all: operands computed by fused
                # ops (a scale, a cast) are written out as buffers for the call's duration; views
                # cost nothing. A value computed from written region arguments alone is what they
                # were written as (XLA fuses across the shard_map boundary, in the kernel's form).
                written = sum(self.sizes.local_bytes(types.get(v), env.get(v)) for v in set(op.operands)
                              if v in computed and not (backing.get(v) and set(backing[v]) <= owned))
                transient += written
            for r, t, s in zip(op.results, op.result_types, outs):
                env[r] = s
                types[r] = t
            if op.name in EARLY_PASS and op.operands and (self.frame, op.operands[0]) in self.early:
                self.early.update((self.frame, r) for r in op.results)
            opened = 0.0
            for v in {v for v in op.operands if v in prefetched}:
                b, label = prefetched.pop(v)
                ahead = compute_ticks[-WEIGHT_PREFETCH_OPS] if len(compute_ticks) >= WEIGHT_PREFETCH_OPS else region_start
                handles[v] = [tl.open(b, start=ahead, label=label)]
            if materialize:
                if walked:
                    tl.tick()  # the callee's buffers for these results end with it: hand them over
                for r, t, s in zip(op.results, op.result_types, outs):
                    backing[r] = (r,)
                    if r in last_use and r not in live:
                        b = self.sizes.local_bytes(t, s)
                        if op.name == "sdy.sharding_constraint" and (self.frame, r) in self.early:
                            prefetched[r] = (b, f"gathered weight {t}")  # opened at its first use (above)
                        else:
                            handles[r] = [tl.open(b, label=f"{op.name} {t}")]
                            opened += b
                            if (self.frame, r) in self.async_gathered:
                                handles[r].append(tl.open(b, outside=True, label=f"async copy {t}"))
                                opened += b
                        live[r] = b
                        free_at[r] = last_use[r]
                if op.name != "sdy.sharding_constraint" and not walked:
                    compute_ticks.append(op_tick)
            else:
                if op.name not in NON_COMPUTING or any(v in computed for v in op.operands):
                    computed.update(op.results)
                reads = tuple(sorted({b for v in op.operands for b in backing.get(v, ()) if b in live}))
                for r in op.results:
                    backing[r] = reads
                    if op.name in VIEW_OPS:
                        free_at.update((b, max(free_at[b], last_use.get(r, i))) for b in reads)
                    elif r in written_out and r in computed and reads:
                        # read by several fusions: XLA writes it out once (a residual sum, a
                        # normalized activation feeding q, k and v) rather than recompute it
                        b = self.sizes.local_bytes(types.get(r), env.get(r))
                        # written over an operand buffer of its size that dies here, as XLA's
                        # buffer assignment shares an elementwise fusion's output with such an input
                        dying = [v for v in reads if free_at[v] <= i and live[v] == b and len(handles.get(v, ())) == 1]
                        if dying:
                            handles[r] = handles.pop(dying[0])
                            live.pop(dying[0])
                        else:
                            handles[r] = [tl.open(b, label=f"fused {op.name} written out {types.get(r)}")]
                        live[r], free_at[r], backing[r] = b, last_use[r], (r,)
                    elif r in fused_until:
                        free_at.update((b, max(free_at[b], fused_until[r])) for b in reads)
            # the op's transients beside its results: a walked region recorded its own buffers
            if walked:
                if written:
                    tl.close(tl.open(written, start=op_tick, label=f"kernel operands written out for {op.name}"))
            else:
                tl.momentary(transient - opened, at=op_tick, label=f"transient of {op.name}")
            issue(i)
            for v in [v for v in live if free_at[v] <= i]:
                live.pop(v)
                for h in handles.pop(v, ()):
                    tl.close(h)
        self.region_args, self.live_now, self.computed_now = enclosing
        self.walked = True
        return returned

    def op(self, op: Op, env: dict[int, Sharding], mult: int, manual: bool) -> tuple[list[Sharding], float, bool]:
        """Propagate shardings through one op, emit its nodes; (result shardings, transient bytes, materialized).

        The transient bytes are what the op needs beside its live operands while it runs (gathered
        operands, its results); an op that walks a region records that region's buffers itself.
        """
        name = op.name
        ins = [env.get(v, _rep(t.rank if t else 0)) if t is not None else _rep(0) for v, t in zip(op.operands, op.operand_types)]
        if manual:
            ins = [_rep(len(s.dims)) for s in ins]
        handler = _HANDLERS.get(name)
        if handler is not None:
            return handler(self, op, ins, mult, manual)
        if name in COLLECTIVE_OPS:
            return _collective(self, op, ins, mult, manual)
        if not op.regions and _same_shape(op):
            return _elementwise(self, op, ins, mult, manual)
        return _other(self, op, ins, mult, manual)

    def _is_kernel_call(self, op: Op) -> bool:
        """An opaque kernel, or a call of a function that runs one (how Pallas kernels are lowered)."""
        if op.name == "stablehlo.custom_call":
            return True
        if op.name != "func.call":
            return False
        callee = op.attrs["callee"]
        if callee not in self._kernel_funcs:
            self._kernel_funcs[callee] = _contains(self.module, self.module.funcs[callee].body, "stablehlo.custom_call")
        return self._kernel_funcs[callee]

    def _demands(self, region: Region) -> None:
        """Backward hints: a constraint on a dot's result asks the dot's operands for the same axes.

        Shardy propagates shardings backwards too; when several constrained dots read one operand
        (q, k and v projections of one normed activation) the partitioner reshards that operand
        once instead of each result. Recorded per operand dimension as the axes allowed there.
        """
        by_result = {o.results[0]: o for o in region.ops if o.name == "stablehlo.dot_general"}
        for o in region.ops:
            if o.name != "sdy.sharding_constraint" or o.operands[0] not in by_result:
                continue
            dot = by_result[o.operands[0]]
            cons = o.attrs["sharding"].dims
            lt, rt = dot.operand_types
            if lt is None or rt is None or len(cons) != dot.result_types[0].rank:
                continue
            lb, rb, lc, rc = dot.attrs["lhs_batch"], dot.attrs["rhs_batch"], dot.attrs["lhs_contract"], dot.attrs["rhs_contract"]
            lf = [d for d in range(lt.rank) if d not in lb and d not in lc]
            rf = [d for d in range(rt.rank) if d not in rb and d not in rc]
            nb = len(lb)
            lhs: list[tuple[str, ...] | None] = [None] * lt.rank
            rhs: list[tuple[str, ...] | None] = [None] * rt.rank
            for k, (i, j) in enumerate(zip(lb, rb)):
                lhs[i] = rhs[j] = cons[k]
            for k, d in enumerate(lf):
                lhs[d] = cons[nb + k]
            for k, d in enumerate(rf):
                rhs[d] = cons[nb + len(lf) + k]
            self.demand.setdefault((self.frame, dot.operands[0]), []).append(tuple(lhs))  # type: ignore[arg-type]
            self.demand.setdefault((self.frame, dot.operands[1]), []).append(tuple(rhs))  # type: ignore[arg-type]

    def _desires(self, region: Region) -> None:
        """Backward pass: the sharding each value's consumers would like it to have.

        Shardy propagates shardings from constraints and results back to producers, so an op
        whose result is later sliced (e.g. attention scores whose query rows only feed a
        sequence-sharded residual) is computed already sliced. Walking the region backwards,
        constraints state what their operand should be; elementwise ops, transposes,
        broadcasts, reductions and contractions hand their result's wish to the operand
        dimensions it comes from. Several consumers keep only what they agree on.
        """
        for op in reversed(region.ops):
            if op.name == "sdy.sharding_constraint":
                self._wish(op.operands[0], op.attrs["sharding"].dims)
                continue
            if len(op.results) != 1 or op.results[0] is None:
                continue
            want = self.desire.get((self.frame, op.results[0]))
            ot = op.result_types[0]
            if want is None or ot is None or len(want) != ot.rank:
                continue
            name = op.name
            if name == "stablehlo.transpose":
                perm = op.attrs["permutation"]
                wish = [()] * len(perm)
                for i, p in enumerate(perm):
                    wish[p] = want[i]
                self._wish(op.operands[0], tuple(wish))
            elif name == "stablehlo.broadcast_in_dim":
                it = op.operand_types[0]
                if it is not None:
                    self._wish(op.operands[0], tuple(
                        want[d] if it.shape[i] == ot.shape[d] else () for i, d in enumerate(op.attrs["broadcast_dimensions"])
                    ))
            elif name == "stablehlo.reduce":
                it = op.operand_types[0]
                if it is not None:
                    kept = [d for d in range(it.rank) if d not in op.attrs.get("dimensions", ())]
                    wish = [()] * it.rank
                    for k, d in enumerate(kept):
                        wish[d] = want[k]
                    self._wish(op.operands[0], tuple(wish))
            elif name == "stablehlo.dot_general":
                lt, rt = op.operand_types
                if lt is None or rt is None:
                    continue
                lb, rb, lc, rc = op.attrs["lhs_batch"], op.attrs["rhs_batch"], op.attrs["lhs_contract"], op.attrs["rhs_contract"]
                lf = [d for d in range(lt.rank) if d not in lb and d not in lc]
                rf = [d for d in range(rt.rank) if d not in rb and d not in rc]
                lw, rw = [()] * lt.rank, [()] * rt.rank
                for k, (i, j) in enumerate(zip(lb, rb)):
                    lw[i] = rw[j] = want[k]
                for k, d in enumerate(lf):
                    lw[d] = want[len(lb) + k]
                for k, d in enumerate(rf):
                    rw[d] = want[len(lb) + len(lf) + k]
                self._wish(op.operands[0], tuple(lw))
                self._wish(op.operands[1], tuple(rw))
            elif name == "stablehlo.reshape":
                it = op.operand_types[0]
                if it is not None:
                    # a split or merged group of dimensions hands the wish between its major
                    # non-unit dimensions (how the forward rule in `_reshape` moves axes)
                    wish = [()] * it.rank
                    for (i0, i1), (o0, o1) in _reshape_groups(it.shape, ot.shape):
                        ins = [d for d in range(i0, i1) if it.shape[d] != 1]
                        outs = [d for d in range(o0, o1) if ot.shape[d] != 1]
                        if ins and outs and not any(want[d] for d in outs[1:]):
                            wish[ins[0]] = want[outs[0]]
                    self._wish(op.operands[0], tuple(wish))
            elif name == "stablehlo.concatenate":
                wish = tuple(() if d == op.attrs["dimension"] else want[d] for d in range(ot.rank))
                for v in op.operands:
                    self._wish(v, wish)
            elif name == "stablehlo.slice":
                it = op.operand_types[0]
                if it is not None and it.rank == ot.rank:
                    self._wish(op.operands[0], tuple(want[d] if it.shape[d] == ot.shape[d] else () for d in range(ot.rank)))
            elif (not op.regions and _same_shape(op)) or name in ("stablehlo.pad", "func.call"):
                # a pad is partitioned in place (halo exchange); a called helper (`_pad`, `_where`)
                # is taken as elementwise: Shardy propagates through its body
                for v, t in zip(op.operands, op.operand_types):
                    if t is not None and t.rank == ot.rank:
                        self._wish(v, want)

    def _wish(self, value: int, dims: tuple[tuple[str, ...], ...]) -> None:
        key = (self.frame, value)
        old = self.desire.get(key)
        if old is None:
            self.desire[key] = tuple(tuple(d) for d in dims)
        elif len(old) == len(dims):
            self.desire[key] = tuple(tuple(a for a in o if a in d) for o, d in zip(old, dims))

    def refine(self, value: int, t: TensorType | None, dims: list[tuple[str, ...]], used: set[str]) -> list[tuple[str, ...]]:
        """Add the axes consumers wish for to unsharded dimensions (a free local slice)."""
        want = self.desire.get((self.frame, value))
        if want is None or t is None or len(want) != len(dims):
            return dims
        out = list(dims)
        for i, (d, w) in enumerate(zip(dims, want)):
            if d or not w or any(a in used for a in w):
                continue
            if t.shape[i] % self.sizes.n(w) == 0:
                out[i] = tuple(w)
                used.update(w)
        return out

    def demanded(self, value: int, t: TensorType, sh: Sharding, out_bytes: float) -> Sharding:
        """The operand sharding after honouring backward demands (see `_demands`)."""
        demands = self.demand.get((self.frame, value))
        if not demands or len(sh.dims) != t.rank:
            return sh
        dims = []
        for i, d in enumerate(sh.dims):
            keep = []
            for a in d:
                if all(dm[i] is None or a in dm[i] for dm in demands):
                    keep.append(a)
                else:
                    break
            dims.append(tuple(keep))
        target = _with(sh, dims, sh.unreduced)
        if target == sh:
            return sh
        if len(demands) >= 2 or self.sizes.local_bytes(t, sh) <= out_bytes:
            return target
        return sh

    # -- cost helpers
    def cost_simple(self, op: Op, ins: list[Sharding], outs: list[Sharding], mult: int, flops_per_elem: float = 1.0,
                    min_bytes: float = 0.0) -> None:
        if op.name in NO_COST:
            return
        out_bytes = sum(self.sizes.local_bytes(t, s) for t, s in zip(op.result_types, outs))
        in_bytes = sum(self.sizes.local_bytes(t, s) for t, s in zip(op.operand_types, ins))
        elems = sum(math.prod(self.sizes.local_shape(t, s)) for t, s in zip(op.result_types, outs) if t is not None)
        self.op_node(op, flops_per_elem * elems, in_bytes + out_bytes, min_bytes, mult)


def _add_axes(src: Sharding, dst: Sharding, axes: tuple[str, ...]) -> Sharding:
    dims = [list(d) for d in src.dims]
    for i, d in enumerate(dst.dims):
        for a in d:
            if a in axes:
                dims[i].append(a)
    return _with(src, dims, src.unreduced)


def _permute_issue_points(region: Region) -> dict[int, list[tuple[int, TensorType | None, int]]]:
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


# collectives libtpu runs on a written operand (no producer fused in): the all-to-all (Ulysses)
UNFUSED_COLLECTIVES = {"stablehlo.all_to_all"}
RETURN_OPS = {"func.return", "stablehlo.return", "sdy.return"}
# Ops that take their operands as a region's arguments: a value they read is computed before the
# region starts, not inside it.
REGION_ENTRY_OPS = {"sdy.manual_computation", "stablehlo.while"} | RETURN_OPS


def _takes_written_operand(op: Op) -> bool:
    """Whether a fused computation ending at `op` is written out before `op` runs (a region's
    argument, or the operand a relayout reshape copies), so its inputs are free by then."""
    if op.name in REGION_ENTRY_OPS:
        return True
    return op.name == "stablehlo.reshape" and not _continues_fusion(op)


def _fusion_ends(region: Region) -> tuple[dict[int, int], set[int]]:
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
    fused = [_continues_fusion(op) for op in ops]
    # the largest buffer each value is computed from (its own size when it is a buffer)
    source_bytes: dict[int, float] = {}
    for op, through in zip(ops, fused):
        for r, t in zip(op.results, op.result_types):
            own = t.bytes if t is not None else 0.0
            source_bytes[r] = max((source_bytes.get(v, 0.0) for v in op.operands), default=own) if through else own
    ends: dict[int, set[int]] = {}
    written: set[int] = set()
    for i in range(len(ops) - 1, -1, -1):
        op, through = ops[i], fused[i]
        if through and op.name not in NON_COMPUTING:
            sources = max((source_bytes.get(v, 0.0) for v in op.operands), default=0.0)
            written.update(r for r, t in zip(op.results, op.result_types)
                           if len(ends.get(r, ())) > 1 and t is not None and t.bytes <= sources)
        for v in set(_uses(op)):
            got = ends.setdefault(v, set())
            if through and not any(r in written for r in op.results):
                for r in op.results:
                    got.update(ends.get(r, ()))
            else:
                got.add(i)
    until = {v: max(e - 1 if _takes_written_operand(ops[e]) else e for e in es) for v, es in ends.items() if es}
    return until, written


# Data-movement ops XLA fuses like elementwise ones (but a reshape across lanes is a copy, `_relayout`)
FUSED_MOVES = {"stablehlo.broadcast_in_dim", "stablehlo.reshape", "stablehlo.transpose", "stablehlo.slice",
               "stablehlo.convert", "sdy.sharding_constraint", "stablehlo.pad", "stablehlo.reverse",
               "stablehlo.dynamic_slice"}


def _continues_fusion(op: Op) -> bool:
    """Whether XLA fuses `op` into the computation of its operands (elementwise ops and data
    movement) instead of taking them as buffers."""
    if op.name == "stablehlo.reshape" and op.operand_types[0] is not None and op.result_types[0] is not None:
        return not _relayout(op.operand_types[0].shape, op.result_types[0].shape)
    if op.name in FUSED_MOVES:
        return True
    return (not op.regions and op.name not in COLLECTIVE_OPS and op.name != "stablehlo.custom_call"
            and _same_shape(op))


def _uses(op: Op) -> list[int]:
    out = list(op.operands)
    for r in op.regions:
        for o in r.ops:
            out.extend(_uses(o))
    return out


def _same_shape(op: Op) -> bool:
    if not op.result_types or op.result_types[0] is None:
        return False
    shape = op.result_types[0].shape
    return all(t is None or t.shape == shape or t.rank == 0 for t in op.operand_types) and all(
        t is not None and t.shape == shape for t in op.result_types
    )


def _resolve_partial(w: _Walker, v: int, t: TensorType | None, s: Sharding, mult: int, reason: str) -> Sharding:
    if not s.unreduced or t is None:
        return s
    target = _with(s, s.dims)
    w.reshard(v, t, s, target, mult, reason)
    return target


def _merge(ins: list[Sharding], ranks: list[int], rank: int, sizes: _Sizes) -> Sharding:
    """Result sharding of an elementwise op: the most sharded operand, completed by the others."""
    cands = [s for s, r in zip(ins, ranks) if r == rank and len(s.dims) == rank]
    if not cands:
        return _rep(rank)
    best = max(cands, key=lambda s: sizes.n(s.axes))
    dims = [list(d) for d in best.dims]
    used = set(best.axes)
    for s in cands:
        for i, d in enumerate(s.dims):
            if not dims[i] and d and not (set(d) & used):
                dims[i] = list(d)
                used |= set(d)
    return _with(best, dims)


def _elementwise(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    rank = op.result_types[0].rank
    ranks = [t.rank if t is not None else 0 for t in op.operand_types]
    partials = {s.unreduced for s, r in zip(ins, ranks) if r == rank}
    keep_partial: tuple[str, ...] = ()
    if op.name in LINEAR_UNARY and len(ins) == 1:
        keep_partial = ins[0].unreduced
    elif op.name in LINEAR_NARY and len(partials) == 1 and next(iter(partials)):
        keep_partial = next(iter(partials))
    target = _merge(ins, ranks, rank, w.sizes)
    if not manual:
        target = _with(target, w.refine(op.results[0], op.result_types[0], list(target.dims), set(target.axes)))
    transient = 0.0
    for v, t, s, r in zip(op.operands, op.operand_types, ins, ranks):
        if r == rank:
            src = s if not keep_partial else _with(s, s.dims)
            transient = max(transient, w.reshard(v, t, src, target, mult, "operand"))
    out = _with(target, target.dims, keep_partial)
    w.cost_simple(op, [_with(s, s.dims) for s in ins], [out] * len(op.results), mult)
    # elementwise results are fused into their consumers: no buffer of their own
    return [out] * len(op.results), transient, False


def _dot(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    lt, rt = op.operand_types
    ot = op.result_types[0]
    L = _resolve_partial(w, op.operands[0], lt, ins[0], mult, "dot operand")
    R = _resolve_partial(w, op.operands[1], rt, ins[1], mult, "dot operand")
    if not manual:
        ob = ot.bytes / max(1, w.sizes.n(L.axes + R.axes))
        for k, v, t in ((0, op.operands[0], lt), (1, op.operands[1], rt)):
            cur = L if k == 0 else R
            want = w.demanded(v, t, cur, ob)
            if want != cur:
                w.reshard(v, t, cur, want, mult, "dot operand (backward demand)")
                if k == 0:
                    L = want
                else:
                    R = want
    lb, rb, lc, rc = op.attrs["lhs_batch"], op.attrs["rhs_batch"], op.attrs["lhs_contract"], op.attrs["rhs_contract"]
    lf = [d for d in range(lt.rank) if d not in lb and d not in lc]
    rf = [d for d in range(rt.rank) if d not in rb and d not in rc]
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
    for i, j in zip(lb, rb):
        la, ra = L.dims[i], R.dims[j]
        batch.append(take(la if (la == ra or not ra or (la and n(la) >= n(ra))) else ra))
    common = [tuple(a for a in L.dims[i] if a in R.dims[j]) for i, j in zip(lc, rc)]
    contract = [take(c) for c in common]
    lfree = [take(L.dims[d]) for d in lf]
    rfree = [take(R.dims[d]) for d in rf]
    # one-sided contraction axes: gather that operand, or slice the other and reduce the result
    out_dims = batch + lfree + rfree
    if not manual:
        out_dims = w.refine(op.results[0], ot, out_dims, used)
        nb, nl = len(batch), len(lfree)
        batch, lfree, rfree = out_dims[:nb], out_dims[nb:nb + nl], out_dims[nb + nl:]
    out_local = w.sizes.local_bytes(ot, _with(L, out_dims))
    for k, (i, j) in enumerate(zip(lc, rc)):
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
    Lw = [()] * lt.rank
    Rw = [()] * rt.rank
    for k, (i, j) in enumerate(zip(lb, rb)):
        Lw[i] = Rw[j] = batch[k]
    for k, (i, j) in enumerate(zip(lc, rc)):
        Lw[i] = Rw[j] = contract[k]
    for k, d in enumerate(lf):
        Lw[d] = lfree[k]
    for k, d in enumerate(rf):
        Rw[d] = rfree[k]
    Lt, Rt = _with(L, Lw), _with(R, Rw)
    transient = w.reshard(op.operands[0], lt, L, Lt, mult, "dot lhs")
    transient = max(transient, w.reshard(op.operands[1], rt, R, Rt, mult, "dot rhs"))
    partial = tuple(a for c in contract for a in c)
    out = _with(L, out_dims, partial)
    out_shape = w.sizes.local_shape(ot, out)
    contract_local = math.prod(w.sizes.local_shape(lt, Lt)[i] for i in lc)
    flops = 2.0 * math.prod(out_shape) * contract_local
    lb_bytes, rb_bytes = w.sizes.local_bytes(lt, Lt), w.sizes.local_bytes(rt, Rt)
    ob = w.sizes.local_bytes(ot, out)
    # a contraction reads both operands and writes its result (elementwise producers and
    # consumers may fuse into it, but they move at least as many bytes)
    w.op_node(op, flops, lb_bytes + rb_bytes + ob, lb_bytes + rb_bytes + ob, mult)
    return [out], transient, True


def _reduce(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    dims = op.attrs.get("dimensions", ())
    ins = [_resolve_partial(w, v, t, s, mult, "reduce") for v, t, s in zip(op.operands, op.operand_types, ins)]
    src = ins[0]
    t0 = op.operand_types[0]
    reduced_axes = tuple(a for d in dims if d < len(src.dims) for a in src.dims[d])
    out_dims = tuple(src.dims[d] for d in range(len(src.dims)) if d not in dims) if len(src.dims) == t0.rank else ()
    outs = [_with(src, out_dims) if t is not None and t.rank == len(out_dims) else _rep(t.rank if t else 0) for t in op.result_types]
    # a reduction reads its input at least once, fused or not (possibly before an upcast that
    # fused into it: count at most 2 bytes per element)
    first = math.prod(w.sizes.local_shape(t0, ins[0])) * min(t0.itemsize, 2)
    w.cost_simple(op, ins, outs, mult, min_bytes=first)
    if reduced_axes and not manual:
        ob = sum(w.sizes.local_bytes(t, s) for t, s in zip(op.result_types, outs))
        nn = w.sizes.n(reduced_axes)
        w.comm("all-reduce", reduced_axes, ob, 2 * ob * (nn - 1) / nn, mult, False, "reduce over a sharded dimension",
               (len(w.nodes) - 1,))
    return outs, 0.0, True


def _transpose(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    perm = op.attrs["permutation"]
    s = ins[0]
    out = _with(s, [s.dims[p] for p in perm], s.unreduced) if len(s.dims) == len(perm) else _rep(len(perm))
    w.cost_simple(op, ins, [out], mult, 0.0)
    return [out], 0.0, False


def _reshape(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    src_t, dst_t = op.operand_types[0], op.result_types[0]
    s = ins[0]
    out_dims: list[tuple[str, ...]] = [() for _ in dst_t.shape]
    lost: list[str] = []
    if len(s.dims) == src_t.rank and s.axes:
        for (i0, i1), (o0, o1) in _reshape_groups(src_t.shape, dst_t.shape):
            axes_in = [a for d in range(i0, i1) for a in s.dims[d]]
            if not axes_in:
                continue
            # a merged dimension keeps only the sharding of its most major non-unit dimension
            real = [d for d in range(i0, i1) if src_t.shape[d] != 1] or [i0]
            lost.extend(a for d in range(i0, i1) if d != real[0] for a in s.dims[d])
            axes_in = list(s.dims[real[0]])
            # hand the axes to output dims major to minor while they divide
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
    transient = 0.0
    if lost:
        kept = _with(s, [tuple(a for a in d if a not in lost) for d in s.dims], s.unreduced)
        transient = w.reshard(op.operands[0], src_t, s, kept, mult, "reshape")
    out = _with(s, out_dims, s.unreduced)
    if _relayout(src_t.shape, dst_t.shape):
        # not a bitcast on TPU: libtpu writes the operand out, reshapes it into a new buffer and
        # copies that into a tiled layout (two buffers of the result's size at a time)
        return [out], transient + w.sizes.local_bytes(dst_t, out), True
    return [out], transient, False


LANES = 128  # TPU tiles the two minor dimensions of an array (8, 128): the minor one in 128 lanes


def _relayout(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Whether a reshape moves elements between lanes: it changes the minor (non-unit) dimension
    and one side's minor dimension is not a whole number of lane tiles (e.g. (..., 128) ->
    (..., 64, 2), the interleaved pairs of rotary embeddings)."""
    a = [d for d in src if d != 1]
    b = [d for d in dst if d != 1]
    if not a or not b or a[-1] == b[-1]:
        return False
    return a[-1] % LANES != 0 or b[-1] % LANES != 0


def _reshape_groups(a: tuple[int, ...], b: tuple[int, ...]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Minimal groups of consecutive dims with equal products ([i0, i1) of a, [o0, o1) of b)."""
    out = []
    i = j = 0
    while i < len(a) and j < len(b):
        i0, j0 = i, j
        pa, pb = a[i], b[j]
        i += 1
        j += 1
        while pa != pb:
            if pa < pb and i < len(a):
                pa *= a[i]
                i += 1
            elif j < len(b):
                pb *= b[j]
                j += 1
            else:
                break
        # absorb trailing size-1 dims
        while i < len(a) and a[i] == 1 and (j >= len(b) or b[j] != 1):
            i += 1
        while j < len(b) and b[j] == 1 and (i >= len(a) or a[i] != 1):
            j += 1
        out.append(((i0, i), (j0, j)))
    return out


def _broadcast(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    bd = op.attrs["broadcast_dimensions"]
    src_t, dst_t = op.operand_types[0], op.result_types[0]
    s = _resolve_partial(w, op.operands[0], src_t, ins[0], mult, "broadcast")
    dims: list[tuple[str, ...]] = [() for _ in dst_t.shape]
    if len(s.dims) == src_t.rank:
        for i, d in enumerate(bd):
            if src_t.shape[i] == dst_t.shape[d]:
                dims[d] = s.dims[i]
    out = _with(s, dims)
    w.cost_simple(op, [s], [out], mult, 0.0)
    return [out], 0.0, False


def _concatenate(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    dim = op.attrs["dimension"]
    rank = op.result_types[0].rank
    ins = [_resolve_partial(w, v, t, s, mult, "concatenate") for v, t, s in zip(op.operands, op.operand_types, ins)]
    target = _merge(ins, [rank] * len(ins), rank, w.sizes)
    target = _with(target, [() if i == dim else d for i, d in enumerate(target.dims)])
    transient = 0.0
    for v, t, s in zip(op.operands, op.operand_types, ins):
        transient = max(transient, w.reshard(v, t, s, target, mult, "concatenate"))
    w.cost_simple(op, [target] * len(ins), [target], mult, 0.0)
    return [target], transient, True


def _slice_like(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    """slice / dynamic_slice / pad / reverse: dimensions that change size lose their sharding."""
    src_t, dst_t = op.operand_types[0], op.result_types[0]
    s = _resolve_partial(w, op.operands[0], src_t, ins[0], mult, "slice")
    if len(s.dims) != src_t.rank or src_t.rank != dst_t.rank:
        return [_rep(dst_t.rank)], 0.0, False
    changed = [src_t.shape[i] != dst_t.shape[i] or op.name == "stablehlo.reverse" for i in range(src_t.rank)]
    kept = _with(s, [() if c else d for c, d in zip(changed, s.dims)])
    transient = w.reshard(op.operands[0], src_t, s, kept, mult, "slice")
    out = _fit(kept, dst_t, w.sizes)
    w.cost_simple(op, [kept], [out], mult, 0.0)
    return [out], transient, False


def _dynamic_update_slice(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    t0, tu = op.operand_types[0], op.operand_types[1]
    base = _resolve_partial(w, op.operands[0], t0, ins[0], mult, "update")
    upd = _resolve_partial(w, op.operands[1], tu, ins[1], mult, "update")
    changed = [t0.shape[i] != tu.shape[i] for i in range(t0.rank)]
    base = _with(base, [() if c else d for c, d in zip(changed, base.dims)])
    transient = w.reshard(op.operands[0], t0, ins[0], base, mult, "update")
    transient = max(transient, w.reshard(op.operands[1], tu, upd, base, mult, "update"))
    w.cost_simple(op, [base, base], [base], mult, 0.0)
    return [base], transient, True


def _constraint(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    t = op.result_types[0]
    target = _fit(op.attrs["sharding"], t, w.sizes) if t is not None else _rep(0)
    if manual:
        return [_rep(t.rank)], 0.0, False
    transient = w.reshard(op.operands[0], t, ins[0], target, mult, "sharding constraint")
    if op.operands[0] in w.producer:
        w.producer[op.results[0]] = w.producer[op.operands[0]]
    return [target], transient, transient > 0


def _custom_call(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    """An opaque kernel. Outside shard_map its operands must arrive replicated (no sharding rule)."""
    transient = 0.0
    given = op.attrs.get("result_shardings")
    if not manual:
        for v, t, s in zip(op.operands, op.operand_types, ins):
            if t is not None:
                transient = max(transient, w.reshard(v, t, s, _rep(t.rank), mult, f"kernel boundary ({op.attrs['target']})"))
        ins = [_rep(len(s.dims)) for s in ins]
    outs = [
        _fit(given[k], t, w.sizes) if (given and k < len(given) and t is not None) else _rep(t.rank if t else 0)
        for k, t in enumerate(op.result_types)
    ]
    lin = tuple(TensorType(w.sizes.local_shape(t, s), t.dtype) if t else None for t, s in zip(op.operand_types, ins))
    lout = tuple(TensorType(w.sizes.local_shape(t, s), t.dtype) if t else None for t, s in zip(op.result_types, outs))
    io = sum(t.bytes for t in lin + lout if t is not None)
    cost = w.kernel_cost(KernelCall(op.attrs["target"], lin, lout, manual)) if w.kernel_cost else None
    flops = cost.flops if cost and cost.flops is not None else 0.0
    hbm = cost.hbm_bytes if cost and cost.hbm_bytes is not None else io
    if cost is None:
        w.notes.append(f"no cost for kernel {op.attrs['target']}; counted its I/O bytes only")
    # nothing fuses into an opaque kernel: the bytes its cost hook reports are all unavoidable
    w.op_node(op, flops, hbm, hbm, mult, opaque=True, seconds=cost.seconds if cost else None,
              score_elements=cost.score_elements if cost else None, matmul_dim=cost.matmul_dim if cost else None)
    return outs, transient, True


def _manual(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    """A shard_map: operands reshard to `in_shardings`, the body runs on local shapes."""
    in_sh, out_sh = op.attrs["in_shardings"], op.attrs["out_shardings"]
    body = op.regions[0]
    has_kernel = _contains(w.module, body, "stablehlo.custom_call")
    reason = "kernel boundary (shard_map)" if has_kernel else "shard_map boundary"
    transient = 0.0
    for v, t, s, want in zip(op.operands, op.operand_types, ins, in_sh):
        if t is not None:
            transient = max(transient, w.reshard(v, t, s, _fit(want, t, w.sizes), mult, reason))
    w.timeline.momentary(transient, label="shard_map operands resharded")
    # the body's arguments are the operands' shards: a parameter stays a parameter inside
    w.early.update((w.frame, a) for a, v in zip(body.args, op.operands) if (w.frame, v) in w.early)
    # nothing fuses into the body: a computed operand is written out, in the body's sharding, as an
    # argument the body owns until its last use there (ring attention's q, k and v, every step)
    owned = {a: t.bytes for v, a, t in zip(op.operands, body.args, body.arg_types)
             if v in w.computed_now and t is not None}
    w.region(body, [_rep(t.rank if t else 0) for t in body.arg_types], mult, manual=True, owned_args=owned)
    outs = [_fit(s, t, w.sizes) if t is not None else _rep(0) for s, t in zip(out_sh, op.result_types)]
    return outs, 0.0, True


def _contains(module: IRModule, region: Region, name: str) -> bool:
    for o in region.ops:
        if o.name == name:
            return True
        if o.name == "func.call" and _contains(module, module.funcs[o.attrs["callee"]].body, name):
            return True
        if any(_contains(module, r, name) for r in o.regions):
            return True
    return False


def _collective(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
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
    i = w.comm(c.kind, axes, payload, recv, mult, True, "written in the program", w._deps(op.operands))
    if c.kind in ("all-reduce", "all-to-all"):
        w.timeline.momentary(payload, outside=True, label=f"{c.kind} scratch")
    for r in op.results:
        w.producer[r] = i
    if c.kind == "all-gather" and (w.frame, op.operands[0]) not in w.early:
        w.async_gathered.update((w.frame, r) for r in op.results)
    outs = [_rep(t.rank if t else 0) if manual else _with(s, s.dims) for t in op.result_types]
    if not manual and c.kind in ("all-gather", "reduce-scatter", "all-to-all"):
        outs = [_rep(t.rank if t else 0) for t in op.result_types]
    return outs, sum(w.sizes.local_bytes(t, o) for t, o in zip(op.result_types, outs)), True


def _while(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    trips = op.attrs.get("trip_count")
    if trips is None:
        w.notes.append("a while loop without a recognisable trip count was counted once")
        trips = 1
    carried = [_resolve_partial(w, v, t, s, mult, "loop carry") for v, t, s in zip(op.operands, op.operand_types, ins)]
    body = op.regions[1]
    ret = body.ops[-1] if body.ops else None
    # loop invariants that are early (the stacked weights of a scan): passed through unchanged
    early_invariant = {k for k, a in enumerate(body.args)
                       if ret is not None and k < len(ret.operands) and ret.operands[k] == a
                       and (w.frame, op.operands[k]) in w.early}
    w.early.update((w.frame, body.args[k]) for k in early_invariant)
    # The loop state has buffers for the whole loop (the body updates them in place). A carried
    # value already owns a buffer when the enclosing region materialized it, or when it is an
    # argument there (a parameter, or an outer loop's state); an early invariant is read where it
    # is. Otherwise (a fused producer) the state is new.
    state = sum(w.sizes.local_bytes(t, s) for k, (v, t, s) in enumerate(zip(op.operands, op.operand_types, carried))
                if v not in w.region_args and v not in w.live_now and k not in early_invariant)
    held = w.timeline.open(state, label="loop state")
    returned = w.region(body, carried, mult * trips, manual)
    w.timeline.close(held)
    w.timeline.tick()  # the results take the state's buffers over
    for k, (t, want) in enumerate(zip(op.result_types, carried)):
        if k < len(returned) and t is not None and ret is not None:
            w.reshard(ret.operands[k], t, returned[k], want, mult * trips, "loop carry")
    return carried, 0.0, True


def _call(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    f = w.module.funcs[op.attrs["callee"]]
    saved = w.frame
    early_in = [(saved, v) in w.early for v in op.operands]
    w.frames += 1
    w.frame = w.frames
    w.early.update((w.frame, a) for a, e in zip(f.body.args, early_in) if e)
    returned = w.region(f.body, ins, mult, manual)
    ret_early = [(w.frame, v) in w.early for v in (f.body.ops[-1].operands if f.body.ops else ())]
    w.frame = saved
    w.early.update((saved, r) for r, e in zip(op.results, ret_early) if e)
    ret = f.body.ops[-1] if f.body.ops else None
    if ret is not None:
        for r, v in zip(op.results, ret.operands):
            if v in w.producer:
                w.producer[r] = w.producer[v]
    outs = [returned[k] if k < len(returned) else _rep(t.rank if t else 0) for k, t in enumerate(op.result_types)]
    # a kernel's outputs are buffers the caller holds until their last use there (ring attention
    # keeps every step's output for the final combine); other calls pass their values through
    return outs, 0.0, w._is_kernel_call(op)


def _case(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    outs: list[Sharding] = []
    for r in op.regions:  # one branch runs; walked one after the other, each holds its own buffers
        outs = outs or w.region(r, [], mult, manual)
    outs = outs or [_rep(t.rank if t else 0) for t in op.result_types]
    return outs, 0.0, True


def _other(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    """Ops without a rule (gather, scatter, sort, ...): first operand's sharding if shapes agree."""
    outs = []
    for t in op.result_types:
        if t is not None and op.operand_types and op.operand_types[0] is not None and op.operand_types[0].shape == t.shape:
            outs.append(_with(ins[0], ins[0].dims))
        else:
            outs.append(_rep(t.rank if t else 0))
    w.cost_simple(op, ins, outs, mult)
    return outs, 0.0, True


def _plumbing(w: _Walker, op: Op, ins: list[Sharding], mult: int, manual: bool):
    return [_rep(t.rank if t else 0) for t in op.result_types], 0.0, False


_HANDLERS: dict[str, Callable[..., tuple[list[Sharding], float, bool]]] = {
    "stablehlo.dot_general": _dot,
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


def predict(module: IRModule, kernel_cost: KernelCostHook | None = None, hoist_permutes: bool = True) -> Prediction:
    """Build the prediction DAG of a lowered program (see the module docstring for the rules).

    `hoist_permutes=False` issues each collective permute where it is written instead of as soon as
    its operand exists: what libtpu's scheduler does when hoisting would not fit in HBM
    (`stage1.memory.predict_within_hbm`).
    """
    return _Walker(module, kernel_cost, hoist_permutes).run()
