"""One host of an emulated multi-host TPU slice, run by test_multihost_launcher.py:

    python multihost_host.py EXPORT_DIR DEVICES_JSON PROCESS_ID NUM_PROCESSES PORT

JAX runs on CPU devices (`--xla_force_host_platform_device_count` per process). Two stand-ins
replace what a TPU host has and a CPU one lacks: `jax.distributed.initialize()` gets the
coordinator on 127.0.0.1 and this process's id (on a TPU slice JAX reads them from the slice's
metadata), and `jax.devices()` describes each CPU device as the TPU device of the slice it stands
for (kind, ICI coordinates, core on chip; DEVICES_JSON: per process, its devices in order). The
exported launcher itself runs unchanged, with `--check`.
"""

from __future__ import annotations

import functools
import json
import sys
from types import SimpleNamespace

export_dir, table_path, process_id, processes, port = sys.argv[1:6]
sys.path.insert(0, export_dir)

import jax  # noqa: E402
from jax._src import distributed  # noqa: E402

jax.distributed.initialize = functools.partial(
    jax.distributed.initialize, coordinator_address=f"127.0.0.1:{port}", num_processes=int(processes),
    process_id=int(process_id), coordinator_bind_address=f"127.0.0.1:{port}", initialization_timeout=60)
table = json.loads(open(table_path).read())
real_devices = jax.devices
first_query: list[bool] = []


def tpu_devices(*args, **kwargs):
    first_query.append(distributed.global_state.client is not None)
    out = []
    position: dict[int, int] = {}
    for d in real_devices(*args, **kwargs):
        i = position[d.process_index] = position.get(d.process_index, -1) + 1
        desc = table[d.process_index][i]
        out.append(SimpleNamespace(id=d.id, process_index=d.process_index, device_kind=desc["kind"],
                                   coords=tuple(desc["coords"]), core_on_chip=desc["core"]))
    return out


jax.devices = tpu_devices
import run_with_plan  # noqa: E402

code = run_with_plan.main(["--check"])
print(json.dumps({"initialized_before_first_query": first_query[0] if first_query else None}))
sys.exit(code)
