"""Plan cache: an identical request (workload, shapes, slice, toolchain, planner options) is answered from disk.

No entry is trusted: each file holds its key, a SHA-256 checksum of the plan and the plan, and is
used only if it is UTF-8 strict JSON naming the key it was looked up by, the plan matches the
checksum, passes every check of a plan file and answers the same request. Anything else is deleted,
logged in one line, and recomputed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from aoizora.defaults import cache_root
from aoizora.errors import PlanFormatError
from aoizora.plan.plan import Plan, check_plan, strict_json_loads

log = logging.getLogger("aoizora.cache")


def cache_dir() -> Path:
    """Where plans are cached: `$AOIZORA_CACHE_DIR` itself, else `plans/` in the user's cache directory."""
    return cache_root() if "AOIZORA_CACHE_DIR" in os.environ else cache_root() / "plans"


def cache_key(request: dict[str, Any]) -> str:
    blob = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _checksum(plan_data: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(plan_data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _entry_plan(raw: bytes, key: str, request: dict[str, Any]) -> Plan:
    """The plan of a cache entry; ValueError or PlanFormatError unless the entry is whole and answers `request`."""
    entry = strict_json_loads(raw.decode("utf-8"))
    if not isinstance(entry, dict) or not isinstance(entry.get("plan"), dict):
        raise ValueError("not a plan-cache entry of this format")
    if entry.get("key") != key:
        raise ValueError(f"entry names key {entry.get('key')!r}")
    if entry.get("sha256") != _checksum(entry["plan"]):
        raise ValueError("plan does not match its checksum")
    check_plan(entry["plan"], source="cached plan")
    plan = Plan(entry["plan"])
    if plan.data.get("request") != request:
        raise ValueError("entry answers another request")
    return plan


def lookup(request: dict[str, Any]) -> Plan | None:
    """The cached plan of `request`, or None (a bad entry is deleted and logged)."""
    key = cache_key(request)
    path = cache_dir() / f"{key}.json"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("aoizora: cannot read plan-cache entry %s (%s); planning again", path, exc.strerror)
        return None
    try:
        return _entry_plan(raw, key, request)
    except (ValueError, PlanFormatError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError too
        path.unlink(missing_ok=True)
        reason = " ".join(str(exc).split())[:200]
        log.warning("aoizora: discarded plan-cache entry %s (%s: %s); planning again", key, type(exc).__name__, reason)
        return None


def store(request: dict[str, Any], plan: Plan) -> Path:
    """Write `plan` as the answer to `request`, atomically (temp file, then rename)."""
    key = cache_key(request)
    path = cache_dir() / f"{key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    entry = {"key": key, "sha256": _checksum(plan.data), "plan": plan.data}
    fd, tmp = tempfile.mkstemp(prefix=".plan-", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(entry, fh, allow_nan=False)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path
