"""Access to the real TPU compiler on a CPU host: libtpu's compile-only devices.

`jax.experimental.topologies.get_topology_desc` returns devices of a described TPU slice that
can be lowered and compiled for, but not run on. Everything in aoizora that needs TPU devices
goes through `compile_only_devices`.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Any

from aoizora.errors import ToolchainError, TopologyError


# libtpu takes a machine-wide lock (/tmp/libtpu_lockfile) when it loads, so a second process that
# only compiles (a planner next to a test run, a CLI call from a test) would abort. Compile-only
# use shares no chip, so aoizora allows several loads unless the user decided otherwise. It must
# be set before libtpu loads, hence at import time of this module (imported by `aoizora`).
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


def require_libtpu() -> None:
    """Raise ToolchainError when libtpu is not installed."""
    if importlib.util.find_spec("libtpu") is None:
        raise ToolchainError(
            "libtpu is not installed, so TPU programs cannot be compiled on this host; "
            "install the pinned toolchain with `make test` or `pip install -e .` (libtpu==0.0.42.1)"
        )


@functools.lru_cache(maxsize=None)
def compile_only_devices(topology_name: str) -> tuple[Any, ...]:
    """The compile-only TPU devices of a slice, in libtpu's order (cached per name)."""
    require_libtpu()
    from jax.experimental import topologies

    try:
        desc = topologies.get_topology_desc(platform="tpu", topology_name=topology_name)
    except Exception as exc:  # libtpu reports unknown shapes as a generic runtime error
        raise TopologyError(
            f"libtpu does not accept the TPU slice {topology_name!r} ({_first_line(exc)}); "
            "use a supported slice such as v5e:2x4, v5e:4x4, v6e:4x4, v4:2x2x2 or v5p:2x2x4"
        ) from exc
    return tuple(desc.devices)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__
