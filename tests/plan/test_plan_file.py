"""The plan loader checks a whole plan file before anything uses it: encoding, strict JSON, and
that its parts agree (mesh names vs sizes, slice name vs generation, shape and chips, coordinates)."""

from __future__ import annotations

import json
import re

import pytest

from aoizora.errors import PlanFormatError
from aoizora.plan import Plan, load_plan
from tests.plan.plan_doc import plan_doc


def _write(tmp_path, doc) -> str:
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    return str(path)


def test_the_hand_written_plan_is_valid(tmp_path):
    plan = load_plan(_write(tmp_path, plan_doc()))
    assert plan.axis_sizes == (2, 2) and plan.device_coords.shape == (2, 2, 2)


def _set(path: str, value):
    def mutate(d):
        *head, last = path.split(".")
        node = d
        for k in head:
            node = node[int(k)] if isinstance(node, list) else node[k]
        node[int(last) if isinstance(node, list) else last] = value
    return mutate


@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (_set("mesh.axis_names", ["data", "fsdp", "tensor"]), "names 3 mesh axes but gives 2 sizes"),
        (_set("mesh", {"axis_names": ["a", "b", "c"], "axis_sizes": [1, 1, 2, 2]}), "names 3 mesh axes but gives 4"),
        (_set("mesh.axis_names", ["data", "data"]), "repeats a mesh axis name"),
        (_set("mesh.axis_sizes", [2, 1]), "2 devices"),
        (_set("topology.name", "v5e:2x4"), "gives shape 2x2"),  # explain used to fail with IndexError
        (_set("topology.name", "v6e:2x2"), "generation v5e"),
        (_set("topology.device_kinds", ["TPU v6 lite"]), "device kind(s) TPU v6 lite"),
        (_set("topology.name", "v9:2x2"), "does not know"),
        (_set("placement.device_coords.0.0", [0, 2]), "outside the 2x2 slice"),
        (_set("placement.device_coords.0.0", [-1, 0]), "outside the 2x2 slice"),
        (_set("placement.device_coords.0.1", [0, 0]), "exactly once"),
        (_set("placement.device_coords.0.0", [0.0, 0.0]), "non-integer"),
        (_set("placement.device_coords", [[0, 0], [1, 0], [0, 1], [1, 1]]), "nested as (4, 2), expected (2, 2, 2)"),
        (_set("placement.device_coords.1", [[0, 1]]), "expected (2, 2, 2)"),  # ragged
        (_set("prediction.step_seconds", float("inf")), "Infinity is not a JSON number"),
    ],
)
def test_inconsistent_plans_are_refused_on_load(tmp_path, mutate, fragment):
    doc = plan_doc()
    mutate(doc)
    with pytest.raises(PlanFormatError, match=re.escape(fragment)) as info:
        load_plan(_write(tmp_path, doc))
    assert "re-run `aoizora plan`" in str(info.value)


def test_nan_in_a_plan_file_is_refused(tmp_path):
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(plan_doc()).replace('"step_seconds": 0.01', '"step_seconds": NaN'))
    with pytest.raises(PlanFormatError, match="NaN is not a JSON number"):
        load_plan(path)


@pytest.mark.parametrize("content", [b"\xff\xfe\x00{", "{}".encode("utf-16"), b'{"a": "\xe9"}'])
def test_a_plan_file_that_is_not_utf8_is_refused(tmp_path, content):
    path = tmp_path / "plan.json"
    path.write_bytes(content)
    with pytest.raises(PlanFormatError, match="not UTF-8"):
        load_plan(path)


def test_a_plan_cannot_be_made_inconsistent_in_memory():
    doc = plan_doc()
    doc["mesh"]["axis_names"] = ["a", "b", "c"]
    with pytest.raises(PlanFormatError, match="3 mesh axes"):
        Plan(doc)


def test_non_finite_numbers_are_refused_in_memory():
    doc = plan_doc()
    doc["prediction"]["step_seconds"] = float("nan")
    with pytest.raises(PlanFormatError, match="non-finite number at prediction/step_seconds"):
        Plan(doc)


def test_save_refuses_non_finite_numbers(tmp_path):
    plan = Plan(plan_doc())
    plan.data["prediction"]["step_seconds"] = float("nan")  # changed after the checks
    with pytest.raises(ValueError):
        plan.save(tmp_path / "p.json")
    assert not list(tmp_path.iterdir())  # nothing half-written
