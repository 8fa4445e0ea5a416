"""Test-session setup shared by all tests.

Eight CPU host devices for sharded-execution tests. Must be set before jax is imported; other
tests use libtpu compile-only devices and are unaffected by the CPU device count.
"""

import os

_flag = "--xla_force_host_platform_device_count=8"
if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()

# Plans and compiled programs are cached on disk; tests must neither reuse nor fill the user's cache.
if "AOIZORA_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["AOIZORA_CACHE_DIR"] = _cache_dir = tempfile.mkdtemp(prefix="aoizora-test-cache-")
    atexit.register(shutil.rmtree, _cache_dir, ignore_errors=True)
