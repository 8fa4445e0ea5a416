"""Recursive-descent parser of HLO module text (``compiled.as_text()`` from libtpu).

Grammar (what libtpu 0.0.42.1 prints; ``[]`` optional, ``*`` repeated)::

    module       := 'HloModule' NAME (',' KEY '=' VALUE)* section* computation*
    section      := WORD entry*              e.g. FileNames / FunctionNames / StackFrames
    entry        := INT (STRING | '{' ... '}')
    computation  := ['ENTRY'] NAME ['(' params ')' '->' shape] '{' instruction* '}'
    instruction  := ['ROOT'] NAME '=' shape OPCODE '(' operands ')' (',' KEY '=' VALUE)*
    shape        := '(' shape (',' shape)* ')' | DTYPE ['[' dims ']' [LAYOUT]]
    operand      := [shape] NAME           (old printers put the shape before the name)

Attribute values are kept as raw text (see `aoizora.hlo.attrs` for the typed readers of
``replica_groups``, ``source_target_pairs``, ``dimensions``, ...), except ``backend_config``,
which is decoded as JSON when it is JSON, and constant literals, kept raw in
`Instruction.literal`. Keeping values raw until asked is what makes parsing cheap.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from aoizora.errors import HloParseError
from aoizora.hlo.lexer import HLO_FIX, Lexer
from aoizora.hlo.shapes import Shape

_ARRAY_SHAPE = re.compile(r"([a-z][a-z0-9]*)(?:\[([^\]]*)\](\{[^{}\s]*\})?)?")
_DIM = re.compile(r"\s*(?:<=)?\s*(\d+|\?)\s*")
# Fast paths over the same tokens as the general rules (the general path handles the rest
# and reports errors): an instruction head, an opcode, a plain operand list, ", key=".
_NAME = r"%?([\w.][\w.\-$]*)"
_HEAD = re.compile(r"(ROOT[ \t]+)?" + _NAME + r"[ \t]*=[ \t]*")
_OPCODE = re.compile(r"[ \t]*([a-z][a-z0-9\-]*)\(")
_SIMPLE_OPERANDS = re.compile(r"\(((?:[ \t]*%?[\w.][\w.\-$]*[ \t]*,)*[ \t]*(?:%?[\w.][\w.\-$]*)?[ \t]*)\)")
_ATTR_KEY = re.compile(r",[ \t]*([A-Za-z_][\w.\-]*)[ \t]*=")


@dataclass(slots=True)
class Instruction:
    """One HLO instruction as printed: raw attributes plus decoded ``backend_config``."""

    name: str
    shape: Shape
    opcode: str
    operands: tuple[str, ...]
    attrs: dict[str, str]
    backend_config: dict[str, Any] | str | None
    is_root: bool
    pos: int  # offset in the text, for error messages
    literal: str | None = None  # constant(...) payload, raw
    parameter_number: int | None = None

    def attr(self, key: str) -> str | None:
        """Raw text of an attribute, None when absent."""
        return self.attrs.get(key)


@dataclass(slots=True)
class Computation:
    """A named computation; ``instructions`` in printed (scheduled) order."""

    name: str
    is_entry: bool
    instructions: list[Instruction]
    by_name: dict[str, Instruction] = field(default_factory=dict)
    root: Instruction | None = None
    params: dict[int, Instruction] = field(default_factory=dict)


@dataclass(slots=True)
class HloModule:
    """A parsed module: header attributes, computations by name, the entry computation."""

    name: str
    attrs: dict[str, str]
    computations: dict[str, Computation]
    entry: Computation
    text: str = field(repr=False, default="")

    def computation(self, name: str) -> Computation:
        """The computation called ``name`` (with or without its leading '%')."""
        key = name.lstrip("%")
        comp = self.computations.get(key)
        if comp is None:
            raise HloParseError(f"HLO refers to an undefined computation {name!r}; {HLO_FIX}")
        return comp

    @property
    def num_partitions(self) -> int:
        """``num_partitions`` from the header (1 when absent)."""
        return int(self.attrs.get("num_partitions", "1"))

    @property
    def replica_count(self) -> int:
        """``replica_count`` from the header (1 when absent)."""
        return int(self.attrs.get("replica_count", "1"))


def parse_hlo(text: str) -> HloModule:
    """Parse HLO module text; raise HloParseError naming line and column on bad input."""
    if not isinstance(text, str):
        raise HloParseError(f"HLO text must be a string, not {type(text).__name__}; {HLO_FIX}")
    return _Parser(text).module()


#: Tuple shapes nest a few levels in compiled programs (a loop state holding a tuple); far deeper
#: nesting is not a program libtpu printed, and would exhaust Python's recursion limit.
MAX_TUPLE_DEPTH = 100


class _Parser:
    __slots__ = ("lx", "_shape_cache", "_tuple_depth")

    def __init__(self, text: str) -> None:
        self.lx = Lexer(text)
        self._shape_cache: dict[str, Shape] = {}
        self._tuple_depth = 0

    # -- module ---------------------------------------------------------------------------
    def module(self) -> HloModule:
        lx = self.lx
        tok = lx.next()
        if tok.kind != "word" or tok.text != "HloModule":
            lx.pos = tok.pos
            raise lx.error("expected 'HloModule' (this is not HLO module text)")
        name = lx.word("module name").lstrip("%")
        attrs: dict[str, str] = {}
        while lx.accept(","):
            key = lx.word("module attribute name")
            lx.expect("=", f"after module attribute {key!r}")
            s, e = lx.value_extent()
            attrs[key] = lx.text[s:e]
        computations: dict[str, Computation] = {}
        entry: Computation | None = None
        while not lx.at_eof():
            save = lx.pos
            tok = lx.next()
            if tok.kind != "word":
                lx.pos = tok.pos
                raise lx.error("expected a computation")
            after = lx.peek_char()
            if tok.text == "ENTRY" or after in ("(", "{"):
                lx.pos = save
                comp = self.computation()
                if comp.name in computations:
                    raise lx.error(f"computation {comp.name!r} defined twice", save)
                computations[comp.name] = comp
                if comp.is_entry:
                    if entry is not None:
                        # the analysis reads one entry: a second would be silently ignored
                        raise lx.error(f"second ENTRY computation {comp.name!r} (the first is {entry.name!r})", save)
                    entry = comp
            elif tok.text[0].isalpha():
                self.section()
            else:
                lx.pos = tok.pos
                raise lx.error("expected a computation")
        if entry is None:
            raise lx.error("module has no ENTRY computation (input truncated?)")
        return HloModule(name, attrs, computations, entry, lx.text)

    def section(self) -> None:
        """Skip a debug-info table (FileNames, StackFrames, ...): INT then STRING or {...}."""
        lx = self.lx
        while True:
            save = lx.pos
            tok = lx.next()
            if tok.kind == "word" and tok.text.isdigit():
                c = lx.peek_char()
                if c == "{":
                    lx.balanced_extent()
                else:
                    val = lx.next()
                    if val.kind not in ("string", "word"):
                        lx.pos = val.pos
                        raise lx.error("expected a table entry value")
                continue
            lx.pos = save
            return

    # -- computation ----------------------------------------------------------------------
    def computation(self) -> Computation:
        lx = self.lx
        is_entry = False
        name = lx.word("computation name")
        if name == "ENTRY":
            is_entry = True
            name = lx.word("computation name")
        name = name.lstrip("%")
        c = lx.peek_char()
        if c == "(":  # signature; the short printer omits it ("name {")
            lx.balanced_extent()  # parameter list: the parameter instructions carry the shapes
            lx.expect("->", "before the result shape")
            self.shape()
        elif c != "{":
            raise lx.error(f"expected '(' or '{{' after computation name {name!r}")
        lx.expect("{", f"to open computation {name!r}")
        comp = Computation(name, is_entry, [])
        while True:
            c = lx.peek_char()
            if c == "}":
                lx.pos += 1
                # `}, execution_thread="sparsecore"`: a computation libtpu runs on another thread
                # (TPU7x offloads collectives to its SparseCores)
                while lx.accept(","):
                    lx.word("computation attribute name")
                    lx.expect("=", "after a computation attribute")
                    lx.value_extent()
                break
            if c == "":
                raise lx.error(f"computation {name!r} is not closed (input truncated?)")
            inst = self.instruction()
            self._check_meaning(inst)
            if inst.name in comp.by_name:
                raise lx.error(f"instruction {inst.name!r} defined twice", inst.pos)
            comp.instructions.append(inst)
            comp.by_name[inst.name] = inst
            if inst.is_root:
                comp.root = inst
            if inst.parameter_number is not None:
                comp.params[inst.parameter_number] = inst
        if not comp.instructions:
            raise lx.error(f"computation {name!r} is empty")
        if comp.root is None:
            comp.root = comp.instructions[-1]
        return comp

    # -- instruction ----------------------------------------------------------------------
    def instruction(self) -> Instruction:
        """``[ROOT] name = shape opcode(arguments), key=value, ...``"""
        lx = self.lx
        lx.skip_space()
        start = lx.pos
        name, is_root = self._instruction_head()
        shape = self.shape()
        opcode = self._opcode()
        literal = None
        param_no = None
        operands: tuple[str, ...] = ()
        if opcode == "constant":
            s, e = lx.balanced_extent()
            literal = lx.text[s + 1 : e - 1]
        elif opcode == "parameter":
            param_no = self._parameter_number()
        else:
            operands = self.operands()
        attrs, backend_config = self._attributes()
        return Instruction(
            name, shape, opcode, operands, attrs, backend_config, is_root, start, literal, param_no
        )

    def _check_meaning(self, inst: Instruction) -> None:
        """Refuse an instruction that parses but would be analysed into wrong numbers: a while loop
        with a negative known trip count, a collective-permute that sends to (or from) a device twice
        (XLA's CollectivePermute semantics: no two pairs share a source or a target)."""
        if inst.opcode == "while" and isinstance(inst.backend_config, dict):
            known = inst.backend_config.get("known_trip_count")
            n = known.get("n") if isinstance(known, dict) else None
            try:
                negative = n is not None and int(n) < 0
            except (TypeError, ValueError):
                negative = False
            if negative:
                raise self.lx.error(f"while {inst.name!r} has a negative known_trip_count {n}", inst.pos)
        if inst.opcode in ("collective-permute", "collective-permute-start") and inst.attr("source_target_pairs"):
            from aoizora.hlo.attrs import parse_pairs

            try:
                pairs = parse_pairs(inst.attr("source_target_pairs"))
            except HloParseError as exc:
                raise self.lx.error(f"{inst.opcode} {inst.name!r}: {str(exc).split(';')[0]}", inst.pos) from None
            for side, ids in (("target", [t for _, t in pairs]), ("source", [s for s, _ in pairs])):
                repeated = sorted({d for d in ids if ids.count(d) > 1})
                if repeated:
                    raise self.lx.error(f"{inst.opcode} {inst.name!r} names device {repeated[0]} as a {side} "
                                        "of more than one pair", inst.pos)

    def _instruction_head(self) -> tuple[str, bool]:
        """(name, is root) of ``[ROOT] %name =``."""
        lx = self.lx
        m = _HEAD.match(lx.text, lx.pos)
        if m:  # fast path for the common "[ROOT] %name = " head (same tokens, one regex)
            lx.pos = m.end()
            return m.group(2), m.group(1) is not None
        name = lx.word("instruction name")
        is_root = False
        if name == "ROOT":
            is_root = True
            name = lx.word("instruction name")
        name = name.lstrip("%")
        lx.expect("=", f"after instruction name {name!r}")
        return name, is_root

    def _opcode(self) -> str:
        """The opcode; leaves the cursor at the '(' after it."""
        lx = self.lx
        m = _OPCODE.match(lx.text, lx.pos)
        if m:
            lx.pos = m.end() - 1  # at the '('
            return m.group(1)
        opcode = lx.word("opcode")
        if lx.peek_char() != "(":
            raise lx.error(f"expected '(' after opcode {opcode!r}")
        return opcode

    def _parameter_number(self) -> int:
        lx = self.lx
        lx.expect("(")
        num = lx.word("parameter number")
        if not num.isdigit():
            raise lx.error("parameter number must be an integer")
        lx.expect(")", "after the parameter number")
        return int(num)

    def _attributes(self) -> tuple[dict[str, str], dict[str, Any] | str | None]:
        """(raw attributes, decoded ``backend_config``) of ``, key=value, ...`` up to the line's end."""
        lx = self.lx
        attrs: dict[str, str] = {}
        backend_config: dict[str, Any] | str | None = None
        text = lx.text
        while True:
            m = _ATTR_KEY.match(text, lx.pos)
            if m:  # fast path: ", key="
                key = m.group(1)
                lx.pos = m.end()
            else:
                if not lx.accept(","):
                    break
                if lx.peek_char() == ",":  # libtpu sometimes prints an empty attribute: ", ,"
                    continue
                key = lx.word("attribute name")
                lx.expect("=", f"after attribute {key!r}")
            if key == "backend_config":
                c = lx.peek_char()
                if c == "{":
                    backend_config = lx.json_value()  # type: ignore[assignment]  # a JSON value opening with { is an object
                    continue
                if c == '"':
                    tok = lx.next()
                    backend_config = _unquote(tok.text)
                    continue
            s, e = lx.value_extent()
            if s == e:
                raise lx.error(f"attribute {key!r} has no value")
            attrs[key] = lx.text[s:e]
        return attrs, backend_config

    def operands(self) -> tuple[str, ...]:
        lx = self.lx
        m = _SIMPLE_OPERANDS.match(lx.text, lx.pos)
        if m:  # fast path: "(%a, %b)" — plain names only
            inner = m.group(1).strip()
            lx.pos = m.end()
            if not inner:
                return ()
            return tuple(x.strip().lstrip("%") for x in inner.split(","))
        lx.expect("(")
        names: list[str] = []
        if lx.accept(")"):
            return ()
        while True:
            c = lx.peek_char()
            if c == "(":  # old printer: tuple shape before the name
                self.shape()
            tok = lx.next()
            if tok.kind != "word":
                lx.pos = tok.pos
                raise lx.error("expected an operand name")
            if lx.text.startswith("[", lx.pos) or (
                not tok.text.startswith("%") and lx.peek_char() == "%"
            ):
                lx.pos = tok.pos  # old printer: array shape before the name
                self.shape()
                tok = lx.next()
                if tok.kind != "word":
                    lx.pos = tok.pos
                    raise lx.error("expected an operand name")
            names.append(tok.text.lstrip("%"))
            if lx.accept(","):
                continue
            lx.expect(")", "to close the operand list")
            return tuple(names)

    # -- shapes ---------------------------------------------------------------------------
    def shape(self) -> Shape:
        lx = self.lx
        lx.skip_space()
        if lx.accept("("):
            if self._tuple_depth >= MAX_TUPLE_DEPTH:
                raise lx.error(
                    f"tuple shape nested deeper than {MAX_TUPLE_DEPTH} levels"
                )
            self._tuple_depth += 1
            elems: list[Shape] = []
            if not lx.accept(")"):
                while True:
                    elems.append(self.shape())
                    if lx.accept(","):
                        continue
                    lx.expect(")", "to close a tuple shape")
                    break
            self._tuple_depth -= 1
            return Shape("tuple", (), None, tuple(elems))
        m = _ARRAY_SHAPE.match(lx.text, lx.pos)
        if not m or m.end() == lx.pos:
            raise lx.error("expected a shape")
        if m.group(2) is None and lx.text.startswith("[", m.end()):
            raise lx.error("unterminated dimensions in shape", m.end())
        key = m.group(0)
        cached = self._shape_cache.get(key)
        if cached is None:
            dtype, dims_txt, layout = m.group(1), m.group(2), m.group(3)
            dims: tuple[int, ...] = ()
            if dims_txt:
                out = []
                for part in dims_txt.split(","):
                    dm = _DIM.fullmatch(part)
                    if not dm:
                        raise lx.error("malformed dimension in shape", m.start(2))
                    out.append(0 if dm.group(1) == "?" else int(dm.group(1)))
                dims = tuple(out)
            cached = Shape(dtype, dims, layout[1:-1] if layout else None)
            self._shape_cache[key] = cached
        lx.pos = m.end()
        return cached


def _unquote(s: str) -> str:
    """The content of a double-quoted HLO string with C escapes resolved."""
    body = s[1:-1]
    if "\\" not in body:
        return body
    return body.encode("latin-1", "backslashreplace").decode("unicode_escape")
