"""Checksummed, atomic JSON files: the one way aoizora writes a document and keeps its caches.

`write_json_atomic` writes a document through a temporary file in the target's folder and a
rename, so a reader sees the old file or the new one, never half of one (what `Plan.save`, the
bench's cells and every cache entry use); the file gets the mode `open()` would give a new file
under the process umask.

`ChecksummedStore` keeps one JSON entry per key under a folder: the entry names its key and holds
a SHA-256 checksum of its payload. No entry is trusted: one is used only if it reads back as
UTF-8 strict JSON, names the key it was looked up by, matches its checksum and passes the owner's
own check; anything else is deleted, logged in one line, and counts as a miss. A store in any
state recovers: an entry that is not a regular file (a directory, a FIFO, a device) is removed
when it can be and never read; an entry or a folder that cannot be read or written is logged in
one line and the work goes on without it (a cache saves time, it is never needed for an answer).
`unusable_dir` says before any long work whether a folder can hold a store at all.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import stat
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, TypeVar

log = logging.getLogger("aoizora.cache")

T = TypeVar("T")


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def strict_json_loads(text: str) -> Any:
    """`json.loads` that refuses NaN and Infinity (which Python's json accepts but JSON does not)."""
    return json.loads(text, parse_constant=_refuse_constant)


def checksum(doc: Any) -> str:
    """SHA-256 of a JSON document in canonical form (sorted keys, no spaces)."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def one_line(text: str, limit: int = 200) -> str:
    """`text` on one line, at most `limit` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def write_atomic(path: str | os.PathLike[str], write: Callable[[IO[bytes]], object], *, prefix: str = ".aoizora-",
                 suffix: str = ".tmp") -> Path:
    """Write `path` with `write(binary file)` through a temporary file in its folder and a rename;
    the file takes the process umask as one made by `open()` does."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            os.fchmod(fh.fileno(), 0o666 & ~process_umask())  # mkstemp makes it owner-only
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def process_umask() -> int:
    """The process umask (read by setting it, so set back at once)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_atomic(path: str | os.PathLike[str], doc: Any, *, indent: int | None = None, newline: bool = False,
                      strict: bool = True, compress: bool = False, prefix: str = ".aoizora-") -> Path:
    """Write `doc` as UTF-8 JSON to `path`, atomically (see `write_atomic`); `strict` refuses NaN and
    Infinity, `compress` gzips the file."""
    text = json.dumps(doc, indent=indent, allow_nan=not strict) + ("\n" if newline else "")
    data = gzip.compress(text.encode("utf-8"), mtime=0) if compress else text.encode("utf-8")
    return write_atomic(path, lambda fh: fh.write(data), prefix=prefix)


def unusable_dir(path: str | os.PathLike[str]) -> str | None:
    """Why files cannot be written in folder `path` (made if missing), or None when they can.

    Probed by creating (and removing) a file there: permission bits alone do not tell for root, for
    read-only file systems or for network mounts."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".aoizora-probe-", dir=path)
    except OSError as exc:
        return f"{path}: {exc.strerror or type(exc).__name__}"
    os.close(fd)
    os.unlink(probe)
    return None


class ChecksummedStore:
    """Entries `{"key": K, "sha256": checksum(payload), field: payload}` in `root/<K><suffix>`.

    `what` names the store in log lines ("plan-cache"), `again` says what a miss leads to
    ("planning again"); `compress` gzips the entries.
    """

    def __init__(self, root: str | os.PathLike[str], *, field: str, suffix: str = ".json", compress: bool = False,
                 what: str = "cache", again: str = "computing again") -> None:
        self.root = Path(root)
        self.field = field
        self.suffix = suffix
        self.compress = compress
        self.what = what
        self.again = again
        self._warned: set[str] = set()  # what was said already ("read", "write"): one line each per store

    def path(self, key: str) -> Path:
        return self.root / f"{key}{self.suffix}"

    def load(self, key: str, parse: Callable[[Any], T] = lambda payload: payload) -> T | None:
        """`parse(payload)` of the entry of `key`, or None when there is none or it is not trusted
        (then it is deleted and logged). `parse` refuses a payload by raising."""
        path = self.path(key)
        try:
            if not stat.S_ISREG(path.stat().st_mode):  # never read: a FIFO blocks, a device never ends
                self._remove_irregular(key, path)
                return None
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            self._warn_once("read", "aoizora: cannot read %s entry %s (%s); %s", self.what, path,
                            exc.strerror or type(exc).__name__, self.again)
            return None
        try:
            return parse(self._payload(raw, key))
        except Exception as exc:  # corrupt, tampered with or from another format: discard and recompute
            self.discard(key, f"{type(exc).__name__}: {exc}")
            return None

    def _remove_irregular(self, key: str, path: Path) -> None:
        """Remove an entry that is not a regular file (a directory only when empty), in one log line."""
        try:
            if path.is_dir() and not path.is_symlink():
                path.rmdir()
            else:
                path.unlink()
        except OSError as exc:
            self._warn_once("read", "aoizora: cannot use %s entry %s (not a regular file, and %s); %s", self.what,
                            path, exc.strerror or type(exc).__name__, self.again)
            return
        log.warning("aoizora: discarded %s entry %s (not a regular file); %s", self.what, key, self.again)

    def _payload(self, raw: bytes, key: str) -> Any:
        """The payload of an entry's bytes; ValueError unless the entry is whole and belongs to `key`."""
        text = (gzip.decompress(raw) if self.compress else raw).decode("utf-8")
        entry = strict_json_loads(text)
        if not isinstance(entry, dict) or not isinstance(entry.get(self.field), dict):
            raise ValueError(f"not a {self.what} entry of this format")
        if entry.get("key") != key:
            raise ValueError(f"entry names key {entry.get('key')!r}")
        if entry.get("sha256") != checksum(entry[self.field]):
            raise ValueError(f"{self.field} does not match the checksum")
        return entry[self.field]

    def discard(self, key: str, reason: str) -> None:
        """Delete the entry of `key` (one that must not be used) and say so in one line."""
        try:
            self.path(key).unlink(missing_ok=True)
        except OSError as exc:  # e.g. a read-only folder: the entry stays, and is checked again when read
            reason = f"{reason}; not deleted: {exc.strerror}"
        log.warning("aoizora: discarded %s entry %s (%s); %s", self.what, key, one_line(reason), self.again)

    def store(self, key: str, payload: dict[str, Any]) -> Path | None:
        """Write `payload` as the entry of `key`, atomically; None when it cannot be written (said in
        one log line, the first time for this store)."""
        entry = {"key": key, "sha256": checksum(payload), self.field: payload}
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            return write_json_atomic(self.path(key), entry, compress=self.compress, prefix=f".{self.field}-")
        except OSError as exc:
            self._warn_once("write", "aoizora: cannot write %s entries in %s (%s); going on without caching them",
                            self.what, self.root, exc.strerror or type(exc).__name__)
            return None

    def _warn_once(self, kind: str, message: str, *args: Any) -> None:
        """Log `message` the first time this store fails at `kind` (a folder that cannot be read fails
        for every entry: one line says it)."""
        if kind not in self._warned:
            self._warned.add(kind)
            log.warning(message, *args)
