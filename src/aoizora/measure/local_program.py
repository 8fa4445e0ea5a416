"""One device's share of a partitioned program, as a program one chip runs alone.

After SPMD partitioning a program is one per-device module: shapes are the local shards and every
exchange between devices is an explicit collective. `localize` rewrites that module's text so a
single device can run it: each collective becomes a local operation of the same output shape
(an all-gather concatenates copies of the local operand, a reduce-scatter keeps its first slice,
an all-reduce, all-to-all, collective-permute or collective-broadcast passes its operand on as a
reshape to the same shape), and `partition-id`/`replica-id` become the constant 0 (device 0's
view). HLO's `copy`, which StableHLO has no form of, becomes the same reshape: the compiler
chooses layouts again. The compute each device runs,
its shapes and its opaque kernels stay as the partitioner wrote them; what a collective costs on
the links is left out, and said (`LocalProgram.replaced`).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from aoizora.errors import LocalizeError

#: collectives whose output has the operand's shape: replaced by a copy of the operand
_SAME_SHAPE = frozenset({"all-reduce", "all-to-all", "collective-permute", "collective-broadcast"})
#: operations that name the device a module runs on: device 0's value
_DEVICE_IDS = frozenset({"partition-id", "replica-id"})
#: collectives this rewrite refuses: their async halves appear only after scheduling passes
_REFUSED = ("-start", "-done", "ragged-all-to-all", "send", "recv")

# `%name = TYPE opcode(operands), attributes` in a module's text (TYPE is an array or a tuple)
_INSTRUCTION = re.compile(
    r"^(?P<indent>\s*)(?P<root>ROOT )?%(?P<name>[\w.\-]+) = (?P<type>\([^=]*?\)|[a-z0-9]+\[[\d,]*\](?:\{[^}]*\})?) "
    r"(?P<op>[a-z][\w\-]*)\((?P<operands>[^)]*)\)(?P<attrs>.*)$")
_ARRAY = re.compile(r"^(?P<dtype>[a-z0-9]+)\[(?P<dims>[\d,]*)\]")
_DIMENSIONS = re.compile(r"dimensions=\{(\d+)\}")
_HEADER_PARTITIONS = re.compile(r"num_partitions=\d+")
_HEADER_REPLICAS = re.compile(r"replica_count=\d+")
_SHARDING = re.compile(r", sharding=(\{(?:[^{}]|\{[^{}]*\})*\})")


@dataclass
class LocalProgram:
    """A module one device runs alone (`text`) and what `localize` replaced in it (opcode -> count)."""

    text: str
    replaced: Counter[str] = field(default_factory=Counter)

    def replaced_json(self) -> dict[str, int]:
        return dict(sorted(self.replaced.items()))


def _dims(hlo_type: str) -> list[int]:
    m = _ARRAY.match(hlo_type)
    if m is None:
        raise LocalizeError(f"expected an array type, found {hlo_type[:80]!r}")
    return [int(d) for d in m.group("dims").split(",") if d]


def _operands(text: str) -> list[str]:
    return [o.strip() for o in text.split(",") if o.strip()]


def _replacement(op: str, hlo_type: str, operands: list[str], attrs: str, types: dict[str, str]) -> str:
    """The local operation (opcode and operands, attributes included) standing for a collective."""
    if hlo_type.startswith("("):
        if op in _SAME_SHAPE:  # a combined collective: the tuple of its operands
            return f"tuple({', '.join(operands)})"
        raise LocalizeError(f"a combined {op} (tuple result) has no local replacement")
    if op in _SAME_SHAPE:
        return f"reshape({operands[0]})"
    dims = _DIMENSIONS.search(attrs)
    if dims is None or len(operands) != 1:
        raise LocalizeError(f"{op} without one operand and one gathered dimension: {attrs[:120]!r}")
    axis = int(dims.group(1))
    local = _dims(types[operands[0].lstrip("%")])
    out = _dims(hlo_type)
    if op == "all-gather":
        if out[axis] % local[axis]:
            raise LocalizeError(f"all-gather from {local} to {out} is not a whole number of copies")
        copies = out[axis] // local[axis]
        return f"concatenate({', '.join([operands[0]] * copies)}), dimensions={{{axis}}}"
    if op == "reduce-scatter":
        return "slice(" + operands[0] + "), slice={" + ", ".join(f"[0:{n}]" for n in out) + "}"
    raise LocalizeError(f"unexpected collective {op}")


def localize(module_text: str) -> LocalProgram:
    """The module's text with every collective replaced by a local operation of the same output
    shape and the device ids fixed at 0, partitioned for one device (see the module docstring)."""
    if "constant({...})" in module_text:
        raise LocalizeError("the module's text elides large constants ('{...}'), which would read back as other "
                            "values; dump it with xla_dump_large_constants")
    lines = module_text.splitlines()
    types: dict[str, str] = {}
    parsed: list[re.Match[str] | None] = []
    for line in lines:
        m = _INSTRUCTION.match(line)
        parsed.append(m)
        if m is not None:
            types[m.group("name")] = m.group("type")
    replaced: Counter[str] = Counter()
    out: list[str] = []
    for line, m in zip(lines, parsed, strict=True):
        if m is None:
            if line.startswith("HloModule "):
                line = _HEADER_REPLICAS.sub("replica_count=1", _HEADER_PARTITIONS.sub("num_partitions=1", line))
            out.append(line)
            continue
        op = m.group("op")
        if any(op.endswith(s) or op == s.strip("-") for s in _REFUSED) and _is_collective(op):
            raise LocalizeError(f"{op} in the partitioned module: localize reads the module right after partitioning")
        head = f"{m.group('indent')}{m.group('root') or ''}%{m.group('name')} = {m.group('type')} "
        if op in _DEVICE_IDS:
            replaced[op] += 1
            out.append(head + "constant(0)")
        elif op in _SAME_SHAPE or op in ("all-gather", "reduce-scatter"):
            replaced[op] += 1
            out.append(head + _replacement(op, m.group("type"), _operands(m.group("operands")), m.group("attrs"),
                                           types))
        elif op == "copy":  # HLO's copy has no StableHLO form: a reshape to the same shape is one
            out.append(head + f"reshape({m.group('operands')}){_metadata(m.group('attrs'))}")
        else:
            out.append(_SHARDING.sub("", line))
    return LocalProgram("\n".join(out) + "\n", replaced)


def _metadata(attrs: str) -> str:
    m = re.search(r", metadata=\{[^}]*\}", attrs)
    return m.group(0) if m else ""


def _is_collective(op: str) -> bool:
    return any(op.startswith(c) for c in ("all-", "reduce-scatter", "collective-", "ragged-", "send", "recv"))


#: the dump of the module right after the SPMD partitioner (XLA's pass, or libtpu's `tpu-spmd-partitioning`):
#: one device's share, with explicit collectives
_PARTITIONED_DUMP = re.compile(r"\.after_(?:tpu-)?spmd-partitioning\.")


#: a lowered module for one device (`mhlo.num_partitions = 1`)
_ONE_PARTITION = re.compile(r"mhlo\.num_partitions = 1 :")


def partitioned_module(lowered: object, compiler_options: dict[str, str] | None = None) -> str:
    """The text of `lowered`'s module right after SPMD partitioning, for the devices it was lowered
    on (compile-only devices of a slice work: the compile runs on this host, with the program's
    own compiler options); for one device, which the partitioner does not visit, the module before
    optimization. The compile that writes it is a whole one; its executable is dropped."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="aoizora-partitioned-") as tmp:
        options: dict[str, Any] = {**(compiler_options or {}), "xla_dump_to": tmp, "xla_dump_hlo_as_text": True,
                                   "xla_dump_hlo_pass_re": "spmd-partitioning",
                                   # every constant written out: a module that elides one reads back wrong
                                   "xla_dump_large_constants": True}
        lowered.compile(compiler_options=options)  # type: ignore[attr-defined]  # a jax Lowered
        dumps = sorted(p for p in Path(tmp).iterdir() if _PARTITIONED_DUMP.search(p.name) and p.suffix == ".txt")
        if not dumps and _ONE_PARTITION.search(lowered.as_text()):  # type: ignore[attr-defined]  # a jax Lowered
            # one device: nothing to partition, so the pass does not run; its module is the one JAX gave
            dumps = sorted(p for p in Path(tmp).iterdir() if p.name.endswith(".before_optimizations.txt"))
        if not dumps:
            raise LocalizeError("the compiler wrote no module after SPMD partitioning; this JAX or libtpu "
                                "does not honour xla_dump_to as a compile option")
        return dumps[-1].read_text()
