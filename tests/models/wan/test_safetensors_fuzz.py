"""Fuzzing the safetensors reader: any file either reads (and every tensor it lists reads or is
refused) or raises CheckpointError — never another exception, never a hang, never a huge allocation."""

from __future__ import annotations

import json
import struct
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from aoizora.errors import CheckpointError
from aoizora.models.wan.transformer.checkpoint import SafetensorsFile
from tests.fuzzing import FUZZ, mutated

# one directory for every example (hypothesis runs hundreds), removed when the session ends
_TMP = tempfile.TemporaryDirectory(prefix="aoizora-fuzz-safetensors-")
_DIR = Path(_TMP.name)


def _valid() -> bytes:
    header = {"__metadata__": {"format": "pt"},
              "a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
              "b": {"dtype": "BF16", "shape": [4], "data_offsets": [24, 32]}}
    blob = json.dumps(header).encode()
    return struct.pack("<Q", len(blob)) + blob + np.arange(8, dtype=np.float32).tobytes()


VALID = _valid()


def _read(raw: bytes) -> None:
    path = _DIR / "model.safetensors"
    path.write_bytes(raw)
    try:
        f = SafetensorsFile(path)
    except CheckpointError:
        return
    for name in f.header:
        try:
            arr = f.get(name)
        except CheckpointError:
            continue
        assert arr.shape == f.shape(name)
    f._mm = None  # release the memory map before the file is rewritten


def test_the_valid_file_reads():
    f = SafetensorsFile(_write(VALID))
    assert f.get("a").tolist() == [[0, 1, 2], [3, 4, 5]] and f.shape("b") == (4,)


def _write(raw: bytes) -> Path:
    path = _DIR / "valid.safetensors"
    path.write_bytes(raw)
    return path


@FUZZ
@given(st.binary(max_size=200))
def test_random_bytes(raw):
    _read(raw)


@FUZZ
@given(mutated(VALID))
def test_mutated_file(raw):
    _read(raw)


@FUZZ
@given(st.integers(0, 2**64 - 1), st.binary(max_size=64))
def test_any_header_length(n, rest):
    _read(struct.pack("<Q", n) + rest)
