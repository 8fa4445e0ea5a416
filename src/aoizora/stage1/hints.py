"""Backward sharding hints: what later ops tell the forward propagation about earlier values.

Shardy propagates shardings backwards as well as forwards; the propagator (`propagate.py`) walks
forwards and takes two backward mechanisms from this module, collected per region before it is
walked:

* **requests** (`collect_requests`, `requested`): a sharding constraint on a contraction's
  result requests the same axes for the contraction's operands. When several constrained dots
  read one operand (the q, k and v projections of one normed activation) the partitioner
  reshards that operand once instead of each result. An operand is resharded toward what its
  requests agree on before the contraction.
* **preferences** (`collect_preferences`, `preferred_dims`): the sharding each value's consumers
  would like it to have, handed back from constraints through elementwise ops, transposes,
  broadcasts, reductions, contractions, reshapes, concatenates and slices. A preference only
  ever adds axes to a dimension the forward rule left unsharded: a free local slice, so an op
  whose result is later sliced (attention scores whose query rows only feed a sequence-sharded
  residual) is computed already sliced.

Both are keyed by (frame, value): value ids repeat across calls of one function.
"""

from __future__ import annotations

from aoizora.stage1.ir import Op, Region, Sharding, TensorType, dot_free_dims, same_shape
from aoizora.stage1.shardings import AxisSizes, reshape_groups, with_dims

Dims = tuple[tuple[str, ...], ...]
Key = tuple[int, int]  # (frame, value)


def _to_operands(op: Op, result_dims: tuple, fill: object) -> tuple[list, list]:
    """Hand a dot_general's per-result-dimension axes to its operands' batch and free dimensions
    (contracted ones get `fill`)."""
    lt, rt = op.operand_type(0), op.operand_type(1)
    lb, rb = op.attrs["lhs_batch"], op.attrs["rhs_batch"]
    lf, rf = dot_free_dims(op)
    lhs, rhs = [fill] * lt.rank, [fill] * rt.rank
    for k, (i, j) in enumerate(zip(lb, rb, strict=True)):
        lhs[i] = rhs[j] = result_dims[k]
    for k, d in enumerate(lf):
        lhs[d] = result_dims[len(lb) + k]
    for k, d in enumerate(rf):
        rhs[d] = result_dims[len(lb) + len(lf) + k]
    return lhs, rhs


class BackwardHints:
    """Requests and preferences of the regions walked so far (see the module docstring)."""

    def __init__(self, sizes: AxisSizes):
        self.sizes = sizes
        # per operand dimension, the axes a constrained dot's result allows there (None: any)
        self.requests: dict[Key, list[tuple[tuple[str, ...] | None, ...]]] = {}
        self.preferences: dict[Key, Dims] = {}

    # -- requests
    def collect_requests(self, region: Region, frame: int) -> None:
        """Record what each constraint on a dot's result requests of the dot's operands."""
        by_result = {o.results[0]: o for o in region.ops if o.name == "stablehlo.dot_general"}
        for o in region.ops:
            if o.name != "sdy.sharding_constraint" or o.operands[0] not in by_result:
                continue
            dot = by_result[o.operands[0]]
            cons = o.attrs["sharding"].dims
            lt, rt = dot.operand_types
            if lt is None or rt is None or len(cons) != dot.result_type(0).rank:
                continue
            lhs, rhs = _to_operands(dot, cons, None)
            self.requests.setdefault((frame, dot.operands[0]), []).append(tuple(lhs))
            self.requests.setdefault((frame, dot.operands[1]), []).append(tuple(rhs))

    def requested(self, frame: int, value: int, t: TensorType, sh: Sharding, out_bytes: float) -> Sharding:
        """The operand sharding after honouring its requests: each dimension keeps the leading axes
        every request allows there. Taken when two or more requests agree, or when resharding the
        operand is no bigger than the dot's result (`out_bytes`)."""
        requests = self.requests.get((frame, value))
        if not requests or len(sh.dims) != t.rank:
            return sh
        dims = []
        for i, d in enumerate(sh.dims):
            keep = []
            for a in d:
                if all(allowed is None or a in allowed for allowed in (rq[i] for rq in requests)):
                    keep.append(a)
                else:
                    break
            dims.append(tuple(keep))
        target = with_dims(sh, dims, sh.unreduced)
        if target == sh:
            return sh
        if len(requests) >= 2 or self.sizes.local_bytes(t, sh) <= out_bytes:
            return target
        return sh

    # -- preferences
    def collect_preferences(self, region: Region, frame: int) -> None:
        """Walk the region backwards: constraints state what their operand should be; other ops
        hand their result's preference to the operand dimensions it comes from. Several consumers
        keep only what they agree on."""
        for op in reversed(region.ops):
            if op.name == "sdy.sharding_constraint":
                self._prefer((frame, op.operands[0]), op.attrs["sharding"].dims)
                continue
            if len(op.results) != 1 or op.results[0] is None:
                continue
            want = self.preferences.get((frame, op.results[0]))
            ot = op.result_types[0]
            if want is None or ot is None or len(want) != ot.rank:
                continue
            for value, dims in _operand_preferences(op, want, ot):
                self._prefer((frame, value), dims)

    def _prefer(self, key: Key, dims: Dims) -> None:
        old = self.preferences.get(key)
        if old is None:
            self.preferences[key] = tuple(tuple(d) for d in dims)
        elif len(old) == len(dims):
            self.preferences[key] = tuple(tuple(a for a in o if a in d) for o, d in zip(old, dims, strict=True))

    def preferred_dims(self, frame: int, value: int, t: TensorType | None, dims: list[tuple[str, ...]],
                       used: set[str]) -> list[tuple[str, ...]]:
        """`dims` with the axes the value's consumers prefer added to its unsharded dimensions
        (where the dimension has an element per shard and they are not `used` elsewhere; `used` is
        updated). They need not divide it: the partitioner pads the last shards (32,760 tokens
        sharded 16 ways are computed as 2,048 rows per device)."""
        want = self.preferences.get((frame, value))
        if want is None or t is None or len(want) != len(dims):
            return dims
        out = list(dims)
        for i, (d, w) in enumerate(zip(dims, want, strict=True)):
            if d or not w or any(a in used for a in w):
                continue
            if t.shape[i] >= self.sizes.n(w):
                out[i] = tuple(w)
                used.update(w)
        return out


def _operand_preferences(op: Op, want: Dims, ot: TensorType) -> list[tuple[int, Dims]]:
    """The preference `op`'s result hands to each operand, in operand order."""
    name = op.name
    it = op.operand_types[0] if op.operand_types else None
    if name == "stablehlo.transpose":
        perm = op.attrs["permutation"]
        dims: list = [()] * len(perm)
        for i, p in enumerate(perm):
            dims[p] = want[i]
        return [(op.operands[0], tuple(dims))]
    if name == "stablehlo.broadcast_in_dim":
        if it is None:
            return []
        return [(op.operands[0], tuple(want[d] if it.shape[i] == ot.shape[d] else ()
                                       for i, d in enumerate(op.attrs["broadcast_dimensions"])))]
    if name == "stablehlo.reduce":
        if it is None:
            return []
        kept = [d for d in range(it.rank) if d not in op.attrs.get("dimensions", ())]
        dims = [()] * it.rank
        for k, d in enumerate(kept):
            dims[d] = want[k]
        return [(op.operands[0], tuple(dims))]
    if name == "stablehlo.dot_general":
        if op.operand_types[0] is None or op.operand_types[1] is None:
            return []
        lhs, rhs = _to_operands(op, want, ())
        return [(op.operands[0], tuple(lhs)), (op.operands[1], tuple(rhs))]
    if name == "stablehlo.reshape":
        return [] if it is None else [(op.operands[0], _reshape_preference(it, ot, want))]
    if name == "stablehlo.concatenate":
        cat_dims = tuple(() if d == op.attrs["dimension"] else want[d] for d in range(ot.rank))
        return [(v, cat_dims) for v in op.operands]
    if name == "stablehlo.slice":
        if it is None or it.rank != ot.rank:
            return []
        return [(op.operands[0], tuple(want[d] if it.shape[d] == ot.shape[d] else () for d in range(ot.rank)))]
    if (not op.regions and same_shape(op)) or name in ("stablehlo.pad", "func.call"):
        # a pad is partitioned in place (halo exchange); a called helper (`_pad`, `_where`) is
        # taken as elementwise: Shardy propagates through its body
        return [(v, want) for v, t in zip(op.operands, op.operand_types, strict=True)
                if t is not None and t.rank == ot.rank]
    return []


def _reshape_preference(it: TensorType, ot: TensorType, want: Dims) -> Dims:
    """A split or merged group of dimensions hands the preference between its major non-unit
    dimensions (how the forward rule for reshapes moves axes)."""
    dims: list = [()] * it.rank
    for (i0, i1), (o0, o1) in reshape_groups(it.shape, ot.shape):
        ins = [d for d in range(i0, i1) if it.shape[d] != 1]
        outs = [d for d in range(o0, o1) if ot.shape[d] != 1]
        if ins and outs and not any(want[d] for d in outs[1:]):
            dims[ins[0]] = want[outs[0]]
    return tuple(dims)
