"""Compile a program in a child process only until libtpu has written its buffer assignment.

libtpu writes the assignment and the optimized module a few seconds into a compile whose back end
then runs for a minute or more; a test that reads only the assignment stops the compile there.
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from pathlib import Path

from aoizora.hlo.buffer_dump import BufferAssignment, dump_ready, read_buffer_assignment

# libtpu writes the dump's files one after the other, each in pieces: read once no file has grown
# for this long
_SETTLE_SECONDS = 1.0
_POLL_SECONDS = 0.2


def _compile(build: Callable[[], object], directory: str) -> None:
    build().compile(compiler_options={"xla_dump_to": directory, "xla_dump_hlo_as_text": True})


def _sizes(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in directory.iterdir() if p.is_file()}


def buffer_assignment_of(build: Callable[[], object], directory: Path, timeout_s: float = 900.0) -> BufferAssignment:
    """libtpu's buffer assignment for `build()` (a module-level function returning a lowered
    program), compiled in a child process that is stopped once the assignment is on disk."""
    child = multiprocessing.get_context("spawn").Process(target=_compile, args=(build, str(directory)), daemon=True)
    child.start()
    deadline = time.monotonic() + timeout_s
    try:
        while not dump_ready(directory):
            if not child.is_alive() and not dump_ready(directory):
                raise AssertionError(f"the compile ended (exit {child.exitcode}) without a buffer assignment")
            if time.monotonic() > deadline:
                raise AssertionError(f"no buffer assignment within {timeout_s:.0f} s")
            time.sleep(_POLL_SECONDS)
        sizes, settled = _sizes(directory), time.monotonic()
        while child.is_alive() and time.monotonic() - settled < _SETTLE_SECONDS:
            time.sleep(_POLL_SECONDS)
            if (now := _sizes(directory)) != sizes:
                sizes, settled = now, time.monotonic()
    finally:
        if child.is_alive():
            child.kill()
        child.join()
    return read_buffer_assignment(directory, with_buffers=True)
