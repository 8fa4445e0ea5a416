"""Fuzzing the plan loader: any bytes, and any edit of a valid plan's JSON, either load as a plan
whose parts agree or raise PlanFormatError — never another exception, never a hang."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from aoizora.errors import PlanFormatError
from aoizora.plan.plan import plan_from_bytes
from tests.fuzzing import FUZZ, mutated
from tests.plan.plan_doc import plan_doc

VALID = json.dumps(plan_doc())
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 10**20) | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)


def _load(raw: bytes) -> None:
    try:
        plan = plan_from_bytes(raw)
    except PlanFormatError:
        return
    # accepted: the parts agree
    assert math.prod(plan.axis_sizes) == math.prod(plan.data["topology"]["shape"]) * plan.cores_per_chip
    assert plan.device_coords.shape[:-1] == plan.axis_sizes
    assert len(set(plan.axis_names)) == len(plan.axis_names) == len(plan.axis_sizes)
    assert np.isfinite(plan.predicted_step_seconds)


@FUZZ
@given(st.binary(max_size=300))
def test_random_bytes(raw):
    _load(raw)


@FUZZ
@given(mutated(VALID))
def test_mutated_text(text):
    _load(text.encode("utf-8", "surrogatepass"))


def _paths(node, prefix=()):
    yield prefix
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _paths(v, (*prefix, i))


PATHS = [p for p in _paths(plan_doc()) if p]


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(PATHS), JSON_VALUES), min_size=1, max_size=3))
def test_values_replaced_anywhere(edits):
    doc = plan_doc()
    for path, value in edits:
        node = doc
        try:
            for k in path[:-1]:
                node = node[k]
            node[path[-1]] = value
        except (KeyError, IndexError, TypeError):  # an earlier edit removed this path
            continue
    _load(json.dumps(doc).encode())
