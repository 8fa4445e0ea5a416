"""Typed readers of raw HLO attribute values (replica groups, pairs, int lists).

The parser keeps attribute values as text; the program builder asks these functions for the
few it needs. Each reader is a small recursive-descent parser over the same `Lexer`, so a
malformed value fails with a line/column error like the rest of the text.

Replica-group forms libtpu prints (all resolve to tuples of logical device ids):

* explicit lists ``{{0,4},{1,5}}``; ``{}`` means one group of all devices;
* iota ``[G,S]<=[d0,d1,...]`` optionally followed by ``T(perm)``: the ids ``0..prod(d)-1``
  laid out with shape ``d``, transposed by ``perm``, read in row-major order and cut into
  ``G`` groups of ``S`` — e.g. ``[4,2]<=[2,4]T(1,0)`` = ``{{0,4},{1,5},{2,6},{3,7}}``;
* mesh axes ``mesh['a'=2,'b'=4] {'b'}`` (libtpu 0.0.42.1 prints this for most collectives,
  with an optional ``device_ids=(...)`` attribute — an iota or a list — giving the mesh's
  device order, default ``0..n-1``). A group is the set of devices that agree on every mesh
  axis except the listed ones, ordered by the listed axes (first listed = most major). Sub-axes
  ``'a':(p)s`` (the size-``s`` factor of axis ``a`` whose faster-varying part has size
  ``n/(p·s)``) are supported.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from math import prod

from aoizora.errors import HloParseError
from aoizora.hlo.lexer import HLO_FIX, Lexer

Groups = tuple[tuple[int, ...], ...]


# -- generic nested integer lists ------------------------------------------------------------
def parse_int_list(raw: str | None) -> tuple[int, ...]:
    """``{1,2}`` or ``{}`` -> (1, 2) / () ; None -> ()."""
    if raw is None:
        return ()
    lx = Lexer(raw)
    out = _flat_ints(lx, "{", "}")
    if not lx.at_eof():
        raise lx.error("unexpected text after the integer list")
    return out


def _flat_ints(lx: Lexer, open_: str, close: str) -> tuple[int, ...]:
    lx.expect(open_)
    out: list[int] = []
    if lx.accept(close):
        return ()
    while True:
        out.append(_int(lx))
        if lx.accept(","):
            continue
        lx.expect(close)
        return tuple(out)


def _int(lx: Lexer) -> int:
    tok = lx.next()
    try:
        return int(tok.text)
    except ValueError:
        lx.pos = tok.pos
        raise lx.error("expected an integer") from None


def _nested_int_lists(lx: Lexer) -> tuple[tuple[int, ...], ...]:
    """``{{a,b},{c}}`` -> ((a, b), (c,))."""
    lx.expect("{")
    groups: list[tuple[int, ...]] = []
    if lx.accept("}"):
        return ()
    while True:
        groups.append(_flat_ints(lx, "{", "}"))
        if lx.accept(","):
            continue
        lx.expect("}")
        return tuple(groups)


def parse_pairs(raw: str | None) -> tuple[tuple[int, int], ...]:
    """``source_target_pairs={{0,1},{1,0}}`` -> ((0, 1), (1, 0))."""
    if raw is None:
        return ()
    lx = Lexer(raw)
    pairs = _nested_int_lists(lx)
    for p in pairs:
        if len(p) != 2:
            raise HloParseError(f"source_target_pairs entry {p} is not a pair; {HLO_FIX}")
    return tuple((p[0], p[1]) for p in pairs)


# -- iota device lists ------------------------------------------------------------------------
def iota_ids(reshape: Sequence[int], perm: Sequence[int] | None) -> list[int]:
    """Ids 0..prod(reshape)-1 laid out with shape ``reshape``, transposed by ``perm``."""
    n = prod(reshape)
    if not perm:
        return list(range(n))
    if sorted(perm) != list(range(len(reshape))):
        raise HloParseError(f"iota transpose T{tuple(perm)} is not a permutation; {HLO_FIX}")
    strides = [0] * len(reshape)
    acc = 1
    for d in range(len(reshape) - 1, -1, -1):
        strides[d] = acc
        acc *= reshape[d]
    tdims = [reshape[p] for p in perm]
    tstrides = [strides[p] for p in perm]
    out: list[int] = [0]
    for size, stride in zip(tdims, tstrides, strict=True):
        out = [base + i * stride for base in out for i in range(size)]
    return out


def _iota(lx: Lexer, short_ok: bool = False) -> tuple[tuple[int, ...], list[int]]:
    """``[dims]<=[reshape]T(perm)`` -> (dims, ids in row-major order).

    With ``short_ok`` the mesh's ``device_ids`` short form ``[reshape]T(perm)`` is accepted
    (dims are then the mesh axis sizes, returned as the transposed reshape).
    """
    dims = _flat_ints(lx, "[", "]")
    if short_ok and not lx.accept("<="):
        reshape = dims
    else:
        lx.expect("<=", "in an iota device list")
        reshape = _flat_ints(lx, "[", "]")
    perm: tuple[int, ...] | None = None
    save = lx.pos
    tok = lx.next()
    if tok.kind == "word" and tok.text == "T" and lx.peek_char() == "(":
        perm = _flat_ints(lx, "(", ")")
    else:
        lx.pos = save
    if prod(dims) != prod(reshape):
        raise lx.error(f"iota {list(dims)} and {list(reshape)} have different sizes", save)
    return dims, iota_ids(reshape, perm)


# -- replica groups -------------------------------------------------------------------------
def parse_replica_groups(
    raw: str | None, device_ids_raw: str | None, num_devices: int
) -> Groups:
    """Groups of logical device ids from ``replica_groups`` (+ ``device_ids``) text.

    ``num_devices`` resolves the empty list ``{}`` (one group of every device).
    """
    if raw is None:
        return (tuple(range(num_devices)),) if num_devices > 0 else ()
    lx = Lexer(raw)
    c = lx.peek_char()
    if c == "{":
        groups = _nested_int_lists(lx)
        if not groups:
            groups = (tuple(range(num_devices)),)
        rest_ok = lx.at_eof()
    elif c == "[":
        dims, ids = _iota(lx)
        if len(dims) != 2:
            raise lx.error("an iota replica group list must have 2 dimensions", 0)
        g, s = dims
        groups = tuple(tuple(ids[i * s : (i + 1) * s]) for i in range(g))
        rest_ok = lx.at_eof()
    elif raw.startswith("mesh"):
        groups, rest_ok = _mesh_groups(lx, device_ids_raw)
    else:
        raise lx.error("unrecognised replica_groups form")
    if not rest_ok:
        raise lx.error("unexpected text after replica_groups")
    return groups


_AXIS_REF = re.compile(r"'([^']*)'(?::\((\d+)\)(\d+))?")


def _mesh_groups(lx: Lexer, device_ids_raw: str | None) -> tuple[Groups, bool]:
    lx.word("'mesh'")
    lx.expect("[", "after 'mesh'")
    names: list[str] = []
    sizes: list[int] = []
    if not lx.accept("]"):
        while True:
            lx.skip_space()
            m = re.compile(r"'([^']*)'\s*=\s*(\d+)").match(lx.text, lx.pos)
            if not m:
                raise lx.error("expected 'axis'=size in a mesh")
            names.append(m.group(1))
            sizes.append(int(m.group(2)))
            lx.pos = m.end()
            if lx.accept(","):
                continue
            lx.expect("]", "to close the mesh axes")
            break
    n = prod(sizes)
    # The axes in braces may sit in this value or at the end of the device_ids attribute.
    axes_txt: str | None = None
    lx.skip_space()
    if lx.peek_char() == "{":
        s, e = lx.balanced_extent()
        axes_txt = lx.text[s:e]
    order = list(range(n))
    if device_ids_raw is not None:
        dl = Lexer(device_ids_raw)
        s, e = dl.balanced_extent()
        inner = Lexer(device_ids_raw[s + 1 : e - 1])
        if inner.peek_char() == "[":
            _, order = _iota(inner, short_ok=True)
        else:
            order = [_int(inner)]
            while inner.accept(","):
                order.append(_int(inner))
        if not inner.at_eof():
            raise inner.error("unexpected text in device_ids")
        dl.skip_space()
        if dl.peek_char() == "{":
            s2, e2 = dl.balanced_extent()
            axes_txt = device_ids_raw[s2:e2]
        if not dl.at_eof():
            raise dl.error("unexpected text after device_ids")
        if len(order) != n:
            raise HloParseError(f"device_ids has {len(order)} ids for a mesh of {n} devices; {HLO_FIX}")
    if axes_txt is None:
        raise lx.error("mesh replica groups without the grouped axes {'axis'}")
    refs = [(m.group(1), m.group(2), m.group(3)) for m in _AXIS_REF.finditer(axes_txt)]
    if not refs:
        raise lx.error(f"no axis names in {axes_txt!r}")
    return _groups_over_axes(names, sizes, order, refs), lx.at_eof()


def _groups_over_axes(
    names: list[str],
    sizes: list[int],
    order: list[int],
    refs: list[tuple[str, str | None, str | None]],
) -> Groups:
    """Split mesh dims into (sub-)axes, move the grouped ones last, cut into groups."""
    # For each mesh dim: list of factor sizes, and which factor each grouped ref maps to.
    factors: list[list[int]] = []
    ref_slot: dict[int, tuple[int, int]] = {}  # ref index -> (dim, factor index)
    for d, (name, size) in enumerate(zip(names, sizes, strict=True)):
        dim_refs = [(i, r) for i, r in enumerate(refs) if r[0] == name]
        if not dim_refs:
            factors.append([size])
            continue
        if len(dim_refs) == 1 and dim_refs[0][1][1] is None:
            factors.append([size])
            ref_slot[dim_refs[0][0]] = (d, 0)
            continue
        # sub-axes: sort by pre-size (the product of more-major factors of this axis)
        subs = sorted(
            ((int(r[1] or 1), int(r[2] or size), i) for i, r in dim_refs), key=lambda t: t[0]
        )
        fs: list[int] = []
        covered = 1
        for pre, sub, i in subs:
            if pre % covered:
                raise HloParseError(f"sub-axis {refs[i]} does not tile axis {name!r}; {HLO_FIX}")
            if pre != covered:
                fs.append(pre // covered)
                covered = pre
            ref_slot[i] = (d, len(fs))
            fs.append(sub)
            covered *= sub
        if size % covered:
            raise HloParseError(f"sub-axes of {name!r} do not divide its size {size}; {HLO_FIX}")
        if covered != size:
            fs.append(size // covered)
        factors.append(fs)
    missing = [refs[i][0] for i in range(len(refs)) if i not in ref_slot]
    if missing:
        raise HloParseError(f"replica groups name unknown mesh axes {missing}; {HLO_FIX}")
    flat_sizes: list[int] = []
    offset: list[int] = []
    for fs in factors:
        offset.append(len(flat_sizes))
        flat_sizes.extend(fs)
    grouped = [offset[d] + f for d, f in (ref_slot[i] for i in range(len(refs)))]
    perm = [a for a in range(len(flat_sizes)) if a not in grouped] + grouped
    positions = iota_ids(flat_sizes, perm)
    ids = [order[p] for p in positions]
    gsize = prod(flat_sizes[a] for a in grouped)
    return tuple(tuple(ids[i : i + gsize]) for i in range(0, len(ids), gsize))
