"""A throughput plan's replicas as processes of one TPU VM: one launch line per replica, each on its chips.

A replica's plan is an ordinary plan of its sub-slice, so every replica runs the same export (the
launcher, its spec and `plan_devices.py`); what differs is which chips its process sees. libtpu
lets several processes share one TPU VM, each on a subset of its chips, through environment
variables, as the JAX team's note on running multiple processes on one TPU VM shows
(https://gist.github.com/skye/f82ba45d2445bb19d53545538754f9a3):

* `TPU_CHIPS_PER_PROCESS_BOUNDS`: the process's chip grid (x,y,z), here the replica's block;
* `TPU_PROCESS_BOUNDS=1,1,1`: one process per such grid (each replica is a slice of its own);
* `TPU_VISIBLE_CHIPS` (older libtpu: `TPU_VISIBLE_DEVICES`): the host's chips the process uses;
* `TPU_MESH_CONTROLLER_ADDRESS` / `TPU_MESH_CONTROLLER_PORT`: a port of its own per process.

The process then sees its block as a slice of that shape, so `jax.devices()` is the replica's
sub-slice and the launcher's check against the spec (kind, count, ICI coordinates) holds as for
any plan. Chips are named by their raster index on the host, x fastest (libtpu's numbering of a
slice's chips); the launcher runs with `skip_jax_distributed_system=true`, as each replica is a
single process. Only a full slice on one host can be split this way (its chips are one VM's).
"""

from __future__ import annotations

import math
import re
import shlex
from typing import Any

from aoizora.errors import ExportError

#: Chips of one TPU VM (host) per generation: single-host slices are up to v5litepod-8 and v6e-8
#: (https://cloud.google.com/tpu/docs/v5e, https://cloud.google.com/tpu/docs/v6e), 4 chips per host on
#: v4, v5p and TPU7x (https://cloud.google.com/tpu/docs/v4, /v5p, /tpu7x).
HOST_CHIPS = {"v4": 4, "v5e": 8, "v5p": 4, "v6e": 8, "tpu7x": 4}

#: The first replica's mesh-controller port (the JAX note's, libtpu's default); the others count up.
FIRST_PORT = 8476

_ENV_VALUE = re.compile(r"[0-9,]+|localhost:[0-9]+")


def replica_environments(plan: Any) -> list[list[tuple[str, str]]]:
    """Per replica of a throughput plan, the environment that gives its process its chips alone;
    ExportError for a full slice spanning hosts."""
    block = plan.replicas
    topo = plan.data["topology"]
    generation, shape = topo["generation"], [int(n) for n in topo["shape"]]
    full_chips = block["count"] * math.prod(shape)
    host = HOST_CHIPS.get(generation)
    if host is None or full_chips > host:
        raise ExportError(f"replicas.slice {block['slice']} has {full_chips} chips, more than one {generation} host "
                          f"holds ({host or 'unknown'}); the export runs replicas as processes of one host")
    bounds = ",".join(map(str, [*shape, *[1] * (3 - len(shape))]))
    out = []
    for i, replica in enumerate(block["devices"]):
        chips = ",".join(str(int(c)) for c in replica["chip_ids"])
        port = FIRST_PORT + i
        env = [("TPU_CHIPS_PER_PROCESS_BOUNDS", bounds), ("TPU_PROCESS_BOUNDS", "1,1,1"),
               ("TPU_VISIBLE_CHIPS", chips), ("TPU_VISIBLE_DEVICES", chips),
               ("TPU_MESH_CONTROLLER_ADDRESS", f"localhost:{port}"), ("TPU_MESH_CONTROLLER_PORT", str(port))]
        for name, value in env:  # built from integers; checked so that a plan never becomes code
            if not _ENV_VALUE.fullmatch(value):
                raise ExportError(f"replicas.devices[{i}]: {name}={value[:80]!r} is not a list of chip numbers")
        out.append(env)
    return out


def replica_lines(plan: Any, launcher_line: str) -> list[str]:
    """command.sh's lines for a throughput plan: each replica's launch in the background, then `wait`.
    `launcher_line` is the one-process launch (`MaxDiffusionRun.launcher_line`), already quoted."""
    block = plan.replicas
    lines = [f"# {block['count']} replicas on {block['slice']}, {block['videos_per_replica']} video(s) each per run "
             f"(predicted {float(block['videos_per_hour']):.2f} videos/h). Each takes the same extra overrides; give "
             "each its own prompt or output folder by editing its line."]
    for i, env in enumerate(replica_environments(plan)):
        chips = block["devices"][i]["chip_ids"]
        lines.append(f"# replica {i}: chips {','.join(map(str, chips))}")
        lines.append(" ".join(f"{k}={shlex.quote(v)}" for k, v in env) + " " + launcher_line
                     + ' skip_jax_distributed_system=true "$@" &')
    lines.append("wait")
    return lines
