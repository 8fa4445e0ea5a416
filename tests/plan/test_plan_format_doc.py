"""docs/plan-format.md is the plan schema's own documentation, and covers what plans hold."""

import json
from pathlib import Path

import pytest

from aoizora.plan.format_doc import render, rows
from aoizora.plan.schema import PLAN_SCHEMA, validate_plan_json

ROOT = Path(__file__).resolve().parents[2]
PLANS = sorted((ROOT / "docs" / "data" / "plans").rglob("*.json"))


def test_the_committed_document_is_rendered_from_the_schema():
    committed = (ROOT / "docs" / "plan-format.md").read_text()
    assert committed == render(), (
        "docs/plan-format.md is stale: PYTHONPATH=src python -m aoizora.plan.format_doc > docs/plan-format.md")


def test_every_field_is_described():
    undocumented = [path for path, field, _ in rows() if not field.get("description")]
    assert not undocumented


def _documented_objects() -> dict[str, set[str]]:
    """Path of each object whose fields the schema lists -> those fields."""
    out = {"": set(PLAN_SCHEMA["properties"])}
    for path, field, _ in rows():
        if "properties" in field:
            out[path] = set(field["properties"])
    return out


@pytest.mark.parametrize("path", PLANS, ids=lambda p: str(p.relative_to(ROOT / "docs" / "data" / "plans")))
def test_committed_plans_hold_only_documented_fields_and_validate(path):
    plan = json.loads(path.read_text())
    validate_plan_json(plan, str(path))
    for where, fields in _documented_objects().items():
        obj = plan
        for part in filter(None, where.split(".")):
            obj = obj.get(part, {}) if isinstance(obj, dict) else {}
        extra = set(obj) - fields if isinstance(obj, dict) else set()
        assert not extra, f"{path.name}: {where or '(top level)'} holds undocumented fields {sorted(extra)}"


def test_the_fields_said_to_be_set_by_an_option_of_aoizora_plan_are_the_ones_it_sets():
    """A field whose description names an option of `aoizora plan` (`--kernel`, ...) is the option's
    own parameter: `--kernel` sets `kernel_profile`, not the `kernel` the programs are written with."""
    from aoizora.cli import cli

    options = {opt: p.name for p in cli.commands["plan"].params for opt in getattr(p, "opts", ())}
    named = [(path, opt, name) for path, field, _ in rows() for opt, name in options.items()
             if f"`{opt}`" in field.get("description", "")]
    assert any(opt == "--kernel" for _, opt, _ in named)
    wrong = [f"{path} says {opt} (which sets {name})" for path, opt, name in named if path.rsplit(".", 1)[-1] != name]
    assert not wrong
