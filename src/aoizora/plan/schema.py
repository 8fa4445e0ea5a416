"""The plan file format: versioned JSON, checked against a JSON Schema on every load."""

from __future__ import annotations

from typing import Any

import jsonschema

from aoizora.errors import PlanFormatError

SCHEMA_VERSION = 1

_NUMBER = {"type": "number"}
_SECONDS = {"type": "number", "minimum": 0}
_COORDS = {"type": "array"}  # nested in the mesh shape; leaves are int lists (checked in Plan)

_PREDICTION = {
    "type": "object",
    "required": ["step_seconds", "compute_seconds", "exposed_comm_seconds"],
    "properties": {
        "step_seconds": _SECONDS,
        "compute_seconds": _SECONDS,
        "exposed_comm_seconds": _SECONDS,
        "collectives": {"type": "array"},
    },
}

PLAN_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "aoizora plan",
    "type": "object",
    "required": [
        "schema_version", "workload", "topology", "toolchain", "mesh", "strategy", "placement",
        "prediction", "alternatives", "timings",
    ],
    "properties": {
        "schema_version": {"const": SCHEMA_VERSION},
        "aoizora_version": {"type": "string"},
        "created": {"type": "string"},
        "workload": {
            "type": "object",
            "required": ["name", "shapes"],
            "properties": {"name": {"type": "string"}, "shapes": {"type": "object"}},
        },
        "topology": {
            "type": "object",
            "required": ["name", "generation", "shape", "cores_per_chip", "device_kinds"],
            "properties": {
                "name": {"type": "string"},
                "generation": {"type": "string"},
                "shape": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 2, "maxItems": 3},
                "cores_per_chip": {"type": "integer", "minimum": 1},
                "device_kinds": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            },
        },
        "compiler": {
            "type": "object",
            "required": ["libtpu_args"],
            "properties": {"libtpu_args": {"type": "string"}},
        },
        "toolchain": {
            "type": "object",
            "required": ["jax", "jaxlib", "libtpu"],
            "properties": {"jax": {"type": "string"}, "jaxlib": {"type": "string"}, "libtpu": {"type": "string"}},
        },
        "mesh": {
            "type": "object",
            "required": ["axis_names", "axis_sizes"],
            "properties": {
                "axis_names": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                "axis_sizes": {"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
            },
        },
        "strategy": {"type": "object", "required": ["key"], "properties": {"key": {"type": "string"}}},
        "placement": {
            "type": "object",
            "required": ["name", "description", "device_coords"],
            "properties": {"name": {"type": "string"}, "description": {"type": "string"}, "device_coords": _COORDS},
        },
        "prediction": _PREDICTION,
        "baselines": {"type": "object"},
        "alternatives": {"type": "array", "items": {"type": "object", "required": ["strategy", "placement"]}},
        "stage1": {"type": "object"},
        "stage2": {
            "type": "object",
            "required": ["compiles", "pruned_by_q1"],
            "properties": {
                "compiles": {"type": "integer", "minimum": 0},
                "compiled_strategies": {"type": "array", "items": {"type": "string"}},
                "pruned_by_q1": {"type": "object"},
                "q1_bound_violations": {"type": "object"},
                "workers": {"type": "integer", "minimum": 1},
                # placement name each strategy was compiled over; pairs recompiled over their own order
                "compile_placements": {"type": "object", "additionalProperties": {"type": "string"}},
                "verify_recompiles": {"type": "array", "items": {"type": "object",
                                                                 "required": ["strategy", "placement"]}},
            },
        },
        "timings": {"type": "object", "additionalProperties": _SECONDS},
        "notes": {"type": "array", "items": {"type": "string"}},
        "request": {"type": "object"},
    },
}


def validate_plan_json(data: Any, source: str = "plan") -> None:
    """Raise PlanFormatError (one line: where and what) unless `data` is a valid plan."""
    if not isinstance(data, dict):
        raise PlanFormatError(f"{source} is not a JSON object; re-run `aoizora plan` to write a new one")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise PlanFormatError(
            f"{source} has schema_version {version!r}, this aoizora reads {SCHEMA_VERSION}; re-run `aoizora plan`"
        )
    try:
        jsonschema.validate(data, PLAN_SCHEMA)
    except jsonschema.ValidationError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise PlanFormatError(f"{source} is not a valid plan at {where}: {exc.message}; re-run `aoizora plan`") from None
