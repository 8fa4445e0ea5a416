"""Compile cache: libtpu's output for a lowered program, kept on disk.

A 14B Wan step takes libtpu 40-130 s to compile on a small host, and the same program is compiled
again by every tool that looks at it (the planner with another Top-K, the benchmark's baselines and
its oracle). The key is everything the compiled program depends on: the lowered module's text, the
device order of the mesh (the compiler's algorithm choice can depend on it), the slice, the
toolchain versions and the compiler flags in the environment. The value is the compiled HLO text,
the memory the compiler reported, how long the compile took, or the compiler's refusal (out of
HBM), which is just as deterministic. Entries that do not read back cleanly are deleted, never
trusted.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CompileRecord:
    """What one compile produced (or the compiler's refusal, in `error`)."""

    hlo_text: str | None
    device_ids: tuple[int, ...] | None
    memory_bytes: int | None
    compile_seconds: float
    error: str | None = None
    label: str = ""  # what was compiled (strategy / placement / slice), for people reading the cache


def _env_flags() -> dict[str, str]:
    return {k: os.environ.get(k, "") for k in ("LIBTPU_INIT_ARGS", "XLA_FLAGS")}


class CompileCache:
    """Compiled programs under `root` (one gzipped JSON file per key)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root)
        self.hits = 0
        self.misses = 0

    def key(self, lowered_text: str, topology_name: str, device_ids: list[int], toolchain: dict[str, str]) -> str:
        digest = hashlib.sha256()
        header = {"topology": topology_name, "devices": list(device_ids), "toolchain": toolchain, "env": _env_flags()}
        digest.update(json.dumps(header, sort_keys=True).encode())
        digest.update(lowered_text.encode())
        return digest.hexdigest()[:40]

    def _path(self, key: str) -> Path:
        return self.root / f"{key}.json.gz"

    def get(self, key: str) -> CompileRecord | None:
        path = self._path(key)
        if not path.exists():
            self.misses += 1
            return None
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                d = json.load(f)
            record = CompileRecord(
                hlo_text=d["hlo_text"], device_ids=tuple(d["device_ids"]) if d["device_ids"] is not None else None,
                memory_bytes=d["memory_bytes"], compile_seconds=float(d["compile_seconds"]), error=d["error"],
                label=str(d.get("label", "")),
            )
            if (record.hlo_text is None) == (record.error is None):
                raise ValueError("an entry holds either a program or an error")
        except Exception:  # corrupt or from another format: discard and recompile
            path.unlink(missing_ok=True)
            self.misses += 1
            return None
        self.hits += 1
        return record

    def put(self, key: str, record: CompileRecord) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        doc: dict[str, Any] = {
            "hlo_text": record.hlo_text,
            "device_ids": list(record.device_ids) if record.device_ids is not None else None,
            "memory_bytes": record.memory_bytes,
            "compile_seconds": record.compile_seconds,
            "error": record.error,
            "label": record.label,
        }
        fd, tmp = tempfile.mkstemp(dir=self.root, suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as raw, gzip.open(raw, "wt", encoding="utf-8") as f:
                json.dump(doc, f)
            os.replace(tmp, self._path(key))  # atomic: readers never see half an entry
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def default_compile_cache() -> CompileCache:
    """The compile cache beside the plan cache (`$AOIZORA_CACHE_DIR/compiled` or the user cache)."""
    from aoizora.plan.cache import cache_root

    return CompileCache(cache_root() / "compiled")
