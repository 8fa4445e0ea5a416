"""Plan cache: an identical request (workload, shapes, slice, toolchain, planner options) is answered from disk.

No entry is trusted: each file holds its key, a SHA-256 checksum of the plan and the plan, and is
used only if it is UTF-8 strict JSON naming the key it was looked up by, the plan matches the
checksum, passes every check of a plan file and answers the same request. Anything else is deleted,
logged in one line, and recomputed.

A degraded plan is never cached nor answered from the cache: one that lost a candidate to a compile
that timed out or failed, a verifying recompile that failed, or a strategy that failed to lower
(see `degraded`). Such a loss is the circumstances' (host load, the timeout, a damaged compile-cache
entry, a killed worker), not the request's, so keying the plan by the settings that caused it would
still let a plan degraded by a busy host answer the same request on an idle one. The compiler's
refusal for memory is deterministic and is not a degradation: plans that lost a strategy to it are
cached. Re-planning a degraded request is cheap where it did not degrade: the Stage 1 and compile
caches answer the parts that worked.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aoizora.defaults import cache_root
from aoizora.plan.plan import Plan, check_plan
from aoizora.stage1 import LOWERING_FAILED
from aoizora.stage2 import refused_for_memory
from aoizora.store import ChecksummedStore, unusable_dir

log = logging.getLogger("aoizora.cache")


def cache_dir() -> Path:
    """Where plans are cached: `$AOIZORA_CACHE_DIR` itself, else `plans/` in the user's cache directory."""
    return cache_root() if "AOIZORA_CACHE_DIR" in os.environ else cache_root() / "plans"


def caches_usable() -> bool:
    """Whether the cache folder (`cache_root`, which holds the plan, Stage 1 and compile caches) can be
    written; when it cannot, one warning line says planning goes on without caches. Checked before
    any long work, so that a cache folder that is a file, read-only or unwritable costs one line,
    not the work."""
    problem = unusable_dir(cache_root())
    if problem:
        log.warning("aoizora: the cache folder cannot be used (%s); planning without caches "
                    "(set AOIZORA_CACHE_DIR to a writable folder, or pass --no-cache)", problem)
    return problem is None


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
        loss = degraded(plan.data)
        if loss:
            raise ValueError(f"a degraded plan ({loss})")
        return plan

    return parse


def lookup(request: dict[str, Any]) -> Plan | None:
    """The cached plan of `request`, or None (a bad entry is deleted and logged)."""
    return _store().load(cache_key(request), _answer(request))


def store(request: dict[str, Any], plan: Plan) -> Path | None:
    """Write `plan` as the answer to `request`, atomically (temp file, then rename); a degraded plan
    (see `degraded`) is not written, and None is returned."""
    loss = degraded(plan.data)
    if loss:
        log.info("aoizora: plan not cached: %s", loss)
        return None
    return _store().store(cache_key(request), plan.data)


def degraded(plan_data: dict[str, Any]) -> str | None:
    """Why a plan lost a candidate to its circumstances rather than its request, or None.

    The losses: a plan of Stage 1's alone (nothing compiled in its time budget), a time budget that
    cut Stage 2 short, a Stage 2 candidate or expert deployment dropped for any reason but the
    compiler's refusal for memory (a timeout, a failed compile), a verifying recompile that failed,
    a Stage 1 strategy that failed to lower."""
    budget = plan_data.get("stage2", {}).get("time_budget")
    if plan_data.get("prediction", {}).get("basis") == "q1":
        return "nothing compiled: the plan is Stage 1's best strategy, not checked by Q2"
    if isinstance(budget, dict) and budget.get("cut"):
        return f"the time budget of {budget.get('seconds')} s cut Stage 2 short"
    rows = [*plan_data.get("alternatives", []), *plan_data.get("baselines", {}).get("experts", [])]
    for row in rows:
        dropped = row.get("dropped") if isinstance(row, dict) else None
        if isinstance(dropped, str) and not refused_for_memory(dropped):
            return f"{row.get('strategy')} was dropped: {dropped}"
    for note in plan_data.get("notes", []):
        if isinstance(note, str) and note.startswith("recompile of ") and " failed (" in note:
            return note
    for entry in plan_data.get("stage1", {}).get("entries", []):
        if isinstance(entry, dict) and entry.get("verdict") == LOWERING_FAILED:
            return f"{entry.get('key')} failed to lower in Stage 1"
    return None
