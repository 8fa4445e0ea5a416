"""Build the `Program` (see `aoizora.hlo.program`) from a parsed `HloModule`.

One pass over the entry computation in printed order (the compiler's schedule). Calls are
inlined; while-loop bodies are emitted once, inline, followed by a ``loop`` node, with every
body node's multiplicity multiplied by the loop's trip count. Free ops (parameter, constant,
tuple, get-tuple-element, bitcast, ...) produce no node: the builder tracks, for each HLO value,
which nodes produced it (element by element through tuples) so dependencies skip them.

How collectives are recognised:

* sync ops ``all-reduce``, ``all-gather``, ``reduce-scatter``, ``all-to-all``,
  ``collective-permute`` (and ``ragged-all-to-all`` as all-to-all, ``collective-broadcast``
  as all-gather-like one-to-all traffic is not modelled: it is listed as unknown);
* ``*-start`` / ``*-done`` pairs, and ``async-start`` / ``async-done`` wrapping a collective;
* collective fusions: a ``fusion`` whose body contains a collective (libtpu fuses
  all-reduce + dynamic-slice into ``SingleInputAllReduceScatterFusion``, i.e. a reduce-scatter:
  reported as kind reduce-scatter when the fusion's result is the all-reduce's divided by the
  group size);
* async collective fusions: the ``AsyncCollectiveStart`` / ``AsyncCollectiveDone`` custom
  calls (or fusions containing them) that libtpu emits for collective matmul; the collective
  inside the start's fused body gives kind, groups and sizes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Union

from aoizora.errors import HloModelError
from aoizora.hlo import attrs as A
from aoizora.hlo.costs import (
    FusionCoster,
    estimated_cycles,
    hbm_size,
    instruction_flops,
    io_bytes,
)
from aoizora.hlo.instructions import (
    ASYNC_COLLECTIVE_DONE,
    ASYNC_COLLECTIVE_START,
    ASYNC_DONES,
    ASYNC_STARTS,
    COLLECTIVE_OPCODES,
    FREE_CUSTOM_CALLS,
    FREE_OPS,
    KNOWN_OPCODES,
    algorithm_config,
    array_bytes,
    async_fusion_config,
    branch_names,
    collective_kind,
    collective_shapes,
    fused_compute_ops,
    kernel_name,
    op_name,
    traffic,
    unquote,
)
from aoizora.hlo.parser import Computation, HloModule, Instruction, parse_hlo
from aoizora.hlo.program import (
    Collective,
    CollectiveKind,
    CollectiveMode,
    Loop,
    Node,
    NodeKind,
    OpaqueCostHook,
    OpaqueOp,
    Program,
)
from aoizora.hlo.shapes import Shape
from aoizora.hlo.trip_count import trip_count

# A value's producers: a tuple of node indices, or a list of element values for tuples.
Val = Union[tuple[int, ...], "TupleVal"]


class TupleVal(list):
    """Producers of a tuple value, element by element."""


def build_program(
    module: HloModule | str,
    *,
    opaque_cost: OpaqueCostHook | None = None,
    device_ids: Sequence[int] | None = None,
) -> Program:
    """The loop-aware program graph of a compiled module (text or parsed).

    ``opaque_cost`` costs custom calls the compiler cannot (see `OpaqueOp`); ``device_ids``
    optionally records the device assignment (logical id -> runtime device id).
    """
    if isinstance(module, str):
        module = parse_hlo(module)
    builder = _Builder(module)
    builder.run()
    prog = Program(
        module_name=module.name,
        num_partitions=module.num_partitions,
        replica_count=module.replica_count,
        nodes=builder.nodes,
        collectives=builder.collectives,
        loops=builder.loops,
        unknown_ops=builder.unknown,
        device_ids=tuple(device_ids) if device_ids is not None else None,
        _opaque_ops=builder.opaque_ops,
    )
    if opaque_cost is not None:
        prog = prog.with_opaque_cost(opaque_cost)
    return prog


def program_from_compiled(compiled: Any, *, opaque_cost: OpaqueCostHook | None = None) -> Program:
    """The program of a ``jax`` compiled object (``jax.jit(f).lower(...).compile()``).

    Logical device ids are positions in the executable's device assignment; for a ``jit`` over
    a ``Mesh`` that is ``mesh.devices.flat`` order, recorded here as ``device_ids``.
    """
    text = compiled.as_text()
    device_ids = None
    try:
        shardings = compiled.input_shardings[0]
        if shardings:
            set_ = shardings[0]._device_assignment
            device_ids = [d.id for d in set_]
    except Exception:  # pragma: no cover - older/newer jax without these attributes
        device_ids = None
    return build_program(text, opaque_cost=opaque_cost, device_ids=device_ids)


@dataclass(frozen=True, slots=True)
class _Site:
    """Where the walk emits a node: the instruction, its computation, the nodes it depends on,
    its multiplicity (enclosing trip counts multiplied in) and its innermost loop."""

    comp: Computation
    inst: Instruction
    deps: tuple[int, ...]
    mult: int
    loop: int | None


class _Builder:
    def __init__(self, module: HloModule) -> None:
        self.m = module
        self.num_devices = module.num_partitions * module.replica_count
        self.nodes: list[Node] = []
        self.collectives: list[Collective] = []
        self.loops: list[Loop] = []
        self.unknown: list[str] = []
        self.opaque_ops: dict[int, OpaqueOp] = {}
        self.fusion = FusionCoster(module.computations)
        self._pending: dict[int, int] = {}  # start node index -> collective index
        self._fusions_checked: dict[str, list[str]] = {}
        self._depth = 0

    # -- walking --------------------------------------------------------------------------
    def run(self) -> None:
        self.walk(self.m.entry, [], 1, None)
        for c in self.collectives:
            if c.start != c.done:
                c.overlap = tuple(
                    i
                    for i in range(c.start + 1, c.done)
                    if self.nodes[i].kind in (NodeKind.COMPUTE, NodeKind.OPAQUE, NodeKind.UNKNOWN)
                )

    def _check_devices(
        self, inst: Instruction, groups: tuple[tuple[int, ...], ...], pairs: tuple[tuple[int, int], ...]
    ) -> None:
        """Every device a collective names must be one of the module's, each at most once per group set."""
        named = [d for g in groups for d in g] + [d for p in pairs for d in p]
        outside = sorted({d for d in named if not 0 <= d < self.num_devices})
        if outside:
            raise HloModelError(
                f"{inst.opcode} {inst.name!r} names device(s) {outside[:4]} but the module has {self.num_devices} "
                f"(num_partitions x replica_count); pass the HLO exactly as the compiler printed it"
            )
        flat = [d for g in groups for d in g]
        if len(set(flat)) != len(flat):
            raise HloModelError(
                f"{inst.opcode} {inst.name!r} lists a device in more than one replica group; pass the HLO "
                "exactly as the compiler printed it"
            )

    def walk(self, comp: Computation, args: list[Val], mult: int, loop: int | None) -> Val:
        """Emit the nodes of ``comp`` with its parameters bound to ``args``; return its root."""
        self._depth += 1
        if self._depth > 64:
            raise HloModelError(
                f"calls nested deeper than 64 levels at {comp.name!r} (a computation that calls itself?); "
                "pass the HLO exactly as the compiler printed it"
            )
        env: dict[str, Val] = {}
        for inst in comp.instructions:
            env[inst.name] = self.instruction(comp, inst, env, args, mult, loop)
        self._depth -= 1
        assert comp.root is not None
        return env[comp.root.name]

    def operand_vals(self, comp: Computation, inst: Instruction, env: Mapping[str, Val]) -> list[Val]:
        out = []
        for o in inst.operands:
            v = env.get(o)
            if v is None:
                raise HloModelError(
                    f"instruction {inst.name!r} in {comp.name!r} uses {o!r}, which is not defined "
                    "before it"
                )
            out.append(v)
        return out

    def operand_shapes(self, comp: Computation, inst: Instruction) -> list[Shape]:
        return [comp.by_name[o].shape for o in inst.operands if o in comp.by_name]

    def instruction(
        self, comp: Computation, inst: Instruction, env: Mapping[str, Val], args: list[Val], mult: int,
        loop: int | None,
    ) -> Val:
        """The value of ``inst``: free ops pass their operands' producers on, the others emit nodes."""
        op = inst.opcode
        vals = self.operand_vals(comp, inst, env)
        if op in FREE_OPS:
            return _free_value(inst, vals, args)
        if op == "while":
            return self.while_loop(comp, inst, vals, mult, loop)
        if op == "call":
            callee = self.m.computation(inst.attr("to_apply") or inst.attr("calls") or "")
            return self.walk(callee, vals, mult, loop)
        site = _Site(comp, inst, _deps(vals), mult, loop)
        if op in COLLECTIVE_OPCODES:
            return self.collective(site, CollectiveMode.SYNC, inst)
        if op in ASYNC_STARTS:
            return self.collective(site, CollectiveMode.ASYNC, inst)
        if op in ASYNC_DONES or (op == "async-done" and self._is_pending(site.deps)):
            return self.collective_done(site)
        if op in ("async-start", "call-start"):
            return self.async_call(site, vals)
        if op == "call-done":
            return self.collective_done(site) if self._is_pending(site.deps) else site.deps
        if op in ("async-update", "async-done"):
            return site.deps
        if op == "fusion":
            return self.fusion_op(site)
        if op == "custom-call":
            return self.custom_call(site)
        if op == "conditional":
            return self.conditional(site)
        if op not in KNOWN_OPCODES:
            return self.opaque(site, None)
        return self.compute(site)

    def conditional(self, site: _Site) -> Val:
        """A conditional: the custom kernels of the branch that calls the most (by I/O bytes; a
        Pallas kernel picked at run time, say), each an opaque node as it is outside a conditional
        (the branches' FLOPs cannot count a kernel), then one compute node costed as the costliest
        branch's other work."""
        deps = site.deps
        for comp, call in self._branch_kernels(branch_names(site.inst)):
            target = unquote(call.attr("custom_call_target") or "")
            deps = (self.opaque(_Site(comp, call, deps, site.mult, site.loop), target)[0],)
        return self.compute(_Site(site.comp, site.inst, deps, site.mult, site.loop))

    def _branch_kernels(self, branches: list[str]) -> list[tuple[Computation, Instruction]]:
        """The custom kernels of the branch whose kernels read and write the most (none without any)."""
        best: list[tuple[Computation, Instruction]] = []
        most = 0
        for comp in map(self.m.computation, branches):
            calls = [(comp, i) for i in comp.instructions if i.opcode == "custom-call"
                     and unquote(i.attr("custom_call_target") or "") not in FREE_CUSTOM_CALLS]
            size = sum(io_bytes(i, self.operand_shapes(comp, i)) for _, i in calls)
            if size > most:
                best, most = calls, size
        return best

    def async_call(self, site: _Site, vals: list[Val]) -> Val:
        """An ``async-start``, or a ``call-start`` (TPU7x: libtpu offloads a collective to the
        SparseCores as an asynchronous call, ``async_execution_thread="sparsecore"``, of a
        computation whose root is the collective): a collective when the callee's root is one."""
        inst = site.inst
        if inst.opcode == "async-start":
            callee = self.m.computation(inst.attr("calls") or "")
        else:
            callee = self.m.computation(inst.attr("to_apply") or inst.attr("calls") or "")
        wrapped = callee.root
        assert wrapped is not None
        if wrapped.opcode in COLLECTIVE_OPCODES:
            return self.collective(site, CollectiveMode.ASYNC, wrapped, callee)
        if inst.opcode == "async-start":
            return self.compute(site)
        return self.walk(callee, vals, site.mult, site.loop)

    def fusion_op(self, site: _Site) -> Val:
        """A fusion: compute, or a collective's start, step or done, or a collective fusion."""
        inner = self._fused_collective(site.inst)
        if inner is None:
            return self.compute(site)
        callee, coll, role = inner
        if role == "done" and self._is_pending(site.deps):
            return self.collective_done(site)
        if role == "step" and self._is_pending(site.deps):
            return self.collective_step(site)
        mode = CollectiveMode.ASYNC_FUSION if role == "start" else CollectiveMode.FUSION
        return self.collective(site, mode, coll, callee)

    def custom_call(self, site: _Site) -> Val:
        """A custom call: an async collective's start or done, buffer bookkeeping, or an opaque kernel."""
        target = unquote(site.inst.attr("custom_call_target") or "")
        if target == ASYNC_COLLECTIVE_START:
            coll = self._collective_in_callees(site.inst)
            if coll is not None:
                return self.collective(site, CollectiveMode.ASYNC_FUSION, coll[1], coll[0])
        if target == ASYNC_COLLECTIVE_DONE:
            return self.collective_done(site)
        if target in FREE_CUSTOM_CALLS:
            return self.compute(site)
        return self.opaque(site, target)

    # -- node constructors ----------------------------------------------------------------
    def _node(self, site: _Site, kind: NodeKind) -> Node:
        inst = site.inst
        node = Node(
            index=len(self.nodes),
            name=inst.name,
            opcode=inst.opcode,
            kind=kind,
            computation=site.comp.name,
            shape=inst.shape,
            operand_shapes=tuple(self.operand_shapes(site.comp, inst)),
            deps=site.deps,
            multiplicity=site.mult,
            loop=site.loop,
            estimated_cycles=estimated_cycles(inst.backend_config),
            backend_config=inst.backend_config if isinstance(inst.backend_config, Mapping) else None,
        )
        self.nodes.append(node)
        return node

    def _unknown_in_fusion(self, inst: Instruction) -> None:
        """List unknown opcodes inside a fusion body (its FLOPs cannot count them)."""
        callee = inst.attr("calls")
        if not callee:
            return
        key = callee.lstrip("%")
        if key in self._fusions_checked:
            found = self._fusions_checked[key]
        else:
            found = []
            stack = [self.m.computation(key)]
            seen = {key}
            while stack:
                body = stack.pop()
                for i in body.instructions:
                    if i.opcode not in KNOWN_OPCODES:
                        found.append(f"{i.name} ({i.opcode})")
                    sub = i.attr("calls") if i.opcode == "fusion" else None
                    if sub and sub.lstrip("%") not in seen:
                        seen.add(sub.lstrip("%"))
                        stack.append(self.m.computation(sub))
            self._fusions_checked[key] = found
        for f in found:
            self.unknown.append(f"{f} in fusion {inst.name}")

    def compute(self, site: _Site) -> Val:
        inst = site.inst
        node = self._node(site, NodeKind.COMPUTE)
        if inst.opcode == "fusion":
            self._unknown_in_fusion(inst)
        shapes = list(node.operand_shapes)
        if inst.opcode == "conditional":
            branches = branch_names(inst)
            node.flops = max((self.fusion.flops(b) for b in branches), default=0.0)
            if any(
                i.opcode in COLLECTIVE_OPCODES or i.opcode in ASYNC_STARTS
                for b in branches
                for i in self.m.computation(b).instructions
            ):  # not modelled: say so rather than drop it silently
                self.unknown.append(f"{inst.name} (conditional with collectives in its branches)")
        else:
            node.flops = instruction_flops(inst, shapes, self.fusion.flops)
        elems = inst.shape.tuple_shapes
        if inst.opcode == "copy-start" and elems:
            # (destination, source alias, context): read the source, write the destination
            node.hbm_bytes = sum(hbm_size(s) for s in shapes) + hbm_size(elems[0])
        elif inst.opcode == "slice-start" and len(elems) > 1:
            # ((operands), result, context): read the slice from the operand, write the result
            src_in_hbm = bool(shapes) and shapes[0].memory_space == 0
            node.hbm_bytes = (elems[1].byte_size if src_in_hbm else 0) + hbm_size(elems[1])
        else:
            node.hbm_bytes = io_bytes(inst, shapes)
        node.fusion_kind = inst.attr("kind")
        if inst.opcode == "custom-call":
            node.custom_call_target = unquote(inst.attr("custom_call_target") or "")
        return (node.index,)

    def opaque(self, site: _Site, target: str | None) -> Val:
        inst = site.inst
        node = self._node(site, NodeKind.OPAQUE if target is not None else NodeKind.UNKNOWN)
        node.hbm_bytes = io_bytes(inst, list(node.operand_shapes))
        node.custom_call_target = target
        if target is None:
            self.unknown.append(f"{inst.name} ({inst.opcode})")
        self.opaque_ops[node.index] = OpaqueOp(
            name=inst.name,
            target=target if target is not None else inst.opcode,
            operand_shapes=node.operand_shapes,
            result_shape=inst.shape,
            backend_config=inst.backend_config,
            kernel_name=kernel_name(inst),
            op_name=op_name(inst),
            frontend_attributes=inst.attr("frontend_attributes"),
        )
        return (node.index,)

    def collective(
        self, site: _Site, mode: CollectiveMode, coll_inst: Instruction, inner_comp: Computation | None = None
    ) -> Val:
        """Emit a collective's node (its start, when asynchronous) and record its `Collective`.

        ``coll_inst`` is the collective op: ``site.inst`` itself, or the op inside ``inner_comp``,
        the computation an async or SparseCore call or a collective fusion wraps.
        """
        inst = site.inst
        sync = mode in (CollectiveMode.SYNC, CollectiveMode.FUSION)
        node = self._node(site, NodeKind.COLLECTIVE if sync else NodeKind.COLLECTIVE_START)
        in_shapes, res_shape = collective_shapes(coll_inst, inner_comp if inner_comp is not None else site.comp)
        operand_bytes = sum(s.byte_size for s in in_shapes)
        result_bytes = res_shape.byte_size
        kind = collective_kind(coll_inst.opcode, operand_bytes, result_bytes)
        groups, pairs = self._participants(coll_inst, kind)
        group_size = len(groups[0]) if groups else 2
        fused_compute: tuple[str, ...] = ()
        if inner_comp is not None and mode is not CollectiveMode.ASYNC:
            fused_compute = fused_compute_ops(inner_comp, coll_inst)
            # all-reduce + dynamic-slice fused together is a reduce-scatter
            outer = inst.shape.byte_size
            if kind is CollectiveKind.ALL_REDUCE and group_size > 1 and outer * group_size == result_bytes:
                kind = CollectiveKind.REDUCE_SCATTER
                result_bytes = outer
            node.flops = self.fusion.flops(inner_comp.name)
        payload, send, recv = traffic(kind, operand_bytes, result_bytes, group_size, pairs)
        dtype = in_shapes[0].leaves()[0].dtype if in_shapes and in_shapes[0].leaves() else res_shape.dtype
        channel = coll_inst.attr("channel_id")
        coll = Collective(
            index=len(self.collectives), name=inst.name, kind=kind, mode=mode, start=node.index, done=node.index,
            groups=groups, source_target_pairs=pairs, dtype=dtype, operand_bytes=operand_bytes,
            result_bytes=result_bytes, payload_bytes=payload,
            array_bytes=array_bytes(kind, operand_bytes, result_bytes, group_size),
            send_bytes=send, recv_bytes=recv, group_size=group_size, multiplicity=site.mult, loop=site.loop,
            channel_id=int(channel) if channel and channel.isdigit() else None,
            dimensions=A.parse_int_list(coll_inst.attr("dimensions")),
            algorithm=algorithm_config(inst, coll_inst), fused_compute=fused_compute,
        )
        afc = async_fusion_config(coll_inst)
        if afc is not None:
            coll.async_fusion_configs = (afc,)
        node.collective = coll.index
        node.hbm_bytes = io_bytes(inst, list(node.operand_shapes)) if sync else operand_bytes
        self.collectives.append(coll)
        if not sync:
            self._pending[node.index] = coll.index
        return (node.index,)

    def _participants(
        self, coll_inst: Instruction, kind: CollectiveKind
    ) -> tuple[tuple[tuple[int, ...], ...], tuple[tuple[int, int], ...]]:
        """(replica groups, source-target pairs) of a collective, checked against the module's devices."""
        groups: tuple[tuple[int, ...], ...] = ()
        pairs: tuple[tuple[int, int], ...] = ()
        if kind is CollectiveKind.COLLECTIVE_PERMUTE:
            pairs = A.parse_pairs(coll_inst.attr("source_target_pairs"))
        else:
            groups = A.parse_replica_groups(
                coll_inst.attr("replica_groups"), coll_inst.attr("device_ids"), self.num_devices
            )
        self._check_devices(coll_inst, groups, pairs)
        return groups, pairs

    def _is_pending(self, deps: tuple[int, ...]) -> bool:
        return any(d in self._pending for d in deps)

    def collective_step(self, site: _Site) -> Val:
        """An async collective fusion: compute that also advances a started collective."""
        ci = next(self._pending[d] for d in site.deps if d in self._pending)
        val = self.compute(site)
        node = self.nodes[val[0]]
        node.collective = ci
        coll = self.collectives[ci]
        coll.steps += (node.index,)
        inner = self._fused_collective(site.inst)
        afc = async_fusion_config(inner[1]) if inner else None
        if afc is not None:
            coll.async_fusion_configs += (afc,)
        self._pending[node.index] = ci  # the done reads the buffers through this node
        return val

    def collective_done(self, site: _Site) -> Val:
        starts = [d for d in site.deps if d in self._pending]
        node = self._node(site, NodeKind.COLLECTIVE_DONE)
        if not starts:  # a done whose start this walk did not see: keep it, costless
            node.kind = NodeKind.COMPUTE
            return (node.index,)
        ci = self._pending[starts[0]]
        for k in [k for k, v in self._pending.items() if v == ci]:
            del self._pending[k]
        coll = self.collectives[ci]
        coll.done = node.index
        node.collective = ci
        node.hbm_bytes = coll.result_bytes
        return (node.index,)

    def _fused_collective(
        self, inst: Instruction
    ) -> tuple[Computation, Instruction, str] | None:
        """(body, collective op, role) of a fusion holding a collective, else None.

        role: "start" / "done" when the body ends in libtpu's AsyncCollectiveStart / Done
        custom call; "step" for an async collective fusion (compute fused with steps of a
        started collective: its collective op carries ``async_collective_fusion_config``);
        "fusion" for a plain collective fusion.
        """
        callee = inst.attr("calls")
        if not callee:
            return None
        comp = self.m.computation(callee)
        coll: Instruction | None = None
        role = "fusion"
        for i in comp.instructions:
            if coll is None and (i.opcode in COLLECTIVE_OPCODES or i.opcode in ASYNC_STARTS):
                coll = i
                bc = i.backend_config
                if isinstance(bc, Mapping) and "async_collective_fusion_config" in bc:
                    role = "step"
            if i.opcode == "custom-call":
                target = unquote(i.attr("custom_call_target") or "")
                if target == ASYNC_COLLECTIVE_START:
                    role = "start"
                elif target == ASYNC_COLLECTIVE_DONE:
                    role = "done"
        if coll is None:
            return None
        return comp, coll, role

    def _collective_in_callees(self, inst: Instruction) -> tuple[Computation, Instruction] | None:
        for key in ("called_computations", "calls", "to_apply"):
            raw = inst.attr(key)
            if not raw:
                continue
            for name in raw.strip("{}").split(","):
                name = name.strip()
                if not name:
                    continue
                comp = self.m.computation(name)
                for i in comp.instructions:
                    if i.opcode in COLLECTIVE_OPCODES:
                        return comp, i
        return None

    # -- loops ----------------------------------------------------------------------------
    def while_loop(
        self, comp: Computation, inst: Instruction, vals: list[Val], mult: int, parent: int | None
    ) -> Val:
        body = self.m.computation(inst.attr("body") or "")
        cond = self.m.computation(inst.attr("condition") or "")
        trip, source = trip_count(self.m, comp, inst, body, cond)
        loop = Loop(
            index=len(self.loops),
            name=inst.name,
            trip_count=trip,
            trip_count_source=source,
            start=len(self.nodes),
            end=-1,
            parent=parent,
            multiplicity=mult * (trip if trip is not None else 1),
        )
        self.loops.append(loop)
        root = self.walk(body, list(vals), loop.multiplicity, loop.index)
        end = self._node(_Site(comp, inst, _deps([root]), mult, parent), NodeKind.LOOP)
        end.hbm_bytes = 0
        loop.end = end.index
        return (end.index,)


# -- helpers ------------------------------------------------------------------------------
def _free_value(inst: Instruction, vals: list[Val], args: list[Val]) -> Val:
    """The producers of a free op's value: a parameter's argument, nothing for a constant or an id,
    the elements of a tuple, or those of its operand."""
    op = inst.opcode
    if op == "parameter":
        n = inst.parameter_number or 0
        return args[n] if n < len(args) else ()
    if op in ("constant", "partition-id", "replica-id", "after-all"):
        return ()
    if op == "tuple":
        return TupleVal(vals)
    if op == "get-tuple-element":
        idx = int(inst.attr("index") or 0)
        v = vals[0]
        if isinstance(v, TupleVal):
            return v[idx] if idx < len(v) else _flat(v)
        return v
    return vals[0] if vals else ()


def _flat(v: Val) -> tuple[int, ...]:
    if isinstance(v, TupleVal):
        out: list[int] = []
        for e in v:
            out.extend(_flat(e))
        return tuple(out)
    return v


def _deps(vals: list[Val]) -> tuple[int, ...]:
    seen: set[int] = set()
    out: list[int] = []
    for v in vals:
        for i in _flat(v):
            if i not in seen:
                seen.add(i)
                out.append(i)
    out.sort()
    return tuple(out)
