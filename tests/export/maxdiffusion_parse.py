"""Parse one export with MaxDiffusion's own `pyconfig` and build its mesh through the launcher,
on CPU devices; run by test_maxdiffusion_checkout.py from a MaxDiffusion checkout:

    python maxdiffusion_parse.py EXPORT_DIR

Each CPU device stands for the slice device at the same position of the slice's description
(`aoizora.topology`): the launcher arranges those descriptions, and the mesh is built over the CPU
devices they stand for. Prints the parsed config's keys and the mesh as JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

export_dir = Path(sys.argv[1])
sys.path.insert(0, "src")  # MaxDiffusion's checkout is the working directory
sys.path.insert(0, str(export_dir))

import jax  # noqa: E402
import numpy as np  # noqa: E402
import run_with_plan  # noqa: E402
from maxdiffusion import max_utils, pyconfig  # noqa: E402

from aoizora.topology import get_topology  # noqa: E402

spec = run_with_plan.load_spec(export_dir / "maxdiffusion_plan.json")
argv = run_with_plan.generate_wan_argv(spec, ["skip_jax_distributed_system=true"])
pyconfig.initialize(argv)
config = pyconfig.config
topo = get_topology(spec["slice"]["name"])
cpu = jax.devices()
kind = spec["slice"]["device_kinds"][0]
standins = [SimpleNamespace(id=d.id, coords=tuple(t.coords), core_on_chip=getattr(t, "core_on_chip", 0),
                            device_kind=kind) for d, t in zip(cpu, topo.devices, strict=True)]
array = run_with_plan.plan_device_array(standins, spec)
max_utils.create_device_mesh = run_with_plan.planned_create_device_mesh(spec, array)
planned = max_utils.create_device_mesh(config)  # as MaxDiffusion's Wan path calls it
by_id = {d.id: d for d in cpu}
mesh = jax.sharding.Mesh(np.vectorize(lambda d: by_id[d.id], otypes=[object])(planned), tuple(config.mesh_axes))
print(json.dumps({
    "attention": config.attention, "flash_block_sizes": dict(config.flash_block_sizes),
    "ici": {k: int(getattr(config, k)) for k in spec["ici_parallelism"]}, "mesh_axes": list(config.mesh_axes),
    "mesh_shape": [int(n) for n in mesh.devices.shape],
    # as the plan writes a device: its coordinates on the slice's axes, then its core when chips have two
    "coords": [list(s.coords)[:len(spec["slice"]["shape"])]
               + ([s.core_on_chip] if spec["slice"]["cores_per_chip"] > 1 else []) for s in planned.flat],
}))
