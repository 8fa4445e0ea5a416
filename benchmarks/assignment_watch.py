"""Compile a lowered program only until libtpu has written its buffer assignment.

libtpu writes the assignment (`xla_dump_to`) a few seconds into a compile whose back end then runs
for a minute or more. The benchmarks that need only the assignment (`memory_assignment.py`,
`memory_peak.py`) read it as soon as it is on disk and end the process there.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable

# libtpu writes the dump's files one after the other; the last needs a moment after the first
_SETTLE_SECONDS = 0.5
# a small program can finish compiling before the watcher sees its dump: give the watcher time
_AFTER_COMPILE_SECONDS = 60.0


def compile_until_assignment(lowered, read: Callable[[str], None]) -> str:
    """Compile `lowered`, call `read(dump_directory)` once the buffer assignment is there, and end
    the process (status 0) after it, the dump removed.

    Returns only when no assignment was written: the compiler's first error line, or a sentence
    saying that none came.
    """
    from aoizora.hlo.buffer_dump import dump_ready

    dump = tempfile.mkdtemp(prefix="aoizora-assignment-")

    def watch() -> None:
        while not dump_ready(dump):
            time.sleep(0.1)
        time.sleep(_SETTLE_SECONDS)
        try:
            read(dump)
        finally:
            shutil.rmtree(dump, ignore_errors=True)
            os._exit(0)  # the back end would run for another minute: the assignment is all this needs

    threading.Thread(target=watch, daemon=True).start()
    try:
        lowered.compile(compiler_options={"xla_dump_to": dump, "xla_dump_hlo_as_text": True})
    except Exception as e:  # noqa: BLE001 - the compiler's refusal is the caller's result
        time.sleep(1.0)  # an assignment written before the error is still read by the watcher
        if not dump_ready(dump):
            shutil.rmtree(dump, ignore_errors=True)
            return str(e).splitlines()[0][:300]
    time.sleep(_AFTER_COMPILE_SECONDS)
    shutil.rmtree(dump, ignore_errors=True)
    return "libtpu wrote no buffer assignment"
