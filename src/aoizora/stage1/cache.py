"""Stage 1 cache: each strategy's analysis (verdict, Q1, memory estimate, summary), kept on disk.

Lowering dominates Stage 1 (a Wan strategy takes 0.1-0.4 s to trace and lower, a space has tens
to hundreds of them), and the same analyses are asked for again whenever a plan changes only in
what Stage 1 does not read: Top-K, the verifying recompiles, the ring-order switches, the expert
deployments, the compile workers. An analysis depends on the workload's description, the slice,
the toolchain that lowers it, aoizora's own source and the two Stage 1 settings (overlap rule,
memory slack); those make the key of one file, which holds the analyses of every strategy of that
space analysed so far, by strategy key.

What is cached: analyses that ended with a verdict from the models (ranked, or out of memory).
A strategy that failed to lower is analysed again (its failure may be the host's, not the
strategy's); predictions (the per-op DAG, kept only on request) are never cached.

No entry is trusted: a file holds its key and a SHA-256 checksum of its analyses and is used only
if it is strict JSON naming the key it was looked up by and matching its checksum; anything else
is deleted, logged in one line, and analysed again. Writes are atomic (temporary file, rename).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger("aoizora.cache")


def stage1_cache_key(workload: dict[str, Any], topology_name: str, toolchain: dict[str, str], source: str,
                     settings: dict[str, Any]) -> str:
    """The key of one space's analyses on one slice (see the module docstring for what it covers)."""
    blob = json.dumps({"workload": workload, "topology": topology_name, "toolchain": toolchain, "source": source,
                       "settings": settings}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def _checksum(analyses: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(analyses, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class Stage1Cache:
    """Analyses by strategy key, one JSON file per key of `stage1_cache_key`, under `root`."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.json"

    def load(self, key: str) -> dict[str, dict[str, Any]]:
        """The analyses stored under `key` (empty when none, or when the file is not trusted)."""
        path = self._path(key)
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return {}
        except OSError as exc:
            log.warning("aoizora: cannot read Stage 1 cache entry %s (%s); analysing again", path.name, exc.strerror)
            return {}
        try:
            entry = json.loads(raw.decode("utf-8"), parse_constant=_refuse_constant)
            if not isinstance(entry, dict) or not isinstance(entry.get("analyses"), dict):
                raise ValueError("not a Stage 1 cache entry of this format")
            if entry.get("key") != key:
                raise ValueError(f"entry names key {entry.get('key')!r}")
            if entry.get("sha256") != _checksum(entry["analyses"]):
                raise ValueError("analyses do not match their checksum")
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError too
            path.unlink(missing_ok=True)
            reason = " ".join(str(exc).split())[:200]
            log.warning("aoizora: discarded Stage 1 cache entry %s (%s: %s); analysing again", key,
                        type(exc).__name__, reason)
            return {}
        return entry["analyses"]

    def store(self, key: str, analyses: dict[str, dict[str, Any]]) -> None:
        """Add `analyses` to those stored under `key` (the new one wins for a strategy in both)."""
        if not analyses:
            return
        merged = {**self.load(key), **analyses}
        entry = {"key": key, "sha256": _checksum(merged), "analyses": merged}
        self.root.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".stage1-", suffix=".tmp", dir=self.root)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(entry, fh, allow_nan=False)
            os.replace(tmp, self._path(key))
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not strict JSON")


def default_stage1_cache() -> Stage1Cache:
    """The Stage 1 cache beside the compile cache (`$AOIZORA_CACHE_DIR/stage1` or the user cache)."""
    from aoizora.defaults import cache_root

    return Stage1Cache(cache_root() / "stage1")
