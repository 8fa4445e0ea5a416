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
import os
from typing import Any

from aoizora.store import ChecksummedStore


def stage1_cache_key(workload: dict[str, Any], topology_name: str, toolchain: dict[str, str], source: str,
                     settings: dict[str, Any]) -> str:
    """The key of one space's analyses on one slice (see the module docstring for what it covers)."""
    blob = json.dumps({"workload": workload, "topology": topology_name, "toolchain": toolchain, "source": source,
                       "settings": settings}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


class Stage1Cache:
    """Analyses by strategy key, one JSON file per key of `stage1_cache_key`, under `root`."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._entries = ChecksummedStore(root, field="analyses", what="Stage 1 cache", again="analysing again")
        self.root = self._entries.root

    def load(self, key: str) -> dict[str, dict[str, Any]]:
        """The analyses stored under `key` (empty when none, or when the file is not trusted)."""
        return self._entries.load(key) or {}

    def store(self, key: str, analyses: dict[str, dict[str, Any]]) -> None:
        """Add `analyses` to those stored under `key` (the new one wins for a strategy in both)."""
        if analyses:
            self._entries.store(key, {**self.load(key), **analyses})


def default_stage1_cache() -> Stage1Cache:
    """The Stage 1 cache beside the compile cache (`$AOIZORA_CACHE_DIR/stage1` or the user cache)."""
    from aoizora.defaults import cache_root

    return Stage1Cache(cache_root() / "stage1")
