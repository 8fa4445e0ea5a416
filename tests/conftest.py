"""Test-session setup shared by all tests.

Eight CPU host devices for sharded-execution tests. Must be set before jax is imported; other
tests use libtpu compile-only devices and are unaffected by the CPU device count.
"""

import os

_flag = "--xla_force_host_platform_device_count=8"
if _flag not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
