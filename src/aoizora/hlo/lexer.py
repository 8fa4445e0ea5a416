"""Tokenizer for HLO text as libtpu prints it.

A `Lexer` is a cursor over the whole text. The parser pulls tokens one at a time (names,
numbers, strings, punctuation) and, for the long attribute values that dominate compiled
TPU text (``backend_config`` JSON, ``metadata``, ``sharding``), asks for the *extent* of the
value instead of its tokens: a bracket- and string-aware scan that runs in a few regex jumps.
That split is what keeps parsing a 14B-sized program well under a second in pure Python.

Every error names the 1-based line and column of the offending character.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from aoizora.errors import HloParseError

# A word: names (%all-gather.5, wide.param.1, constant.1.clone.1..sunk), opcodes
# (get-tuple-element), attribute keys, numbers (-0, 1e-06, 0x1F), dim labels (bf_io), layout
# letters. A leading '-' is allowed so negative literals lex as one word ("->" does not match:
# '>' is not a word character).
_WORD = re.compile(r"-?[%$]?[\w.][\w.\-$]*")
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_SPACE = re.compile(r"(?:\s+|/\*.*?\*/)+", re.S)
_PUNCT2 = ("->", "<=")
_PUNCT1 = frozenset("{}[]()=,:;*<>!#@+?")
_CHUNK = re.compile(r'[^,\n{}\[\]()"]*')
_GROUP_CHUNK = re.compile(r'[^{}\[\]()"]*')


def _match_from(chunk: re.Pattern[str], text: str, pos: int) -> int:
    """The end of `chunk`'s match at `pos`; the chunk patterns match the empty string, so always one."""
    m = chunk.match(text, pos)
    assert m is not None
    return m.end()
_JSON = json.JSONDecoder()
#: What to do about HLO that does not parse: every HloParseError ends with it.
HLO_FIX = "pass compiled HLO text as jax prints it (`jax.jit(f).lower(...).compile().as_text()`)"


@dataclass(frozen=True, slots=True)
class Token:
    """One token: ``kind`` is "word", "string", "punct" or "eof"; ``pos`` its offset."""

    kind: str
    text: str
    pos: int


class Lexer:
    """Pull tokenizer over HLO text (see the module docstring)."""

    __slots__ = ("text", "pos", "n")

    def __init__(self, text: str, pos: int = 0) -> None:
        self.text = text
        self.pos = pos
        self.n = len(text)

    # -- positions and errors -------------------------------------------------------------
    def line_col(self, pos: int) -> tuple[int, int]:
        """1-based line and column of an offset."""
        line = self.text.count("\n", 0, pos) + 1
        col = pos - (self.text.rfind("\n", 0, pos) + 1) + 1
        return line, col

    def error(self, message: str, pos: int | None = None) -> HloParseError:
        """An HloParseError at ``pos`` (default: the cursor) quoting the offending text."""
        p = self.pos if pos is None else pos
        line, col = self.line_col(p)
        snippet = self.text[p : p + 30].split("\n", 1)[0]
        found = repr(snippet) if snippet else "end of input"
        return HloParseError(
            f"{message} at line {line}, column {col} (found {found}); {HLO_FIX}",
            line, col,
        )

    # -- tokens ---------------------------------------------------------------------------
    def skip_space(self) -> None:
        """Move past whitespace and /* comments */."""
        m = _SPACE.match(self.text, self.pos)
        if m:
            self.pos = m.end()

    def at_eof(self) -> bool:
        """True when only whitespace is left."""
        self.skip_space()
        return self.pos >= self.n

    def peek_char(self) -> str:
        """The next non-space character ('' at the end)."""
        self.skip_space()
        return self.text[self.pos] if self.pos < self.n else ""

    def next(self) -> Token:
        """Consume and return the next token."""
        self.skip_space()
        p = self.pos
        if p >= self.n:
            return Token("eof", "", p)
        text = self.text
        c = text[p]
        if c == '"':
            self.pos = self._past_string(p)
            return Token("string", text[p : self.pos], p)
        two = text[p : p + 2]
        if two in _PUNCT2:
            self.pos = p + 2
            return Token("punct", two, p)
        m = _WORD.match(text, p)
        if m:
            self.pos = m.end()
            return Token("word", m.group(), p)
        if c in _PUNCT1:
            self.pos = p + 1
            return Token("punct", c, p)
        raise self.error(f"unexpected character {c!r}", p)

    def peek(self) -> Token:
        """The next token without consuming it."""
        save = self.pos
        tok = self.next()
        self.pos = save
        return tok

    def accept(self, punct: str) -> bool:
        """Consume ``punct`` if it is next; say whether it was."""
        self.skip_space()
        if self.text.startswith(punct, self.pos):
            if punct == "-" and self.text.startswith("->", self.pos):
                return False
            self.pos += len(punct)
            return True
        return False

    def expect(self, punct: str, what: str = "") -> None:
        """Consume ``punct`` or raise an error naming what was expected."""
        if not self.accept(punct):
            raise self.error(f"expected {punct!r}" + (f" {what}" if what else ""))

    def word(self, what: str) -> str:
        """Consume a word token (a name, opcode, number, key) or raise."""
        tok = self.next()
        if tok.kind != "word":
            self.pos = tok.pos
            raise self.error(f"expected {what}")
        return tok.text

    # -- attribute value extents ----------------------------------------------------------
    def value_extent(self) -> tuple[int, int]:
        """Start/end offsets of an attribute value starting at the cursor; moves past it.

        The value ends at the first ',' or newline outside brackets and strings, or before a
        closing bracket that it did not open.
        """
        self.skip_space_inline()
        text, n = self.text, self.n
        start = pos = self.pos
        depth = 0
        while True:
            pos = _match_from(_CHUNK, text, pos)
            if pos >= n:
                if depth:
                    raise self.error("unbalanced brackets in attribute value", start)
                break
            c = text[pos]
            if c == '"':
                pos = self._past_string(pos)
            elif c in "{[(":
                depth += 1
                pos += 1
            elif c in "}])":
                if depth == 0:
                    break
                depth -= 1
                pos += 1
            elif depth == 0:  # ',' or '\n' at top level
                break
            else:
                pos += 1
        end = pos
        while end > start and text[end - 1] in " \t\r":
            end -= 1
        self.pos = pos
        return start, end

    def balanced_extent(self) -> tuple[int, int]:
        """Offsets of one bracketed group starting at the cursor (after spaces); moves past it."""
        self.skip_space()
        text, n = self.text, self.n
        start = pos = self.pos
        if pos >= n or text[pos] not in "{[(":
            raise self.error("expected an opening bracket")
        depth = 0
        while pos < n:
            c = text[pos]
            if c == '"':
                pos = self._past_string(pos)
                continue
            if c in "{[(":
                depth += 1
            elif c in "}])":
                depth -= 1
                if depth == 0:
                    self.pos = pos + 1
                    return start, pos + 1
            pos += 1
            pos = _match_from(_GROUP_CHUNK, text, pos)
        raise self.error("unbalanced brackets (input truncated?)", start)

    def _past_string(self, pos: int) -> int:
        """The offset just past the quoted string that starts at ``pos``."""
        m = _STRING.match(self.text, pos)
        if not m:
            raise self.error("unterminated string", pos)
        return m.end()

    def json_value(self) -> object:
        """Decode a JSON value at the cursor (backend_config) and move past it."""
        self.skip_space_inline()
        try:
            obj, end = _JSON.raw_decode(self.text, self.pos)
        except json.JSONDecodeError as exc:
            raise self.error(f"malformed JSON ({exc.msg})", exc.pos) from None
        except RecursionError:
            raise self.error("JSON nested too deeply") from None
        self.pos = end
        return obj

    def skip_space_inline(self) -> None:
        """Move past spaces and tabs only (a newline ends an attribute value)."""
        text, pos, n = self.text, self.pos, self.n
        while pos < n and text[pos] in " \t":
            pos += 1
        self.pos = pos
