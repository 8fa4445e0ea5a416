"""Read a lowered (not compiled) StableHLO + Shardy module into plain Python objects.

Why: Stage 1 must judge a strategy from `jax.jit(...).lower(...)` alone, which is ~100x cheaper
than compiling. The lowered module says what the *program* asks for (argument/result shardings,
sharding constraints, shard_map bodies with the collectives written in them, opaque custom
calls, scanned loops) but not what the SPMD partitioner will insert; `propagate.py` predicts that.

The module is read through the MLIR Python bindings shipped with jaxlib (`jaxlib.mlir.ir`, the
typed Shardy attributes of `jaxlib.mlir._mlir_libs._sdy`, the StableHLO attribute wrappers of
`jaxlib.mlir.dialects.stablehlo`): operations and attributes are walked, never the text. The
result is an `IRModule` of `Func`s whose bodies are lists of `Op`s with nested regions, values
numbered by integer ids. It holds no MLIR object, so it outlives the MLIR context and is cheap
to walk many times.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from jaxlib.mlir import ir
from jaxlib.mlir._mlir_libs import _sdy
from jaxlib.mlir.dialects import stablehlo

from aoizora.errors import AoizoraError

DTYPE_BYTES: dict[str, float] = {
    "bf16": 2, "f16": 2, "f32": 4, "f64": 8, "f8E4M3FN": 1, "f8E5M2": 1, "f8E4M3B11FNUZ": 1,
    "i1": 1, "i4": 0.5, "i8": 1, "i16": 2, "i32": 4, "i64": 8, "ui8": 1, "ui16": 2, "ui32": 4, "ui64": 8,
    "complex<f32>": 8, "complex<f64>": 16,
}

COLLECTIVE_OPS = {
    "stablehlo.all_reduce": "all-reduce",
    "stablehlo.all_gather": "all-gather",
    "stablehlo.reduce_scatter": "reduce-scatter",
    "stablehlo.all_to_all": "all-to-all",
    "stablehlo.collective_permute": "collective-permute",
    "stablehlo.collective_broadcast": "collective-broadcast",
}


class IRReadError(AoizoraError):
    """The lowered module has a construct this reader cannot interpret."""


@dataclass(frozen=True)
class TensorType:
    """Global (logical) shape and element type of a value; scalars have shape ()."""

    shape: tuple[int, ...]
    dtype: str

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def elements(self) -> int:
        return math.prod(self.shape)

    @property
    def itemsize(self) -> float:
        return DTYPE_BYTES.get(self.dtype, 4)

    @property
    def bytes(self) -> float:
        return self.elements * self.itemsize


@dataclass(frozen=True)
class Sharding:
    """A Shardy tensor sharding: for each dimension the mesh axes that split it, major first.

    `replicated` lists axes explicitly marked replicated; `unreduced` axes hold partial sums.
    Sub-axes (`"x":(1)2`) are kept as `name:pre_size:size` strings so they never collide with
    whole axes; `axis_size` understands them.
    """

    mesh: str
    dims: tuple[tuple[str, ...], ...]
    replicated: tuple[str, ...] = ()
    unreduced: tuple[str, ...] = ()

    @staticmethod
    def replicated_of(rank: int, mesh: str = "") -> Sharding:
        return Sharding(mesh, tuple(() for _ in range(rank)))

    @property
    def axes(self) -> tuple[str, ...]:
        return tuple(a for d in self.dims for a in d)

    @property
    def is_replicated(self) -> bool:
        return not self.axes

    def __str__(self) -> str:
        return "[" + ", ".join("{" + ",".join(d) + "}" for d in self.dims) + "]"


@dataclass(frozen=True)
class ExplicitCollective:
    """A collective written by the program (inside a shard_map body, or anywhere in the module)."""

    kind: str
    replica_groups: tuple[tuple[int, ...], ...]
    source_target_pairs: tuple[tuple[int, int], ...]
    dimension: int | None


@dataclass
class Op:
    """One operation: name, operand/result value ids and types, parsed attributes, regions.

    `attrs` holds only what Stage 1 uses, already converted to Python values (see `_attrs`).
    Each region is a `Region` (block arguments + ops); only single-block regions occur in
    lowered JAX programs.
    """

    name: str
    operands: tuple[int, ...]
    results: tuple[int, ...]
    operand_types: tuple[TensorType | None, ...]
    result_types: tuple[TensorType | None, ...]
    attrs: dict[str, Any]
    regions: list[Region] = field(default_factory=list)

    def operand_type(self, i: int) -> TensorType:
        """Operand `i`'s type, for an op whose operands are tensors by definition (a dot, a reshape)."""
        return _tensor_of(self, "operand", i, self.operand_types[i])

    def result_type(self, i: int) -> TensorType:
        """Result `i`'s type, for an op whose results are tensors by definition (a dot, a reshape)."""
        return _tensor_of(self, "result", i, self.result_types[i])


def _tensor_of(op: Op, role: str, i: int, t: TensorType | None) -> TensorType:
    if t is None:
        raise IRReadError(f"{op.name}: {role} {i} is not a ranked tensor")
    return t


@dataclass
class Region:
    args: tuple[int, ...]
    arg_types: tuple[TensorType | None, ...]
    ops: list[Op]


@dataclass
class Func:
    name: str
    args: tuple[int, ...]
    arg_types: tuple[TensorType | None, ...]
    arg_shardings: tuple[Sharding | None, ...]
    result_types: tuple[TensorType | None, ...]
    result_shardings: tuple[Sharding | None, ...]
    body: Region


@dataclass(frozen=True)
class ShardyMesh:
    """A Shardy `sdy.mesh` of the lowered module: its named axes (not a `jax.sharding.Mesh`)."""

    name: str
    axes: tuple[tuple[str, int], ...]
    device_ids: tuple[int, ...] = ()

    @property
    def sizes(self) -> dict[str, int]:
        return dict(self.axes)

    @property
    def size(self) -> int:
        return math.prod(n for _, n in self.axes)


@dataclass
class ManualComputationInfo:
    """One `sdy.manual_computation` (a shard_map): its boundary shardings, manual axes, contents."""

    in_shardings: tuple[Sharding, ...]
    out_shardings: tuple[Sharding, ...]
    manual_axes: tuple[str, ...]
    collectives: list[ExplicitCollective]
    custom_call_targets: list[str]


@dataclass(frozen=True)
class WhileInfo:
    trip_count: int | None
    induction_arg: int | None


@dataclass(frozen=True)
class CustomCallInfo:
    target: str
    operand_types: tuple[TensorType | None, ...]
    result_types: tuple[TensorType | None, ...]
    in_manual: bool


@dataclass
class IRModule:
    """The whole lowered program. `main` is the public entry function."""

    name: str
    num_partitions: int
    meshes: dict[str, ShardyMesh]
    funcs: dict[str, Func]
    main: str

    @property
    def entry(self) -> Func:
        return self.funcs[self.main]

    @property
    def mesh(self) -> ShardyMesh:
        """The single mesh of the program (JAX programs over one `jax.sharding.Mesh` have one)."""
        if not self.meshes:
            return ShardyMesh("", ())
        return next(iter(self.meshes.values()))

    # --- summaries (what tests and reports look at) --------------------------------------
    def walk(self) -> list[tuple[Op, bool]]:
        """Every op reachable from the entry, once per call site, with whether it runs inside a
        manual computation (shard_map body), following `func.call`s into their callees."""
        out: list[tuple[Op, bool]] = []

        def rec(ops: list[Op], manual: bool, stack: tuple[str, ...]) -> None:
            for op in ops:
                out.append((op, manual))
                inner = manual or op.name == "sdy.manual_computation"
                for r in op.regions:
                    rec(r.ops, inner, stack)
                if op.name == "func.call" and op.attrs["callee"] not in stack:
                    callee = op.attrs["callee"]
                    rec(self.funcs[callee].body.ops, manual, stack + (callee,))

        rec(self.entry.body.ops, False, (self.main,))
        return out

    def manual_computations(self) -> list[ManualComputationInfo]:
        out = []
        for op, _ in self.walk():
            if op.name != "sdy.manual_computation":
                continue
            colls: list[ExplicitCollective] = []
            targets: list[str] = []
            self._collect_calls(op.regions[0].ops, colls, targets)
            out.append(
                ManualComputationInfo(op.attrs["in_shardings"], op.attrs["out_shardings"], op.attrs["manual_axes"],
                                      colls, targets)
            )
        return out

    def _collect_calls(self, ops: list[Op], colls: list[ExplicitCollective], targets: list[str]) -> None:
        """Append the collectives and custom-call targets of `ops`, called functions and nested regions
        included, in program order."""
        for o in ops:
            if o.name in COLLECTIVE_OPS:
                colls.append(o.attrs["collective"])
            if o.name == "stablehlo.custom_call":
                targets.append(o.attrs["target"])
            if o.name == "func.call":
                self._collect_calls(self.funcs[o.attrs["callee"]].body.ops, colls, targets)
            for r in o.regions:
                self._collect_calls(r.ops, colls, targets)

    def while_loops(self) -> list[WhileInfo]:
        return [WhileInfo(op.attrs.get("trip_count"), op.attrs.get("induction_arg"))
                for op, _ in self.walk() if op.name == "stablehlo.while"]

    def custom_calls(self) -> list[CustomCallInfo]:
        return [
            CustomCallInfo(op.attrs["target"], op.operand_types, op.result_types, manual)
            for op, manual in self.walk()
            if op.name == "stablehlo.custom_call"
        ]

    def calls(self) -> list[tuple[str, str]]:
        """(caller, callee) pairs of `func.call`s."""
        out = []
        for f in self.funcs.values():
            stack = list(f.body.ops)
            while stack:
                op = stack.pop()
                if op.name == "func.call":
                    out.append((f.name, op.attrs["callee"]))
                for r in op.regions:
                    stack.extend(r.ops)
        return out

    def sharding_constraints(self) -> list[Sharding]:
        return [op.attrs["sharding"] for op, _ in self.walk() if op.name == "sdy.sharding_constraint"]


# --- conversion ------------------------------------------------------------------------------


def tensor_type(t: ir.Type) -> TensorType | None:
    """Shape and dtype of a ranked tensor type; None for tokens and other non-tensors."""
    try:
        rt = ir.RankedTensorType(t)
    except (ValueError, TypeError):
        return None
    return TensorType(tuple(int(d) for d in rt.shape), str(rt.element_type))


def _axis_name(ref: Any) -> str:
    a = _sdy.AxisRefAttr(ref)
    sub = a.sub_axis_info
    if sub is None:
        return a.name
    s = _sdy.SubAxisInfoAttr(sub)
    return f"{a.name}:{s.pre_size}:{s.size}"


def read_sharding(attr: ir.Attribute) -> Sharding:
    """Convert an `#sdy.sharding<...>` attribute (typed `TensorShardingAttr`)."""
    s = _sdy.TensorShardingAttr(attr)
    mesh = s.mesh_or_ref
    mesh_name = (ir.FlatSymbolRefAttr(mesh).value if isinstance(mesh, ir.FlatSymbolRefAttr) or _is_symbol(mesh)
                 else str(mesh))
    dims = tuple(tuple(_axis_name(r) for r in _sdy.DimensionShardingAttr(d).axes) for d in s.dimension_shardings)
    return Sharding(
        mesh_name,
        dims,
        tuple(_axis_name(r) for r in s.replicated_axes),
        tuple(_axis_name(r) for r in s.unreduced_axes),
    )


def _is_symbol(attr: Any) -> bool:
    try:
        ir.FlatSymbolRefAttr(attr)
        return True
    except (ValueError, TypeError):
        return False


def _per_value(attr: ir.Attribute) -> tuple[Sharding, ...]:
    return tuple(read_sharding(s) for s in _sdy.TensorShardingPerValueAttr(attr).shardings)


def _i64_array(attr: ir.Attribute) -> tuple[int, ...]:
    try:
        return tuple(int(v) for v in ir.DenseI64ArrayAttr(attr))
    except (ValueError, TypeError):
        return tuple(int(v) for v in np.array(ir.DenseIntElementsAttr(attr)).ravel())


def _int(attr: ir.Attribute) -> int:
    return int(ir.IntegerAttr(attr).value)


def _scalar_constant(attr: ir.Attribute) -> int | float | None:
    try:
        dense = ir.DenseElementsAttr(attr)
    except (ValueError, TypeError):
        return None
    if not dense.is_splat:
        return None
    v = dense.get_splat_value()
    try:
        return int(ir.IntegerAttr(v).value)
    except (ValueError, TypeError):
        try:
            return float(ir.FloatAttr(v).value)
        except (ValueError, TypeError):
            return None


class _Reader:
    def __init__(self) -> None:
        self.ids: dict[ir.Value, int] = {}
        # MLIR uniques a context's types: a module of ~1,000 ops has a few dozen distinct ones
        self.types: dict[ir.Type, TensorType | None] = {}

    def tensor_type(self, t: ir.Type) -> TensorType | None:
        if t not in self.types:
            self.types[t] = tensor_type(t)
        return self.types[t]

    def vid(self, v: ir.Value) -> int:
        i = self.ids.get(v)
        if i is None:
            i = len(self.ids)
            self.ids[v] = i
        return i

    def region(self, r: ir.Region) -> Region:
        blocks = list(r.blocks)
        if not blocks:
            return Region((), (), [])
        if len(blocks) > 1:
            raise IRReadError("multi-block regions do not occur in lowered JAX programs; cannot read this one")
        b = blocks[0]
        args = tuple(self.vid(a) for a in b.arguments)
        types = tuple(self.tensor_type(a.type) for a in b.arguments)
        return Region(args, types, [self.op(o.operation) for o in b.operations])

    def op(self, o: ir.Operation) -> Op:
        name = o.name
        op = Op(
            name,
            tuple(self.vid(v) for v in o.operands),
            tuple(self.vid(v) for v in o.results),
            tuple(self.tensor_type(v.type) for v in o.operands),
            tuple(self.tensor_type(v.type) for v in o.results),
            _attrs(name, o),
        )
        op.regions = [self.region(r) for r in o.regions]
        if name == "stablehlo.while":
            _while_trip_count(op)
        return op


def _convolution_attrs(a: Any) -> dict[str, Any]:
    """A convolution's dimension numbers, window strides, dilations and padding."""
    c = stablehlo.ConvDimensionNumbers(a["dimension_numbers"])
    out: dict[str, Any] = {"input_batch": c.input_batch_dimension, "input_feature": c.input_feature_dimension,
                           "input_spatial": tuple(c.input_spatial_dimensions),
                           "kernel_input_feature": c.kernel_input_feature_dimension,
                           "kernel_spatial": tuple(c.kernel_spatial_dimensions),
                           "output_batch": c.output_batch_dimension, "output_feature": c.output_feature_dimension,
                           "output_spatial": tuple(c.output_spatial_dimensions)}
    spatial = len(out["input_spatial"])
    for name in ("window_strides", "lhs_dilation", "rhs_dilation"):
        out[name] = _i64_array(a[name]) if name in a else (1,) * spatial
    pad = np.array(ir.DenseIntElementsAttr(a["padding"])).reshape(-1, 2) if "padding" in a else None
    out["padding"] = (tuple((int(lo), int(hi)) for lo, hi in pad) if pad is not None and pad.size
                      else ((0, 0),) * spatial)
    return out


def _attrs(name: str, o: ir.Operation) -> dict[str, Any]:
    """The attributes Stage 1 needs, per op kind, as Python values."""
    a = o.attributes
    out: dict[str, Any] = {}
    if "sdy.sharding" in a:  # sharding attached to an op's results
        out["result_shardings"] = _per_value(a["sdy.sharding"])
    if name == "stablehlo.dot_general":
        d = stablehlo.DotDimensionNumbers(a["dot_dimension_numbers"])
        out["lhs_batch"] = tuple(d.lhs_batching_dimensions)
        out["rhs_batch"] = tuple(d.rhs_batching_dimensions)
        out["lhs_contract"] = tuple(d.lhs_contracting_dimensions)
        out["rhs_contract"] = tuple(d.rhs_contracting_dimensions)
    elif name == "stablehlo.convolution":
        out.update(_convolution_attrs(a))
    elif name == "stablehlo.transpose":
        out["permutation"] = _i64_array(a["permutation"])
    elif name in ("stablehlo.reduce", "stablehlo.reduce_window"):
        if "dimensions" in a:
            out["dimensions"] = _i64_array(a["dimensions"])
    elif name == "stablehlo.broadcast_in_dim":
        out["broadcast_dimensions"] = _i64_array(a["broadcast_dimensions"])
    elif name == "stablehlo.concatenate":
        out["dimension"] = _int(a["dimension"])
    elif name == "stablehlo.pad":
        out["edge_padding_low"] = _i64_array(a["edge_padding_low"])
        out["interior_padding"] = _i64_array(a["interior_padding"])
    elif name == "stablehlo.constant":
        out["scalar"] = _scalar_constant(a["value"])
    elif name == "stablehlo.compare":
        out["direction"] = str(stablehlo.ComparisonDirectionAttr(a["comparison_direction"]).value)
    elif name == "stablehlo.custom_call":
        out["target"] = ir.StringAttr(a["call_target_name"]).value
    elif name == "func.call":
        out["callee"] = ir.FlatSymbolRefAttr(a["callee"]).value
    elif name == "sdy.sharding_constraint" or name == "sdy.reshard":
        out["sharding"] = read_sharding(a["sharding"])
    elif name == "sdy.manual_computation":
        out["in_shardings"] = _per_value(a["in_shardings"])
        out["out_shardings"] = _per_value(a["out_shardings"])
        m = _sdy.ManualAxesAttr(a["manual_axes"])
        out["manual_axes"] = tuple(m[i] for i in range(len(m)))
    elif name in COLLECTIVE_OPS:
        groups: tuple[tuple[int, ...], ...] = ()
        if "replica_groups" in a:
            arr = np.array(ir.DenseIntElementsAttr(a["replica_groups"]))
            groups = (tuple(tuple(int(v) for v in row if v >= 0) for row in arr.reshape(arr.shape[0], -1))
                      if arr.size else ())
        pairs: tuple[tuple[int, int], ...] = ()
        if "source_target_pairs" in a:
            arr = np.array(ir.DenseIntElementsAttr(a["source_target_pairs"]))
            pairs = tuple((int(s), int(t)) for s, t in arr.reshape(-1, 2))
        dim = None
        for key in ("all_gather_dim", "scatter_dimension", "split_dimension"):
            if key in a:
                dim = _int(a[key])
        if "concat_dimension" in a:
            out["concat_dimension"] = _int(a["concat_dimension"])
        out["collective"] = ExplicitCollective(COLLECTIVE_OPS[name], groups, pairs, dim)
    return out


def _while_trip_count(op: Op) -> None:
    """Trip count of the scan pattern: `i < C` in the condition, i from a constant, `i + s` in the body."""
    cond, body = op.regions[0], op.regions[1]
    consts = {o.results[0]: o.attrs.get("scalar") for o in cond.ops if o.name == "stablehlo.constant"}
    ret = cond.ops[-1] if cond.ops else None
    cmp = next((o for o in cond.ops
                if ret is not None and o.name == "stablehlo.compare" and o.results[0] in ret.operands), None)
    if cmp is None or cmp.attrs.get("direction") not in ("LT", "GT", "NE"):
        return
    lhs, rhs = cmp.operands
    if lhs in cond.args and consts.get(rhs) is not None:
        k, limit = cond.args.index(lhs), consts[rhs]
    elif rhs in cond.args and consts.get(lhs) is not None and cmp.attrs["direction"] == "GT":
        k, limit = cond.args.index(rhs), consts[lhs]
    else:
        return
    # the step: body returns add(arg_k, const)
    bconsts = {o.results[0]: o.attrs.get("scalar") for o in body.ops if o.name == "stablehlo.constant"}
    bret = body.ops[-1]
    step = None
    for o in body.ops:
        if o.name == "stablehlo.add" and o.results[0] == bret.operands[k]:
            a, b = o.operands
            if a == body.args[k] and bconsts.get(b) is not None:
                step = bconsts[b]
            elif b == body.args[k] and bconsts.get(a) is not None:
                step = bconsts[a]
    op.attrs["induction_arg"] = k
    op.attrs["_limit"] = limit
    op.attrs["_step"] = step


def _resolve_trip_counts(ops: list[Op], consts: dict[int, Any]) -> None:
    """Fill `trip_count` of while ops now that constants defined before them are known."""
    for op in ops:
        if op.name == "stablehlo.constant":
            consts[op.results[0]] = op.attrs.get("scalar")
        if op.name == "stablehlo.while" and "induction_arg" in op.attrs:
            k = op.attrs["induction_arg"]
            init, limit, step = consts.get(op.operands[k]), op.attrs.pop("_limit"), op.attrs.pop("_step")
            if isinstance(init, int) and isinstance(limit, int) and isinstance(step, int) and step != 0:
                op.attrs["trip_count"] = max(0, -(-(limit - init) // step))
        for r in op.regions:
            _resolve_trip_counts(r.ops, consts)


def read_module(module: ir.Module | Any) -> IRModule:
    """Convert a lowered module (`lowered.compiler_ir("stablehlo")`, or a `Lowered`) to an `IRModule`."""
    if hasattr(module, "compiler_ir"):
        module = module.compiler_ir("stablehlo")
    reader = _Reader()
    top = module.operation
    num_partitions = 1
    if "mhlo.num_partitions" in top.attributes:
        num_partitions = _int(top.attributes["mhlo.num_partitions"])
    meshes: dict[str, ShardyMesh] = {}
    funcs: dict[str, Func] = {}
    main = None
    for o in module.body.operations:
        op = o.operation
        if op.name == "sdy.mesh":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            m = _sdy.MeshAttr(op.attributes["mesh"])
            axes = tuple((_sdy.MeshAxisAttr(ax).name, int(_sdy.MeshAxisAttr(ax).size)) for ax in m.axes)
            meshes[name] = ShardyMesh(name, axes, tuple(int(d) for d in m.device_ids))
        elif op.name == "func.func":
            name = ir.StringAttr(op.attributes["sym_name"]).value
            ftype = ir.FunctionType(ir.TypeAttr(op.attributes["function_type"]).value)
            arg_sh = _func_shardings(op, "arg_attrs", len(ftype.inputs))
            res_sh = _func_shardings(op, "res_attrs", len(ftype.results))
            body = reader.region(op.regions[0])
            funcs[name] = Func(name, body.args, body.arg_types, arg_sh, tuple(tensor_type(t) for t in ftype.results),
                               res_sh, body)
            vis = op.attributes["sym_visibility"] if "sym_visibility" in op.attributes else None
            if main is None and (name == "main" or (vis is not None and ir.StringAttr(vis).value == "public")):
                main = name
    if main is None:
        raise IRReadError("the lowered module has no public entry function")
    for f in funcs.values():
        _resolve_trip_counts(f.body.ops, {})
    return IRModule(str(ir.StringAttr(top.attributes["sym_name"]).value) if "sym_name" in top.attributes else "module",
                    num_partitions, meshes, funcs, main)


def _func_shardings(op: ir.Operation, key: str, n: int) -> tuple[Sharding | None, ...]:
    if key not in op.attributes:
        return (None,) * n
    arr = ir.ArrayAttr(op.attributes[key])
    out: list[Sharding | None] = []
    for i in range(n):
        d = ir.DictAttr(arr[i])
        out.append(read_sharding(d["sdy.sharding"]) if "sdy.sharding" in d else None)
    return tuple(out)


def axis_size(mesh_sizes: Mapping[str, int], axis: str) -> int:
    """Size of a mesh axis or of a sub-axis `name:pre_size:size`."""
    if ":" in axis:
        return int(axis.rsplit(":", 1)[1])
    return mesh_sizes[axis]


def group_axes(groups: tuple[tuple[int, ...], ...], mesh: ShardyMesh) -> tuple[str, ...]:
    """Mesh axes along which the members of replica groups differ (device ids = mesh positions).

    Why: collectives inside shard_map carry explicit device-id groups; Q1 prices communication per
    mesh axis, so each group is mapped back to the axes it spans.
    """
    if not groups or not mesh.axes:
        return ()
    shape = tuple(n for _, n in mesh.axes)
    varying: set[int] = set()
    for g in groups:
        coords = np.array(np.unravel_index(np.array(g), shape)).T
        for j in range(len(shape)):
            if len(set(coords[:, j].tolist())) > 1:
                varying.add(j)
    return tuple(mesh.axes[j][0] for j in sorted(varying))


# --- queries on the read IR (shared by the sharding propagator and the HBM model) ---------------

RETURN_OPS = {"func.return", "stablehlo.return", "sdy.return"}


def uses(op: Op) -> list[int]:
    """The values `op` reads, its nested regions' reads included (in order, with repeats)."""
    out = list(op.operands)
    for r in op.regions:
        for o in r.ops:
            out.extend(uses(o))
    return out


def same_shape(op: Op) -> bool:
    """Whether every operand (scalars aside) and result of `op` has its first result's shape."""
    if not op.result_types or op.result_types[0] is None:
        return False
    shape = op.result_types[0].shape
    return all(t is None or t.shape == shape or t.rank == 0 for t in op.operand_types) and all(
        t is not None and t.shape == shape for t in op.result_types
    )


def contains_op(funcs: Mapping[str, Func], region: Region, name: str) -> bool:
    """Whether `region` runs an op called `name`, in nested regions or called functions too."""
    return name in called_op_names(funcs, region)


def called_op_names(funcs: Mapping[str, Func], region: Region) -> set[str]:
    """The names of the ops `region` runs, in nested regions and called functions too."""
    names: set[str] = set()
    for o in region.ops:
        names.add(o.name)
        if o.name == "func.call":
            names |= called_op_names(funcs, funcs[o.attrs["callee"]].body)
        for r in o.regions:
            names |= called_op_names(funcs, r)
    return names


def dot_free_dims(op: Op) -> tuple[list[int], list[int]]:
    """The free (neither batch nor contracted) dimensions of a dot_general's lhs and rhs."""
    lt, rt = op.operand_type(0), op.operand_type(1)
    lb, rb, lc, rc = op.attrs["lhs_batch"], op.attrs["rhs_batch"], op.attrs["lhs_contract"], op.attrs["rhs_contract"]
    return ([d for d in range(lt.rank) if d not in lb and d not in lc],
            [d for d in range(rt.rank) if d not in rb and d not in rc])
