"""Test-session setup shared by all tests.

Eight CPU host devices for sharded-execution tests (in every pytest-xdist worker). Must be set
before jax is imported; other tests use libtpu compile-only devices and are unaffected by the CPU
device count.
"""

import os
from pathlib import Path

from tests import compile_seed

_flag = "--xla_force_host_platform_device_count=8"
if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

# Plans and compiled programs are cached on disk; tests must neither reuse nor fill the user's cache.
# A test session gets a fresh one, unless the user named one. Its pytest-xdist workers (which inherit
# the controller's environment) share it: entries are written atomically, and several test files plan
# or compile the same small programs, which one worker then compiles for both.
_shared = os.environ.get("PYTEST_XDIST_WORKER") and os.environ.get("AOIZORA_TEST_SESSION_CACHE_DIR")
if os.environ.get("AOIZORA_CACHE_DIR") in (None, os.environ.get("AOIZORA_TEST_SESSION_CACHE_DIR")) and not _shared:
    import atexit
    import shutil
    import tempfile

    _cache_dir = tempfile.mkdtemp(prefix="aoizora-test-cache-")
    os.environ["AOIZORA_CACHE_DIR"] = os.environ["AOIZORA_TEST_SESSION_CACHE_DIR"] = _cache_dir
    atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)
    if not compile_seed.recording():
        compile_seed.plant(Path(_cache_dir))

# Markers of the tests that compile with libtpu, run diffusers, start Ray or a CLI subprocess: the
# suite's long tests (pyproject.toml lists them).
_LONG_MARKERS = ("slow", "tpu_compile", "parity", "ray")


def pytest_collection_modifyitems(session, config, items):
    """Files with more long tests first, the rest in their collected order (each file's tests keep
    theirs). pytest-xdist's `--dist loadfile` hands out whole files in this order (the Makefile turns
    off its reordering by test count), so the long files start while both workers are fresh and the
    many quick files even out the end, instead of a long file starting last."""
    long_tests: dict[str, int] = {}
    for item in items:
        long_tests.setdefault(item.nodeid.split("::", 1)[0], 0)
        if any(item.get_closest_marker(m) is not None for m in _LONG_MARKERS):
            long_tests[item.nodeid.split("::", 1)[0]] += 1
    first_seen = {path: i for i, path in enumerate(long_tests)}
    items.sort(key=lambda item: (-long_tests[item.nodeid.split("::", 1)[0]],
                                 first_seen[item.nodeid.split("::", 1)[0]]))


def pytest_sessionfinish(session, exitstatus):
    """Under `make test-seed`, the controller keeps the session's compiled programs as the new seed;
    under `AOIZORA_TEST_RECORD_SEED=add`, it adds those the seed lacks."""
    cache_dir = os.environ.get("AOIZORA_TEST_SESSION_CACHE_DIR")
    if cache_dir and not os.environ.get("PYTEST_XDIST_WORKER") and compile_seed.recording():
        kept = compile_seed.keep(Path(cache_dir))
        print(f"\ncompile seed: kept {kept} compiled programs in tests/data/compile_seed")
    elif cache_dir and not os.environ.get("PYTEST_XDIST_WORKER") and compile_seed.adding():
        added = compile_seed.add(Path(cache_dir))
        print(f"\ncompile seed: added {added} compiled programs to tests/data/compile_seed")


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line when the session compiled programs the seed lacks (the suite was slower for it)."""
    cache_dir = os.environ.get("AOIZORA_TEST_SESSION_CACHE_DIR")
    if cache_dir and not os.environ.get("PYTEST_XDIST_WORKER") and not compile_seed.recording():
        missing = compile_seed.missing(Path(cache_dir))
        if missing:
            terminalreporter.write_line(f"compile seed: {missing} programs compiled that tests/data/compile_seed "
                                        "lacks; `make test-seed` records them (or, for a few test files, "
                                        "`AOIZORA_TEST_RECORD_SEED=add pytest FILES`)")
