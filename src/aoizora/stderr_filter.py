"""Filter libtpu's host-detection noise out of the process's stderr.

With no TPU present, libtpu writes warnings straight to file descriptor 2 from C++ (not through
Python logging) when its compile-only client starts. They are harmless for compile-only use but
bury real messages, so the CLI routes fd 2 through a pipe and drops exactly those lines.
"""

from __future__ import annotations

import os
import re
import select
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
    """Context manager: while active, lines written to fd 2 that are libtpu noise are dropped.

    Processes started inside the block (Stage 1's lowering workers, multiprocessing's resource
    tracker) inherit the pipe and may hold it open after the block, so the block's end does not
    wait for the pipe to close: it drains what the pipe holds and stops the pump."""

    def __init__(self) -> None:
        self._saved_fd: int | None = None
        self._stop_r: int | None = None
        self._stop_w: int | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> StderrFilter:
        sys.stderr.flush()
        self._saved_fd = os.dup(2)
        read_fd, write_fd = os.pipe()
        self._stop_r, self._stop_w = os.pipe()
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._thread = threading.Thread(target=self._pump, args=(read_fd,), daemon=True)
        self._thread.start()
        return self

    def _pump(self, read_fd: int) -> None:
        """Copy the pipe's lines that are not noise to the saved stderr until the pipe closes or the
        block ends; then what the pipe still holds, without waiting for more."""
        assert self._stop_r is not None
        stop_r, pending = self._stop_r, b""
        try:
            while True:
                ready, _, _ = select.select([read_fd, stop_r], [], [])
                if stop_r in ready:
                    os.set_blocking(read_fd, False)
                    while chunk := _read_available(read_fd):
                        pending = self._write_lines(pending + chunk)
                    break
                chunk = os.read(read_fd, _CHUNK)
                if not chunk:
                    break
                pending = self._write_lines(pending + chunk)
            if pending:
                self._write_lines(pending + b"\n")
        finally:
            os.close(read_fd)

    def _write_lines(self, data: bytes) -> bytes:
        """Write the complete lines of `data` that are not noise; return the incomplete rest."""
        assert self._saved_fd is not None
        *lines, rest = data.split(b"\n")
        kept = b"".join(line + b"\n" for line in lines if not is_noise(line.decode("utf-8", "replace")))
        if kept:
            os.write(self._saved_fd, kept)
        return rest

    def __exit__(self, *exc: object) -> None:
        sys.stderr.flush()
        assert self._saved_fd is not None and self._stop_r is not None and self._stop_w is not None
        assert self._thread is not None
        os.dup2(self._saved_fd, 2)  # this process writes no more to the pipe
        os.write(self._stop_w, b"x")  # the pump may have ended already: the pipe closed with the dup2
        self._thread.join(timeout=5)
        os.close(self._stop_w)
        if not self._thread.is_alive():  # a pump still running selects on it
            os.close(self._stop_r)
        os.close(self._saved_fd)


_CHUNK = 65536


def _read_available(fd: int) -> bytes:
    """What the non-blocking `fd` holds now (b"" when nothing, or closed)."""
    try:
        return os.read(fd, _CHUNK)
    except BlockingIOError:
        return b""
