"""Shared settings and strategies of the property-based (fuzz) tests of the parsers.

Derandomized (the same examples on every run and in CI), no example database, a few hundred
examples and a per-example deadline: each fuzz test runs in seconds, and a parser that hangs or
slows down on some input fails the deadline instead of stalling the suite.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

FUZZ = settings(
    max_examples=200,
    deadline=2000,  # milliseconds per example
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@st.composite
def mutated(draw, original: str | bytes, max_edits: int = 4):
    """`original` with a few random edits: a slice deleted, duplicated, or replaced by random text."""
    out = original
    empty = out[:0]
    for _ in range(draw(st.integers(1, max_edits))):
        n = len(out)
        i = draw(st.integers(0, n))
        j = draw(st.integers(i, min(n, i + 64)))
        kind = draw(st.sampled_from(["delete", "duplicate", "replace", "truncate"]))
        if kind == "delete":
            out = out[:i] + out[j:]
        elif kind == "duplicate":
            out = out[:j] + out[i:j] + out[j:]
        elif kind == "truncate":
            out = out[:i]
        else:
            noise = draw(st.binary(max_size=16)) if isinstance(out, bytes) else draw(st.text(max_size=16))
            out = out[:i] + (noise or empty) + out[j:]
    return out
