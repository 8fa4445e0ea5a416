"""Filter libtpu's host-detection noise out of the process's stderr.

With no TPU present, libtpu writes warnings straight to file descriptor 2 from C++ (not through
Python logging) when its compile-only client starts. They are harmless for compile-only use but
bury real messages, so the CLI routes fd 2 through a pipe and drops exactly those lines.
"""

from __future__ import annotations

import os
import re
import sys
import threading

_NOISE = re.compile(
    r"could not determine TPU (accelerator type|worker hostnames)"
    r"|Failed to find host bounds for accelerator type"
    r"|Logging before InitGoogle\(\) is written to STDERR"
    r"|unexpected worker hostname"
    r"|^=== Source Location Trace: ===\s*$"
    r"|^learning/[\w/]+\.cc:\d+\s*$"
    r"|libtpu_init_utils\.cc"
    # absl INFO lines of the PJRT plugin loader when jax starts its backends (not errors)
    r"|^I\d{4} [\d:.]+\s+\d+ (pjrt_api|pjrt_client|pjrt_c_api_client)\.cc:\d+\]"
)


def is_noise(line: str) -> bool:
    """True for a line of libtpu's no-TPU host-detection warnings."""
    return bool(_NOISE.search(line))


class StderrFilter:
    """Context manager: while active, lines written to fd 2 that are libtpu noise are dropped."""

    def __init__(self) -> None:
        self._saved_fd: int | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "StderrFilter":
        sys.stderr.flush()
        self._saved_fd = os.dup(2)
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._thread = threading.Thread(target=self._pump, args=(read_fd,), daemon=True)
        self._thread.start()
        return self

    def _pump(self, read_fd: int) -> None:
        assert self._saved_fd is not None
        with os.fdopen(read_fd, "rb") as pipe:
            for raw in pipe:
                if not is_noise(raw.decode("utf-8", "replace")):
                    os.write(self._saved_fd, raw)

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        assert self._saved_fd is not None
        os.dup2(self._saved_fd, 2)  # closes the pipe's last writer, so the pump drains and ends
        if self._thread is not None:
            self._thread.join(timeout=5)
        os.close(self._saved_fd)
