"""Plan cache: an identical request (workload, shapes, slice, toolchain, planner options) is answered from disk.

No entry is trusted: each file holds its key, a SHA-256 checksum of the plan and the plan, and is
used only if it is UTF-8 strict JSON naming the key it was looked up by, the plan matches the
checksum, passes every check of a plan file and answers the same request. Anything else is deleted,
logged in one line, and recomputed.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aoizora.defaults import cache_root
from aoizora.plan.plan import Plan, check_plan
from aoizora.store import ChecksummedStore


def cache_dir() -> Path:
    """Where plans are cached: `$AOIZORA_CACHE_DIR` itself, else `plans/` in the user's cache directory."""
    return cache_root() if "AOIZORA_CACHE_DIR" in os.environ else cache_root() / "plans"


def _store() -> ChecksummedStore:
    return ChecksummedStore(cache_dir(), field="plan", what="plan-cache", again="planning again")


def cache_key(request: dict[str, Any]) -> str:
    blob = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _answer(request: dict[str, Any]) -> Callable[[dict[str, Any]], Plan]:
    """A parser of a cached plan: the Plan, or an error unless it passes every check of a plan file and
    answers `request`."""

    def parse(data: dict[str, Any]) -> Plan:
        check_plan(data, source="cached plan")
        plan = Plan(data)
        if plan.data.get("request") != request:
            raise ValueError("entry answers another request")
        return plan

    return parse


def lookup(request: dict[str, Any]) -> Plan | None:
    """The cached plan of `request`, or None (a bad entry is deleted and logged)."""
    return _store().load(cache_key(request), _answer(request))


def store(request: dict[str, Any], plan: Plan) -> Path:
    """Write `plan` as the answer to `request`, atomically (temp file, then rename)."""
    return _store().store(cache_key(request), plan.data)
