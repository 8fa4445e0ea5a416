"""The HBM model: buffers of a program, from the propagator's value events, on a heap timeline.

Why: libtpu's temp allocation is what decides whether a strategy compiles, and it follows rules
about buffers (which values are written to HBM, until when, what the runtime adds outside the
buffer assignment) that have nothing to do with sharding. `HbmModel` consumes the value events
(`events.py`) and puts every buffer it decides on a `heap.Timeline`, which packs them as libtpu
packs its temp. The rules (the list in `memory.py`'s docstring; evidence in
docs/notebook/memory-model.md):

* a materialized result owns a buffer until its last use; a fused result owns none: the ops its
  computation ends at read the buffers it is made of then (`fusion.fusion_ends`); a view
  (transpose, reshape) keeps the buffer it views live until the view's last use;
* a fused value several buffer-taking ops read is written out once, over an operand buffer of
  its size that dies there (XLA shares an elementwise fusion's output with such an input);
* nothing fuses into an opaque kernel or an all-to-all: computed operands (a pad to the kernel's
  blocks, a scale, a cast; also what a called helper such as `_pad` computes) are written out
  before the call, one after the other, and what each was computed from dies as it is written
  when nothing later reads it; a call is a kernel's only when its function just wraps kernels;
  a reshape across lanes is a relayout copy (`fusion.relayout`);
* a weight gathered by a sharding constraint is fetched `WEIGHT_PREFETCH_OPS` ops ahead of its
  first use; an all-gather of an activation written in the program holds a second, outside copy
  where libtpu runs it as an async collective fusion (`HardwareProfile.async_collective_fusion`:
  v5e; elsewhere it is a synchronous all-gather with no second copy); all-reduce and all-to-all
  scratch is outside too;
* a collective permute's result is live from its operand's definition (`hoist_permutes`);
* a loop's state owns buffers for the whole loop; a shard_map's computed operand is written out
  as an argument its body owns; a kernel's output is a buffer its caller holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from aoizora.errors import AoizoraError
from aoizora.stage1.events import CollectiveIssued, OpFinished, OpStarted, RegionEntered, RegionLeft, Value, ValueEvent
from aoizora.stage1.fusion import (
    NON_COMPUTING,
    UNFUSED_COLLECTIVES,
    VIEW_OPS,
    fusion_ends,
    last_uses,
    permute_issue_points,
    relayout,
)
from aoizora.stage1.heap import Timeline
from aoizora.stage1.ir import COLLECTIVE_OPS, RETURN_OPS, Func, Op, Region, TensorType, called_op_names, same_shape

# How far ahead of its first use a gathered weight is fetched, in buffer-writing ops. libtpu's
# depth varies with the program (probes on v5e:2x4, scanned layers of FSDP weights gathered up
# front: 3 of 6 32 MiB weights live at once, 4 of 6 72 MiB ones, all 4 of 4 128 MiB ones); 3
# reproduces the two probes where it holds back. On the 741 Wan 14B programs of the grid the
# compiler accepts, depths 3 to 8 fit its buffer assignments about equally (docs/notebook/memory-model.md,
# "Weights fetched ahead of use, and lane relayouts").
WEIGHT_PREFETCH_OPS = 3

# Ops whose result always gets a buffer of its own (contractions, reductions, kernels, ops that
# walk regions, collectives); see `_materializes` for the rest.
BUFFER_OPS = {
    "stablehlo.dot_general", "stablehlo.reduce", "stablehlo.concatenate", "stablehlo.dynamic_update_slice",
    "stablehlo.custom_call", "sdy.manual_computation", "stablehlo.while", "stablehlo.case", "stablehlo.if",
} | set(COLLECTIVE_OPS)
# Ops that fuse into their consumers (no buffer of their own), beside the elementwise ones.
FUSED_OPS = {
    "stablehlo.transpose", "stablehlo.broadcast_in_dim", "stablehlo.slice", "stablehlo.dynamic_slice",
    "stablehlo.pad", "stablehlo.reverse", "stablehlo.constant", "stablehlo.iota",
}
CONSTRAINT_OPS = {"sdy.sharding_constraint", "sdy.reshard"}


class EventStreamError(AoizoraError):
    """Value events out of order (an op finished that did not start, an op outside any region)."""


@dataclass(frozen=True)
class HbmReport:
    """What the HBM model found for one program (per device)."""

    # libtpu's temp allocation (the packed heap) plus `outside_bytes`, as memory_analysis() reports it
    peak_temp_bytes: float
    # the peak of what libtpu holds outside its buffer assignment (async collective fusion copies,
    # all-reduce and all-to-all scratch): in memory_analysis(), not in the compiler's HBM check
    outside_bytes: float
    # the most temporary bytes live at once, outside ones included (perfect packing would need this)
    live_peak_temp_bytes: float
    # collective permutes issued ahead of their op (`fusion.permute_issue_points`)
    hoisted_permutes: int


@dataclass
class _OpInProgress:
    """The op being walked in a region, between its `OpStarted` and `OpFinished`."""

    op: Op
    tick: int
    operands: tuple[Value, ...]
    reshard_bytes: float = 0.0  # the largest buffer a reshard of its operands produced
    walked: bool = False  # it walked a region, which recorded its own buffers
    # a called helper's results that its body computes (`_pad`, `_where`), not passes through
    returns_computed: tuple[bool, ...] = ()
    # kernel operands written out before the call (`_write_kernel_operands`): closed when it ends
    written_handles: list[int] = field(default_factory=list)


@dataclass
class _RegionBuffers:
    """The buffers of one region being walked, and what decides when they die."""

    region: Region
    args: set[int]
    last_use: dict[int, int]
    fused_until: dict[int, int]  # a fused value's inputs stay live until this op (`fusion_ends`)
    written_out: set[int]  # fused values written out once for several readers
    issued_at: dict[int, list[tuple[int, TensorType | None, int]]]  # permutes issued after op index
    issued: set[int]
    start: int  # the timeline tick the region started at
    owned: set[int] = field(default_factory=set)  # arguments written out for this region
    value_bytes: dict[int, float] = field(default_factory=dict)  # per device, as the events said
    live: dict[int, float] = field(default_factory=dict)  # values owning a buffer now
    free_at: dict[int, int] = field(default_factory=dict)  # op index after which each buffer dies
    backing: dict[int, tuple[int, ...]] = field(default_factory=dict)  # the buffers a value reads
    computed: set[int] = field(default_factory=set)  # fused results that compute something (not a view)
    handles: dict[int, list[int]] = field(default_factory=dict)  # a live buffer's timeline entries
    # weights gathered by a constraint, not yet fetched: opened a few ops ahead of their first use
    prefetched: dict[int, tuple[float, str]] = field(default_factory=dict)
    compute_ticks: list[int] = field(default_factory=list)  # ticks of the ops that wrote a buffer
    loop_state: int | None = None  # the timeline entry of a loop body's state
    index: int = -1  # index of the current op
    current: _OpInProgress | None = None


class HbmModel:
    """Consumes value events (`feed`) and reports the program's temporaries (`report`).

    `funcs`: the program's functions, to tell a call of a kernel from other calls.
    `hoist_permutes=False` issues each collective permute where it is written instead of as soon
    as its operand exists: what libtpu's scheduler does when hoisting would not fit in HBM
    (`stage1.memory.predict_within_hbm`).
    `async_collective_fusion`: libtpu runs an all-gather of a computed activation as an async
    collective fusion, holding a second buffer of its result outside the assignment
    (`HardwareProfile.async_collective_fusion`; flags that turn it off are not seen here, which
    leaves the estimate high).
    """

    def __init__(self, funcs: Mapping[str, Func], hoist_permutes: bool = True, async_collective_fusion: bool = True):
        self.funcs = funcs
        self.hoist_permutes = hoist_permutes
        self.async_collective_fusion = async_collective_fusion
        self.timeline = Timeline()
        self.hoisted_permutes = 0
        self._regions: list[_RegionBuffers] = []
        self._kernel_funcs: dict[str, bool] = {}
        self._handlers: dict[type, Callable[[Any], None]] = {
            OpStarted: self._op_started, OpFinished: self._op_finished, CollectiveIssued: self._collective_issued,
            RegionEntered: self._region_entered, RegionLeft: self._region_left,
        }

    def feed(self, event: ValueEvent) -> None:
        handler = self._handlers.get(type(event))
        if handler is None:
            raise EventStreamError(f"not a value event: {event!r}")
        handler(event)

    def feed_all(self, events: Iterable[ValueEvent]) -> HbmModel:
        for e in events:
            self.feed(e)
        return self

    def report(self) -> HbmReport:
        tl = self.timeline
        outside = tl.live_peak(outside=True)
        return HbmReport(tl.packed_bytes() + outside, outside, tl.live_peak(), self.hoisted_permutes)

    # -- regions
    def _region_entered(self, e: RegionEntered) -> None:
        tl = self.timeline
        enclosing = self._regions[-1] if self._regions else None
        running = enclosing.current if enclosing is not None else None
        owned: dict[int, float] = {}
        loop_state = None
        if enclosing is not None and running is not None:
            if running.op.name == "sdy.manual_computation":
                owned = self._shard_map_arguments(enclosing, running, e.region)
            elif running.op.name == "stablehlo.while" and e.region is running.op.regions[1]:
                loop_state = tl.open(self._loop_state_bytes(enclosing, running), label="loop state")
        region = e.region
        fused_until, written_out = fusion_ends(region)
        issued_at = permute_issue_points(region) if self.hoist_permutes else {}
        rb = _RegionBuffers(region, set(region.args), last_uses(region), fused_until, written_out, issued_at,
                            {r for points in issued_at.values() for r, _, _ in points}, tl.now, set(owned),
                            {a.id: a.bytes for a in e.args}, loop_state=loop_state)
        self.hoisted_permutes += len(rb.issued)
        types = dict(zip(region.args, region.arg_types, strict=True))
        for a, b in owned.items():
            rb.handles[a] = [tl.open(b, label=f"written region argument {types.get(a)}")]
            rb.live[a], rb.free_at[a], rb.backing[a] = b, rb.last_use.get(a, 0), (a,)
        self._regions.append(rb)
        self._issue_permutes(rb, -1)  # permutes of the region's arguments

    def _shard_map_arguments(self, enclosing: _RegionBuffers, running: _OpInProgress, body: Region) -> dict[int, float]:
        """A shard_map's body: its operands' reshards are transients of the op; nothing fuses into
        the body, so a computed operand is written out, in the body's sharding, as an argument the
        body owns until its last use there (ring attention's q, k and v, every step)."""
        self.timeline.momentary(running.reshard_bytes, label="shard_map operands resharded")
        op = running.op
        return {a: t.bytes for v, a, t in zip(op.operands, body.args, body.arg_types, strict=True)
                if v in enclosing.computed and t is not None}

    @staticmethod
    def _loop_state_bytes(enclosing: _RegionBuffers, running: _OpInProgress) -> float:
        """The loop state has buffers for the whole loop (the body updates them in place). A
        carried value already owns a buffer when the enclosing region materialized it, or when it
        is an argument there (a parameter, or an outer loop's state); a prefetchable invariant
        (the stacked weights of a scan) is read where it is. Otherwise (a fused producer) the
        state is new."""
        op = running.op
        body = op.regions[1]
        ret = body.ops[-1] if body.ops else None
        invariant = {k for k, a in enumerate(body.args)
                     if ret is not None and k < len(ret.operands) and ret.operands[k] == a
                     and running.operands[k].prefetchable}
        return sum(val.bytes for k, (v, val) in enumerate(zip(op.operands, running.operands, strict=True))
                   if v not in enclosing.args and v not in enclosing.live and k not in invariant)

    def _region_left(self, e: RegionLeft) -> None:
        tl = self.timeline
        rb = self._region(e)
        self._regions.pop()
        if e.returned:
            for held in rb.handles.values():  # what is still live ends with the region
                for h in held:
                    tl.close(h)
        if rb.loop_state is not None:
            tl.close(rb.loop_state)
            tl.tick()  # the loop's results take the state's buffers over
        caller = self._regions[-1].current if self._regions else None
        if caller is not None:
            caller.walked = True
            ret = rb.region.ops[-1] if rb.region.ops else None
            if caller.op.name == "func.call" and ret is not None and ret.name in RETURN_OPS:
                caller.returns_computed = tuple(v in rb.computed for v in ret.operands)

    # -- ops
    def _region(self, event: ValueEvent) -> _RegionBuffers:
        if not self._regions:
            raise EventStreamError(f"{type(event).__name__} outside any region")
        return self._regions[-1]

    def _op_started(self, e: OpStarted) -> None:
        rb = self._region(e)
        rb.index += 1
        rb.current = _OpInProgress(e.op, self.timeline.tick(), e.operands)
        self._write_kernel_operands(rb, rb.current)

    def _collective_issued(self, e: CollectiveIssued) -> None:
        """Scratch outside the assignment (libtpu's all-reduce and all-to-all take a buffer of
        their payload); a reshard's all-to-all or all-gather result is a transient of its op."""
        tl = self.timeline
        if e.kind in ("all-reduce", "all-to-all") and e.cause != "sharded-reduce":
            tl.momentary(e.payload_bytes, outside=True, label=f"{e.kind} scratch ({e.cause})")
        running = self._regions[-1].current if self._regions else None
        if running is not None and e.cause == "reshard" and e.kind in ("all-to-all", "all-gather"):
            running.reshard_bytes = max(running.reshard_bytes, e.result_bytes)

    def _op_finished(self, e: OpFinished) -> None:
        rb = self._region(e)
        running, op, i = rb.current, e.op, rb.index
        if running is None or running.op is not op:
            raise EventStreamError(f"{op.name} finished without starting")
        tl = self.timeline
        for v in e.results:
            rb.value_bytes[v.id] = v.bytes
        transient = self._transient(running, e.results)
        materialize = self._materializes(op, transient)
        if op.results and op.results[0] in rb.issued:
            transient = 0.0  # an issued permute: its buffer is already live
        self._fetch_gathered_weights(rb, op)
        if materialize:
            opened = self._open_results(rb, running, e.results)
        else:
            opened = 0.0
            self._fuse_results(rb, op, i)
        # the op's transients beside its results: a walked region recorded its own buffers
        if not running.walked:
            tl.momentary(transient - opened, at=running.tick, label=f"transient of {op.name}")
        for h in running.written_handles:  # the call has read them
            tl.close(h)
        self._issue_permutes(rb, i)
        for dead in [v for v in rb.live if rb.free_at[v] <= i]:
            rb.live.pop(dead)
            for h in rb.handles.pop(dead, ()):
                tl.close(h)
        rb.current = None

    def _transient(self, running: _OpInProgress, results: tuple[Value, ...]) -> float:
        """What the op needs beside its live operands while it runs: its reshards' largest
        result; a written collective's results; a relayout reshape's copy of its result."""
        op = running.op
        if op.name in COLLECTIVE_OPS:
            return sum(v.bytes for v in results)
        if op.name == "stablehlo.reshape" and relayout(op.operand_type(0).shape, op.result_type(0).shape):
            # not a bitcast on TPU: libtpu writes the operand out, reshapes it into a new buffer and
            # copies that into a tiled layout (two buffers of the result's size at a time)
            return running.reshard_bytes + results[0].bytes
        return running.reshard_bytes

    def _materializes(self, op: Op, transient: float) -> bool:
        """Whether the op's results are written to buffers of their own (else they fuse)."""
        if op.name in CONSTRAINT_OPS:
            return transient > 0  # a constraint that gathers or moves an axis writes the new layout
        if op.name == "stablehlo.reshape":
            return relayout(op.operand_type(0).shape, op.result_type(0).shape)
        if op.name == "func.call":
            # a kernel's outputs are buffers the caller holds until their last use there (ring
            # attention keeps every step's output for the final combine); other calls pass their
            # values through
            return self._is_kernel_call(op)
        if op.name in BUFFER_OPS:
            return True
        if op.name in FUSED_OPS:
            return False
        # elementwise ops fuse into their consumers; ops without a rule (gather, scatter, sort) do not
        return bool(op.regions) or not same_shape(op)

    def _is_kernel_call(self, op: Op) -> bool:
        """An opaque kernel, or a call of a function that only wraps kernels (how Pallas kernels
        are lowered: views and the kernel's custom calls). A called function that also takes
        buffers of its own (a transformer block wrapped by `jax.checkpoint`) is inlined by XLA, its
        operands fused into what it computes like any other value's."""
        if op.name == "stablehlo.custom_call":
            return True
        if op.name != "func.call":
            return False
        callee = op.attrs["callee"]
        if callee not in self._kernel_funcs:
            names = called_op_names(self.funcs, self.funcs[callee].body)
            self._kernel_funcs[callee] = ("stablehlo.custom_call" in names
                                          and not names & (BUFFER_OPS - {"stablehlo.custom_call"}))
        return self._kernel_funcs[callee]

    def _operands_to_write(self, rb: _RegionBuffers, op: Op) -> list[int]:
        """The operands of an opaque kernel or an all-to-all computed by fused ops (nothing fuses
        into them), in order. A value computed from written region arguments alone is what they
        were written as (XLA fuses across the shard_map boundary, in the kernel's form)."""
        if not (self._is_kernel_call(op) or op.name in UNFUSED_COLLECTIVES):
            return []
        return [v for v in dict.fromkeys(op.operands)
                if v in rb.computed and not (rb.backing.get(v) and set(rb.backing[v]) <= rb.owned)]

    def _write_kernel_operands(self, rb: _RegionBuffers, running: _OpInProgress) -> None:
        """Write a kernel's computed operands out before it runs (a pad to the kernel's blocks, a
        scale, a cast; views cost nothing), one after the other, each in a buffer of its own until
        the call ends. The buffers an operand is computed from die as it is written when nothing
        after reads them: libtpu frees the gathered K as it writes K padded to the splash kernel's
        `block_kv`, before it pads V (docs/notebook/memory-model.md, "Pad copies in front of the
        splash kernel")."""
        op, tl = running.op, self.timeline
        pending = self._operands_to_write(rb, op)
        if not pending:
            return
        size = {v: val.bytes for v, val in zip(op.operands, running.operands, strict=True)}
        read_directly = {b for v in op.operands if v not in pending for b in rb.backing.get(v, ())}
        for k, v in enumerate(pending):
            tl.tick()
            running.written_handles.append(tl.open(size[v], label=f"{op.name} operand written out"))
            still_read = read_directly.union(*(rb.backing.get(w, ()) for w in pending[k + 1:]))
            for b in rb.backing.get(v, ()):
                if b in rb.live and rb.free_at[b] <= rb.index and b not in still_read:
                    rb.live.pop(b)
                    for h in rb.handles.pop(b, ()):
                        tl.close(h)
        tl.tick()  # the call runs once its operands are written

    def _fetch_gathered_weights(self, rb: _RegionBuffers, op: Op) -> None:
        """A weight gathered by a constraint is live from `WEIGHT_PREFETCH_OPS` buffer-writing ops
        before its first use (or from the region's start)."""
        for v in {v for v in op.operands if v in rb.prefetched}:
            b, label = rb.prefetched.pop(v)
            ticks = rb.compute_ticks
            ahead = ticks[-WEIGHT_PREFETCH_OPS] if len(ticks) >= WEIGHT_PREFETCH_OPS else rb.start
            rb.handles[v] = [self.timeline.open(b, start=ahead, label=label)]

    def _open_results(self, rb: _RegionBuffers, running: _OpInProgress, results: tuple[Value, ...]) -> float:
        """Buffers for a materialized op's results; returns the bytes opened now."""
        tl, op = self.timeline, running.op
        async_copy = (self.async_collective_fusion and op.name in COLLECTIVE_OPS
                      and op.attrs["collective"].kind == "all-gather" and not running.operands[0].prefetchable)
        opened = 0.0
        if running.walked:
            tl.tick()  # the callee's buffers for these results end with it: hand them over
        for v, t in zip(results, op.result_types, strict=True):
            r = v.id
            rb.backing[r] = (r,)
            if r in rb.last_use and r not in rb.live:
                b = v.bytes
                if op.name == "sdy.sharding_constraint" and v.prefetchable:
                    rb.prefetched[r] = (b, f"gathered weight {t}")  # opened ahead of its first use
                else:
                    rb.handles[r] = [tl.open(b, label=f"{op.name} {t}")]
                    opened += b
                    if async_copy:
                        # libtpu runs an all-gather of a computed value as an async collective
                        # fusion, which holds a second buffer of the result outside the assignment
                        rb.handles[r].append(tl.open(b, outside=True, label=f"async copy {t}"))
                        opened += b
                rb.live[r] = b
                rb.free_at[r] = rb.last_use[r]
        if op.name != "sdy.sharding_constraint" and not running.walked:
            rb.compute_ticks.append(running.tick)
        return opened

    def _fuse_results(self, rb: _RegionBuffers, op: Op, i: int) -> None:
        """A fused op's results own no buffer: they keep the buffers they read live until the
        fusion ends, or are written out once when several fusions read them."""
        if op.name not in NON_COMPUTING or any(v in rb.computed for v in op.operands):
            rb.computed.update(op.results)
        elif rb.current is not None:
            # returns_computed is empty but for a walked func.call: a view op or unwalked call computes nothing
            rb.computed.update(r for r, c in zip(op.results, rb.current.returns_computed, strict=False) if c)
        reads = tuple(sorted({b for v in op.operands for b in rb.backing.get(v, ()) if b in rb.live}))
        for r, t in zip(op.results, op.result_types, strict=True):
            rb.backing[r] = reads
            if op.name in VIEW_OPS:
                rb.free_at.update((b, max(rb.free_at[b], rb.last_use.get(r, i))) for b in reads)
            elif r in rb.written_out and r in rb.computed and reads:
                self._write_out(rb, r, t, reads, i)
            elif r in rb.fused_until:
                rb.free_at.update((b, max(rb.free_at[b], rb.fused_until[r])) for b in reads)

    def _write_out(self, rb: _RegionBuffers, r: int, t: TensorType | None, reads: tuple[int, ...], i: int) -> None:
        """A fused value read by several fusions: XLA writes it out once (a residual sum, a
        normalized activation feeding q, k and v) rather than recompute it, over an operand buffer
        of its size that dies here (XLA's buffer assignment shares an elementwise fusion's output
        with such an input)."""
        b = rb.value_bytes.get(r, 0.0)
        dying = [v for v in reads if rb.free_at[v] <= i and rb.live[v] == b and len(rb.handles.get(v, ())) == 1]
        if dying:
            rb.handles[r] = rb.handles.pop(dying[0])
            rb.live.pop(dying[0])
        else:
            rb.handles[r] = [self.timeline.open(b, label=f"fused written out {t}")]
        rb.live[r], rb.free_at[r], rb.backing[r] = b, rb.last_use[r], (r,)

    def _issue_permutes(self, rb: _RegionBuffers, at: int) -> None:
        """Collective permutes issued right after op `at`: their results are live from now."""
        for r, t, operand in rb.issued_at.get(at, ()):
            if r in rb.last_use:
                # a permute's result has its operand's type and sharding
                b = rb.value_bytes[operand] if operand in rb.value_bytes else (t.bytes if t is not None else 0.0)
                rb.live[r] = b
                rb.free_at[r] = rb.last_use[r]
                rb.handles[r] = [self.timeline.open(b, label=f"permute {t}")]
