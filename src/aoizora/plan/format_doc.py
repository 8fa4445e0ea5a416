"""docs/plan-format.md, rendered from the plan schema's own documentation.

    PYTHONPATH=src python -m aoizora.plan.format_doc > docs/plan-format.md

tests/plan/test_plan_format_doc.py fails when the committed document is not this output, so a
field added to the schema without its description, unit or serving note shows up there.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from aoizora.plan.schema import DOC_TYPE, PLAN_SCHEMA, SCHEMA_VERSION, SERVING, UNIT

HEADER = f"""# The plan file format (schema version {SCHEMA_VERSION})

A plan is one JSON object, written by `aoizora plan` and checked whole against the schema in
`src/aoizora/plan/schema.py` whenever it is loaded (`aoizora.load_plan`); a plan that fails the
check is refused with the field at fault. This page is rendered from that schema
(`PYTHONPATH=src python -m aoizora.plan.format_doc > docs/plan-format.md`) and a test keeps the
two the same.

**What a serving program needs.** To run a plan, a program reads the rows whose "serving" column
says what for: `Plan.mesh()` uses the topology, the mesh and `placement.device_coords` to put each
mesh position on its chip; the compiler flags go into `LIBTPU_INIT_ARGS`; the strategy's
attention, weights, Ulysses chunks and splash blocks say how to run the model (the MaxDiffusion
export turns them into its flags). Everything else (prediction, baselines, alternatives, Stage 1
and Stage 2 records, timings) explains the choice and is not needed to run it.

A path `a.b` is field `b` inside object `a`. The schema checks the required fields and those
whose type is given; the rest (marked "not checked") are fields a workload defines for itself,
shown as aoizora's Wan plans write them. Required fields are always present; the others appear \
when they apply (e.g. `strategy.ulysses_chunks` only for a
chunked Ulysses strategy).

| field | type | required | unit | serving needs it for | meaning |
|---|---|---|---|---|---|
"""


def _type(schema: dict[str, Any]) -> str:
    if "const" in schema:
        return f"`{schema['const']}`"
    kind = schema.get("type", schema.get(DOC_TYPE, "any"))
    if kind == "array" and "items" in schema:
        return f"list of {schema['items'].get('type', 'any')}"
    return str(kind)


def rows(schema: dict[str, Any] = PLAN_SCHEMA, prefix: str = "") -> Iterator[tuple[str, dict[str, Any], bool]]:
    """(path, field schema, required) of every documented field, depth first in schema order."""
    required = set(schema.get("required", ()))
    for name, field in schema.get("properties", {}).items():
        path = f"{prefix}{name}"
        yield path, field, name in required
        yield from rows(field, path + ".")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def render() -> str:
    lines = [
        f"| `{path}` | {_type(field)}{' (not checked)' if DOC_TYPE in field else ''} | {'yes' if req else ''} | "
        f"{_cell(field.get(UNIT, ''))} | "
        f"{_cell(field.get(SERVING, ''))} | {_cell(field.get('description', ''))} |"
        for path, field, req in rows()
    ]
    return HEADER + "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(render(), end="")
