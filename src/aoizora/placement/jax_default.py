"""JAX's own placement: exactly what `mesh_utils.create_device_mesh` returns for the devices."""

from __future__ import annotations

import numpy as np

from aoizora.errors import PlacementError
from aoizora.placement.mesh_spec import MeshSpec
from aoizora.placement.placement import Placement
from aoizora.topology import Topology

JAX_DEFAULT = "jax-default"


def jax_default_placement(topology: Topology, mesh: MeshSpec) -> Placement:
    """The baseline to beat. Splits physical axes only when JAX cannot do without it."""
    from jax.experimental import mesh_utils

    devices = list(topology.devices)
    note = "jax.experimental.mesh_utils.create_device_mesh"
    if topology.cores_per_chip > 1:
        # mesh_utils refuses chips that expose several cores ("megacore" required), so JAX users
        # fall back to the devices in the runtime's order; that is JAX's choice here.
        ids = np.array([int(d.id) for d in devices], dtype=np.int64)
        note = "jax.devices() order reshaped (mesh_utils refuses non-megacore chips)"
        return Placement(JAX_DEFAULT, note, mesh, ids.reshape(mesh.shape))
    try:
        arr = mesh_utils.create_device_mesh(mesh.shape, devices=devices, allow_split_physical_axes=False)
    except (ValueError, NotImplementedError, AssertionError):
        try:
            arr = mesh_utils.create_device_mesh(mesh.shape, devices=devices, allow_split_physical_axes=True)
        except Exception as exc:
            raise PlacementError(f"JAX cannot build mesh {mesh} on {topology.name}: {exc}") from exc
        note += " (allow_split_physical_axes=True)"
    ids = np.vectorize(lambda d: int(d.id), otypes=[np.int64])(arr)
    return Placement(JAX_DEFAULT, note, mesh, ids.reshape(mesh.shape))
