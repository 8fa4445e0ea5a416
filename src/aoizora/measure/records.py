"""Measured against predicted, as `aoizora measure` writes it: one JSON document per run.

Every document names the chip it ran on (JAX's device kind), the toolchain, the date and the
command; every row keeps each run's seconds beside the median and the prediction it is checked
against, so a reader can recompute any ratio from the file alone.
"""

from __future__ import annotations

import datetime
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any


def chip_description() -> dict[str, Any]:
    """The attached chip as JAX names it (device kind, count, platform); {} without a TPU."""
    import jax

    try:
        devices = jax.devices("tpu")
    except RuntimeError:
        return {}
    return {"platform": "tpu", "device_kind": devices[0].device_kind, "devices": len(devices)}


def document(kind: str, rows: list[dict[str, Any]], **fields: Any) -> dict[str, Any]:
    """The JSON document of one measurement run of `kind` ("splash", "per-device", "step")."""
    from aoizora.toolchain import toolchain_versions

    return {"kind": kind, "measured_on": chip_description(), "toolchain": toolchain_versions(),
            "date": datetime.date.today().isoformat(), "command": command_line(), **fields, "rows": rows}


def command_line() -> str:
    """This process's command as a user types it: `aoizora ...` for the CLI (however it was
    started), else the script's name from the repository root and its arguments, no host paths."""
    program = os.path.basename(sys.argv[0])
    if program in ("aoizora", "__main__.py"):
        words = ["aoizora", *sys.argv[1:]]
    else:
        parts = Path(sys.argv[0]).parts
        words = ["python", "/".join(parts[parts.index("benchmarks"):]) if "benchmarks" in parts else program,
                 *sys.argv[1:]]
    return " ".join(shlex.quote(w) for w in words)


def write_document(doc: dict[str, Any], path: str | os.PathLike[str]) -> None:
    """Write `doc` whole (a temporary file renamed over `path`, so nothing half-written is left)."""
    target = Path(path)
    tmp = target.with_name(target.name + ".partial")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False) + "\n")
    tmp.replace(target)
