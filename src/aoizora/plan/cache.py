"""Plan cache: an identical request (workload, shapes, slice, toolchain, planner options) is answered from disk.

Entries are validated plans; an entry that does not load cleanly is deleted and recomputed,
never trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import platformdirs

from aoizora.errors import PlanFormatError
from aoizora.plan.plan import Plan, load_plan


def cache_root() -> Path:
    """`$AOIZORA_CACHE_DIR`, else the user's cache directory (e.g. ~/.cache/aoizora)."""
    env = os.environ.get("AOIZORA_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir("aoizora"))


def cache_dir() -> Path:
    """Where plans are cached: `$AOIZORA_CACHE_DIR` itself, else `plans/` in the user's cache directory."""
    return cache_root() if "AOIZORA_CACHE_DIR" in os.environ else cache_root() / "plans"


def cache_key(request: dict[str, Any]) -> str:
    blob = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def lookup(request: dict[str, Any]) -> Plan | None:
    path = cache_dir() / f"{cache_key(request)}.json"
    if not path.exists():
        return None
    try:
        plan = load_plan(path)
    except PlanFormatError:
        path.unlink(missing_ok=True)  # corrupt: discard, the caller recomputes
        return None
    if plan.data.get("request") != request:
        path.unlink(missing_ok=True)
        return None
    return plan


def store(request: dict[str, Any], plan: Plan) -> Path:
    return plan.save(cache_dir() / f"{cache_key(request)}.json")
