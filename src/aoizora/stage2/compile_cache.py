"""Compile cache: libtpu's output for a lowered program, kept on disk.

A 14B Wan step takes libtpu 40-130 s to compile on a small host, and the same program is compiled
again by every tool that looks at it (the planner with another Top-K, the benchmark's baselines and
its oracle). The key is everything the compiled program depends on: the lowered module's text, the
device order of the mesh (the compiler's algorithm choice can depend on it), the slice, the
toolchain versions, the compiler flags passed to the compile and those in the environment — but not where the code is
installed: a Pallas kernel's serialized Mosaic body carries debug locations naming its source files
(`.../site-packages/jax/...`), which differ between two clones' virtualenvs and would otherwise
make every such program a miss; the key reads each body without them. The value is the compiled HLO text,
the memory the compiler reported, how long the compile took, or the compiler's refusal (out of
HBM), which is just as deterministic.

No entry is trusted: each stores its key and a SHA-256 checksum of its payload, and is used only if
it reads back, names the key it was looked up by, matches its checksum and (checked by the caller,
which parses it anyway) holds HLO that parses. Anything else is deleted, logged in one line, and
recompiled.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import json
import os
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aoizora.store import ChecksummedStore
from aoizora.toolchain import CompilerFlags, compiler_environment


@dataclass(frozen=True)
class CompileRecord:
    """What one compile produced (or the compiler's refusal, in `error`)."""

    hlo_text: str | None
    device_ids: tuple[int, ...] | None
    memory_bytes: int | None
    compile_seconds: float
    error: str | None = None
    label: str = ""  # what was compiled (strategy / placement / slice), for people reading the cache
    #: the compiler's memory analysis by part, bytes per device (`compile_workers.memory_parts`:
    #: argument, output, temp, alias, generated_code); None in entries written before it was kept
    memory_parts: dict[str, int] | None = None


# the Mosaic body of a `tpu_custom_call`: base64 MLIR bytecode in its backend config (quotes print as \22)
_KERNEL_BODY = re.compile(r"(\\22body\\22: \\22)([A-Za-z0-9+/=]+)(\\22)")


@functools.lru_cache(maxsize=64)  # a program's kernels recur across its placements' keys
def _kernel_digest(body_b64: str) -> str:
    """The hash of a Mosaic kernel body printed without its debug locations (which name source files)."""
    from jax._src.interpreters import mlir as jax_mlir  # Mosaic's dialects, as jax registers them
    from jax._src.lib import tpu
    from jaxlib.mlir import ir

    ctx = jax_mlir.make_ir_context()
    tpu.register_dialect(ctx)
    with ctx, ir.Location.unknown():
        ctx.allow_unregistered_dialects = True
        module = ir.Module.parse(base64.b64decode(body_b64, validate=True))
        return hashlib.sha256(str(module.operation.get_asm(enable_debug_info=False)).encode()).hexdigest()


def _without_source_paths(lowered_text: str) -> str:
    """The lowered text with each kernel body replaced by the hash of its location-free text."""

    def normalize(m: re.Match[str]) -> str:
        try:
            return m.group(1) + _kernel_digest(m.group(2)) + m.group(3)
        except Exception:  # not a kernel this jax can read: keep the body as it is
            return m.group(0)

    return _KERNEL_BODY.sub(normalize, lowered_text)


class CompileCache:
    """Compiled programs under `root` (one gzipped JSON file per key)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self._entries = ChecksummedStore(root, field="record", suffix=".json.gz", compress=True,
                                         what="compile-cache", again="recompiling")
        self.root = self._entries.root
        self.hits = 0
        self.misses = 0

    def key(self, lowered_text: str, topology_name: str, device_ids: list[int], toolchain: dict[str, str],
            flags: CompilerFlags | None = None) -> str:
        digest = hashlib.sha256()
        header: dict[str, Any] = {"topology": topology_name, "devices": list(device_ids), "toolchain": toolchain,
                                  "env": compiler_environment()}
        if flags:  # absent when there are none, so keys of programs compiled without flags stay as they were
            header["compiler_options"] = flags.compiler_options()
        digest.update(json.dumps(header, sort_keys=True).encode())
        digest.update(_without_source_paths(lowered_text).encode())
        return digest.hexdigest()[:40]

    def get(self, key: str) -> CompileRecord | None:
        """The record stored under `key`, or None (a bad entry is discarded and counts as a miss)."""
        record = self._entries.load(key, _record_from_payload)
        if record is None:
            self.misses += 1
        else:
            self.hits += 1
        return record

    def discard(self, key: str, reason: str) -> None:
        """Delete the entry of `key` (one that must not be used) and say so in one line."""
        self._entries.discard(key, reason)

    def put(self, key: str, record: CompileRecord) -> None:
        doc: dict[str, Any] = {
            "hlo_text": record.hlo_text,
            "device_ids": list(record.device_ids) if record.device_ids is not None else None,
            "memory_bytes": record.memory_bytes,
            "compile_seconds": record.compile_seconds,
            "error": record.error,
            "label": record.label,
        }
        if record.memory_parts is not None:  # absent otherwise, so entries without it read as they were written
            doc["memory_parts"] = dict(record.memory_parts)
        self._entries.store(key, doc)  # atomic: readers never see half an entry

    @contextlib.contextmanager
    def claim(self, key: str, abandon: Callable[[], bool], poll_s: float = 0.25) -> Iterator[bool]:
        """Hold `key`'s compile claim for the block: an advisory lock (`flock`) on `root/<key>.claim`,
        so that two planners (processes or threads) sharing this cache compile one program once: the
        second waits for the first, then reads its entry. Yields whether it waited for another
        holder (the caller then looks the entry up again). The wait ends when `abandon()` turns true
        (the caller's executor closed: a time budget, Ctrl-C), raising CompileAbandoned; a holder
        that dies releases its claim with its process.

        The claim file is removed on release, so the folder holds entries alone. A planner that
        opened it just before then locks a removed file while a third may create and lock a new
        one: both compile, as without claims, and the cache keeps one entry (entries are written
        atomically). Claims save compiles; they are never needed for a correct cache. Where no
        claim can be taken (no `fcntl`, a cache folder that cannot be written), the block runs
        unclaimed."""
        path = self.root / f"{key}.claim"
        fd = _open_claim(path)
        if fd is None:
            yield False
            return
        try:
            waited = _lock(fd, abandon, poll_s)
            yield waited
        finally:
            with contextlib.suppress(OSError):
                path.unlink()
            os.close(fd)  # releases the lock


class CompileAbandoned(RuntimeError):
    """A compile given up while it waited for another holder of its claim (its executor closed)."""


def _open_claim(path: Path) -> int | None:
    """A descriptor of the claim file at `path` (created), or None where claims cannot be taken."""
    try:
        import fcntl  # noqa: F401  (POSIX only: elsewhere compiles run unclaimed)
    except ImportError:
        return None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)
    except OSError:
        return None


def _lock(fd: int, abandon: Callable[[], bool], poll_s: float) -> bool:
    """Take the exclusive lock of `fd`, polling so that `abandon()` can end the wait; whether it waited."""
    import fcntl

    waited = False
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return waited
        except BlockingIOError:
            waited = True
        except OSError:  # a file system without locks: no claim, as without fcntl
            return False
        if abandon():
            raise CompileAbandoned("gave up waiting for another compile of the same program: the compiles were "
                                   "stopped")
        time.sleep(poll_s)


def _record_from_payload(d: dict[str, Any]) -> CompileRecord:
    """The record of a cache entry's payload; an error unless it holds a program or an error."""
    record = CompileRecord(
        hlo_text=d["hlo_text"],
        device_ids=tuple(int(i) for i in d["device_ids"]) if d["device_ids"] is not None else None,
        memory_bytes=d["memory_bytes"], compile_seconds=float(d["compile_seconds"]), error=d["error"],
        label=str(d.get("label", "")),
        memory_parts={str(k): int(v) for k, v in d["memory_parts"].items()} if d.get("memory_parts") else None,
    )
    if (record.hlo_text is None) == (record.error is None):
        raise ValueError("an entry holds either a program or an error")
    if record.hlo_text is not None and not isinstance(record.hlo_text, str):
        raise ValueError("hlo_text is not text")
    return record


def default_compile_cache() -> CompileCache:
    """The compile cache beside the plan cache (`$AOIZORA_CACHE_DIR/compiled` or the user cache)."""
    from aoizora.defaults import cache_root

    return CompileCache(cache_root() / "compiled")
