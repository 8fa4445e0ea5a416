"""The executor a `--executor` value names: local compile processes or a Ray cluster.

Its own module so that neither executor imports the other: `compile_workers` knows nothing of Ray,
and `ray_executor` (which imports Ray) is imported only when Ray is asked for.
"""

from __future__ import annotations

import re

from aoizora.errors import ExecutorError
from aoizora.stage2.compile_workers import CompileExecutor, CompileWorkers

LOCAL = "local"
RAY = "ray"
_RAY_CLIENT = re.compile(r"^ray://(?P<host>[A-Za-z0-9.\-]+|\[[0-9A-Fa-f:.]+\]):(?P<port>[0-9]{1,5})$")


def executor_from_spec(spec: str, size: int, *, cpus_per_compile: float | None = None) -> CompileExecutor:
    """The executor a `--executor` value names, running up to `size` compiles at once.

    `local`: child processes of this one (`CompileWorkers`). `ray`: a Ray cluster on this machine
    (the one `ray.init()` finds, else a new one). `ray://HOST:PORT`: a Ray cluster through its
    client server. Ray needs the extra (`pip install 'aoizora[ray]'`); its workers are checked to
    compile as this process does before any compile (see `aoizora.stage2.ray_executor`).
    `cpus_per_compile`: CPUs a Ray compile reserves (default `DEFAULT_RAY_CPUS_PER_COMPILE`).
    Raises ExecutorError for an unknown value, a missing Ray, or a cluster that cannot be used.
    """
    spec = spec.strip()
    if spec == LOCAL:
        return CompileWorkers(size)
    if spec != RAY and not spec.startswith("ray://"):
        raise ExecutorError(f"unknown executor {spec!r}; use 'local', 'ray' or 'ray://HOST:PORT'")
    address = None
    if spec != RAY:
        m = _RAY_CLIENT.match(spec)
        if m is None or not 0 < int(m.group("port")) < 65536:
            raise ExecutorError(f"malformed Ray address {spec!r}; write it as ray://HOST:PORT "
                                "(the cluster's client server, port 10001 by default)")
        address = spec
    try:
        from aoizora.stage2.ray_executor import RayCompileWorkers
    except ImportError as exc:
        if exc.name is None or not exc.name.startswith("ray"):
            raise
        raise ExecutorError(f"--executor {spec} needs Ray, which is not installed; install the extra: "
                            "pip install 'aoizora[ray]'") from None
    return RayCompileWorkers(address, size, cpus_per_compile=cpus_per_compile)
