"""What the commands read and write: output paths checked before any long work (writable, not a
non-regular file, apart from each other and from the inputs), and HLO text read with a size cap."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from aoizora.errors import AoizoraError, OutputPathError


def _check_output_file(path: str | None, option: str) -> None:
    """Raise OutputPathError unless a file can be written at `path` (checked before any long work)."""
    if path is None:
        return
    if path.endswith(("/", os.sep)):
        raise OutputPathError(f"{option} {path} ends in '/', which names a folder; pass a file path such as "
                              f"{path}plan.json")
    target = Path(path)
    if target.is_dir():
        raise OutputPathError(f"{option} {path} is a directory; pass a file path such as {target / 'plan.json'}")
    if target.exists() and not target.is_file():
        raise OutputPathError(f"{option} {path} is not a regular file (a device, FIFO or socket), which aoizora "
                              "never replaces; pass a file path")
    if target.exists() and not os.access(target, os.W_OK):
        raise OutputPathError(f"{option} {path} cannot be written (permission denied); pass a writable path")
    _check_writable_dir(target.parent, option, path)


def _check_output_dir(path: str | None, option: str, files: list[Path] | tuple[Path, ...] = ()) -> None:
    """Raise OutputPathError unless `path` is (or can be made) a writable directory in which `files`
    (the command writes them) are regular files or do not exist yet."""
    if path is None:
        return
    if not path:
        raise OutputPathError(f"{option} is empty; pass a directory path (`.` for this one)")
    _check_no_dangling_link(path, option)
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise OutputPathError(f"{option} {path} exists and is not a directory; pass a directory path")
    for file in files:
        if file.exists() and not file.is_file():
            raise OutputPathError(f"{option} {path} holds {file.name}, which is not a regular file and which aoizora "
                                  "would replace; pass another directory")
    _check_writable_dir(target, option, path)


def _check_no_dangling_link(path: str, option: str) -> None:
    """Raise OutputPathError if `path`, or a folder on the way to it that does not exist, is a
    symbolic link that leads nowhere (its target missing, or a loop): the folder cannot be made."""
    current = Path(path)
    while not current.exists():
        if current.is_symlink():
            what = "" if current == Path(path) else f" ({current} on the way)"
            raise OutputPathError(f"{option} {path} is a symbolic link that leads nowhere{what} (its target is "
                                  "missing, or links form a loop); pass another directory or fix the link")
        if current.parent == current:
            return
        current = current.parent


def _real(path: str | Path) -> str:
    return os.path.realpath(os.path.abspath(path))


def _check_outputs_apart(outputs: list[tuple[str, str | None, list[Path]]],
                         inputs: tuple[tuple[str, str], ...] = ()) -> None:
    """Raise OutputPathError if one output would overwrite an input or another output.

    `outputs` are (option, path given, files written there): a file option writes the path itself, a
    folder option writes its files into the path. Paths are compared after resolving links.
    """
    given = [(option, path, {_real(f) for f in files}) for option, path, files in outputs if path is not None]
    for option, path, written in given:
        for label, source in inputs:
            if _real(source) in written:
                raise OutputPathError(f"{option} {path} would overwrite {label} {source}; pass another path")
    for i, (option, path, written) in enumerate(given):
        for other, other_path, other_written in given[i + 1:]:
            mine, theirs = _real(path), _real(other_path)
            if written & other_written or mine in other_written or theirs in written \
                    or any(theirs.startswith(f + os.sep) for f in written) \
                    or any(mine.startswith(f + os.sep) for f in other_written):
                raise OutputPathError(f"{option} {path} and {other} {other_path} would overwrite each other; "
                                      "pass separate paths")


def _check_writable_dir(directory: Path, option: str, given: str) -> None:
    """The nearest existing ancestor of `directory` must be a directory in which a file can be made.

    Probed by creating (and removing) a file there: permission bits alone do not tell for root, for
    read-only file systems or for network mounts. Nothing is left behind and no folder is created.
    """
    existing = directory if str(directory) else Path(".")
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise OutputPathError(f"{option} {given}: {existing} is not a directory; pass a path inside a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".aoizora-probe-", dir=existing)
    except OSError as exc:
        raise OutputPathError(
            f"{option} {given} cannot be written ({existing}: {exc.strerror}); pass a writable path"
        ) from None
    os.close(fd)
    os.unlink(probe)


#: Largest HLO text read. The compiled step of a 14B Wan model prints to a few MiB; the cap keeps
#: a wrong path (a device such as /dev/zero, a checkpoint) from being read whole into memory.
MAX_HLO_BYTES = 256 * 2**20


def _read_text(path: str) -> str:

    where = "standard input" if path == "-" else path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_HLO_BYTES + 1)
        else:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_HLO_BYTES + 1)
        if len(raw) > MAX_HLO_BYTES:
            raise AoizoraError(f"cannot read {where}: larger than {MAX_HLO_BYTES // 2**20} MiB, far more than "
                               "compiled HLO text; pass an HLO text file")
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, MemoryError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text" if isinstance(
            exc, UnicodeDecodeError) else "it does not fit in memory"
        raise AoizoraError(f"cannot read {where}: {reason}; pass an existing HLO text file") from None
