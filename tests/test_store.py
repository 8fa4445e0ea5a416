"""Checksummed stores in any state: entries that are not regular files, folders that cannot be read
or written. Each recovers (a miss, one log line) and never raises."""

from __future__ import annotations

import logging
import os
import tempfile

import pytest

from aoizora.store import ChecksummedStore, unusable_dir, write_json_atomic


def _store(root) -> ChecksummedStore:
    return ChecksummedStore(root, field="doc", what="test-cache", again="computing again")


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_entries_round_trip_and_are_checked(tmp_path):
    store = _store(tmp_path)
    store.store("k", {"a": 1})
    assert store.load("k") == {"a": 1}
    assert store.load("missing") is None


def test_an_entry_that_is_an_empty_directory_is_removed_and_rewritten(tmp_path, caplog):
    store = _store(tmp_path)
    store.path("k").mkdir()
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        assert store.load("k") is None
    assert not store.path("k").exists()
    assert _warnings(caplog) == ["aoizora: discarded test-cache entry k (not a regular file); computing again"]
    store.store("k", {"a": 1})
    assert store.load("k") == {"a": 1}


def test_an_entry_that_is_a_full_directory_is_a_miss_and_is_not_written(tmp_path, caplog):
    store = _store(tmp_path)
    (store.path("k") / "inside").mkdir(parents=True)
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        for _ in range(3):
            assert store.load("k") is None
            assert store.store("k", {"a": 1}) is None
    lines = _warnings(caplog)
    assert len(lines) == 2  # once for the entry that cannot be used, once for the write, not per call
    assert "cannot use test-cache entry" in lines[0] and "cannot write test-cache entries" in lines[1]
    assert (store.path("k") / "inside").is_dir() and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_an_entry_that_is_a_fifo_is_not_read(tmp_path, caplog):
    """Reading a FIFO would block forever (and a device, such as a link to /dev/zero, never end)."""
    store = _store(tmp_path)
    os.mkfifo(store.path("k"))
    os.symlink("/dev/zero", store.path("z"))
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        assert store.load("k") is None and store.load("z") is None
    assert not store.path("k").exists() and not os.path.lexists(store.path("z"))
    assert os.path.exists("/dev/zero")


@pytest.mark.parametrize("where", ["file", "under-file"])
def test_a_store_whose_folder_is_a_file_recovers(tmp_path, caplog, where):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a folder")
    store = _store(blocker if where == "file" else blocker / "sub")
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        for _ in range(3):
            assert store.load("k") is None
            assert store.store("k", {"a": 1}) is None
    lines = _warnings(caplog)
    assert len(lines) == 2 and all("\n" not in line for line in lines)
    assert blocker.read_text() == "not a folder"


def test_a_read_only_folder_recovers(tmp_path, caplog, monkeypatch):
    """A read-only folder (simulated: the tests may run as root, whom permission bits do not stop)."""
    store = _store(tmp_path)
    store.store("k", {"a": 1})
    path = store.path("k")
    path.write_text("damaged")

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    monkeypatch.setattr(type(path), "unlink", refuse)
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        assert store.load("k") is None  # discarded, though it cannot be deleted
        assert store.store("k", {"a": 1}) is None
    lines = _warnings(caplog)
    assert len(lines) == 2 and "not deleted: Permission denied" in lines[0] and "Permission denied" in lines[1]


def test_unusable_dir_says_why(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert unusable_dir(tmp_path / "new" / "cache") is None and (tmp_path / "new" / "cache").is_dir()
    assert "Not a directory" in unusable_dir(blocker / "cache")
    assert unusable_dir(blocker)  # a file is not a folder
    assert not [p for p in tmp_path.rglob(".aoizora-probe-*")]

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    assert unusable_dir(tmp_path) == f"{tmp_path}: Permission denied"


def test_write_json_atomic_leaves_the_old_file_when_it_fails(tmp_path):
    path = tmp_path / "doc.json"
    write_json_atomic(path, {"a": 1})
    with pytest.raises(ValueError):
        write_json_atomic(path, {"a": float("nan")})  # strict JSON: refused before the rename
    assert path.read_text() == '{"a": 1}' and [p.name for p in tmp_path.iterdir()] == ["doc.json"]


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_files_take_the_umask(tmp_path, umask, mode):
    """As a file `open()` makes (mkstemp alone makes it owner-only): plans, bench cells, cache entries."""
    old = os.umask(umask)
    try:
        path = write_json_atomic(tmp_path / "doc.json", {"a": 1})
        entry = _store(tmp_path / "cache").store("k", {"a": 1})
    finally:
        os.umask(old)
    assert os.stat(path).st_mode & 0o777 == mode and os.stat(entry).st_mode & 0o777 == mode


def test_a_write_that_fails_at_the_rename_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    """What `Plan.save`, the bench's cells and every cache entry rely on: never part of a file."""
    from aoizora.plan.plan import Plan
    from tests.plan.plan_doc import plan_doc

    path = tmp_path / "plan.json"
    Plan(plan_doc()).save(path)
    before = path.read_bytes()

    def fail(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", fail)
    changed = {**plan_doc(), "notes": ["another plan"]}
    with pytest.raises(OSError):
        Plan(changed).save(path)
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == ["plan.json"]
