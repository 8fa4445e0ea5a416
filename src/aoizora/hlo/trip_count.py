"""The trip count of a compiled ``while`` loop, read from its condition and body.

libtpu states the count in the loop's ``backend_config`` (``known_trip_count``) when it knows it;
otherwise a small symbolic evaluator looks for an induction variable: the condition compares one
element of the loop state with a constant, the body adds a constant to that element, and the
``while`` operand gives its initial value. The evaluator's values are

* ``("const", v)``: a known integer;
* ``("state",)``: the loop-state tuple (parameter 0 of the body or the condition);
* ``("param", k)``: element k of the loop state;
* ``("affine", k, c)``: element k of the loop state plus c;
* ``("cmp", direction, a, b)``: a comparison of two values.

It looks through copies, converts, bitcasts, reshapes and broadcasts, tuple plumbing and fusions
(libtpu may fuse the condition's compare or the body's increment).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aoizora.errors import HloParseError
from aoizora.hlo.parser import Computation, HloModule, Instruction

_PASS = frozenset({"copy", "bitcast", "convert", "reshape", "broadcast"})
_FLIP = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}
# the fusion a fused computation's parameters come from: (outer computation, fusion, its frame)
_Frame = tuple[Computation, Instruction, "_Frame"] | None


def trip_count(
    m: HloModule, comp: Computation, inst: Instruction, body: Computation, cond: Computation
) -> tuple[int | None, str]:
    """(trip count, where it came from) of the ``while`` ``inst`` in ``comp``.

    The source is ``"backend_config"``, ``"induction"``, or ``"unknown"`` (count None).
    """
    bc = inst.backend_config
    if isinstance(bc, Mapping):
        ktc = bc.get("known_trip_count")
        if isinstance(ktc, Mapping) and "n" in ktc:
            try:
                return int(ktc["n"]), "backend_config"
            except (TypeError, ValueError):
                pass
    try:
        trip = _induction_trip_count(m, comp, inst, body, cond)
    except (KeyError, IndexError, ValueError, ZeroDivisionError, HloParseError):
        trip = None
    return (trip, "induction") if trip is not None else (None, "unknown")


def _through_passes(comp: Computation, inst: Instruction) -> Instruction:
    """The first instruction at or before ``inst`` that is not a value-preserving pass-through."""
    while inst.opcode in _PASS and inst.operands:
        inst = comp.by_name[inst.operands[0]]
    return inst


def _literal_int(lit: str) -> int | None:
    lit = lit.strip()
    if lit in ("true", "false"):
        return int(lit == "true")
    try:
        return int(lit)
    except ValueError:
        try:
            f = float(lit)
        except ValueError:
            return None
        return int(f) if f.is_integer() else None


def _sym(
    m: HloModule, comp: Computation, inst: Instruction, frame: _Frame, depth: int = 0
) -> tuple[Any, ...] | None:
    """The symbolic value of ``inst`` (see the module docstring), None when not one of them."""
    if depth > 32:
        return None
    inst = _through_passes(comp, inst)
    op = inst.opcode

    def sub(name: str) -> tuple[Any, ...] | None:
        return _sym(m, comp, comp.by_name[name], frame, depth + 1)

    if op == "constant":
        v = _literal_int(inst.literal or "")
        return ("const", v) if v is not None else None
    if op == "parameter":
        if frame is None:
            return ("state",)
        outer, fusion, outer_frame = frame
        n = inst.parameter_number or 0
        return _sym(m, outer, outer.by_name[fusion.operands[n]], outer_frame, depth + 1)
    if op == "get-tuple-element":
        idx = int(inst.attr("index") or 0)
        src = _through_passes(comp, comp.by_name[inst.operands[0]])
        if src.opcode == "tuple":
            return sub(src.operands[idx])
        base = _sym(m, comp, src, frame, depth + 1)
        return ("param", idx) if base == ("state",) else None
    if op == "fusion":
        callee = m.computation(inst.attr("calls") or "")
        assert callee.root is not None
        return _sym(m, callee, callee.root, (comp, inst, frame), depth + 1)
    if op == "negate":
        a = sub(inst.operands[0])
        return ("const", -a[1]) if a and a[0] == "const" else None
    if op in ("add", "subtract") and len(inst.operands) == 2:
        return _sum(op, sub(inst.operands[0]), sub(inst.operands[1]))
    if op == "compare" and len(inst.operands) == 2:
        return ("cmp", inst.attr("direction") or "", sub(inst.operands[0]), sub(inst.operands[1]))
    return None


def _sum(op: str, a: tuple[Any, ...] | None, b: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """``a + b`` or ``a - b`` of two symbolic values, when it is a constant or affine."""
    if not a or not b:
        return None
    sign = 1 if op == "add" else -1
    if a[0] == "const" and b[0] == "const":
        return ("const", a[1] + sign * b[1])
    if a[0] in ("param", "affine") and b[0] == "const":
        off = a[2] if a[0] == "affine" else 0
        return ("affine", a[1], off + sign * b[1])
    if op == "add" and b[0] in ("param", "affine") and a[0] == "const":
        off = b[2] if b[0] == "affine" else 0
        return ("affine", b[1], off + a[1])
    return None


def _induction_trip_count(
    m: HloModule, comp: Computation, inst: Instruction, body: Computation, cond: Computation
) -> int | None:
    assert cond.root is not None and body.root is not None
    c = _sym(m, cond, cond.root, None)
    if not c or c[0] != "cmp" or not c[2] or not c[3]:
        return None
    direction, a, b = c[1], c[2], c[3]
    if a[0] == "const" and b[0] in ("param", "affine"):
        a, b, direction = b, a, _FLIP.get(direction, "")
    if b[0] != "const" or a[0] not in ("param", "affine"):
        return None
    k = a[1]
    limit = b[1] - (a[2] if a[0] == "affine" else 0)  # i + c < L  <=>  i < L - c
    # the while operand is the state tuple; element k is its initial induction value
    src = _through_passes(comp, comp.by_name[inst.operands[0]])
    if src.opcode != "tuple":
        return None
    init_val = _sym(m, comp, comp.by_name[src.operands[k]], None)
    if not init_val or init_val[0] != "const":
        return None
    broot = _through_passes(body, body.root)
    if broot.opcode != "tuple":
        return None
    upd = _sym(m, body, body.by_name[broot.operands[k]], None)
    if not upd or upd[0] != "affine" or upd[1] != k or upd[2] == 0:
        return None
    return _iterations(direction, init_val[1], limit, upd[2])


def _iterations(direction: str, init: int, limit: int, step: int) -> int | None:
    """How many times ``i = init; while i <direction> limit: i += step`` runs (None: not a count)."""
    if direction == "LT":
        n = -(-(limit - init) // step) if step > 0 else None
    elif direction == "LE":
        n = (limit - init) // step + 1 if step > 0 else None
    elif direction == "GT":
        n = -(-(init - limit) // -step) if step < 0 else None
    elif direction == "GE":
        n = (init - limit) // -step + 1 if step < 0 else None
    elif direction == "NE":
        n = (limit - init) // step if (limit - init) % step == 0 else None
    else:
        n = None
    return max(0, n) if n is not None else None
