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
    devices = list(topology.devices)
    note = "jax.experimental.mesh_utils.create_device_mesh"
    try:
        arr, split = _create_device_mesh(mesh, devices)
    except Exception as exc:
        if topology.cores_per_chip > 1 and "megacore" in str(exc):
            # mesh_utils refuses chips that expose several cores unless it knows their core axis
            # (it does for TPU7x, not for v4 without megacore), so JAX users fall back to the
            # devices in the runtime's order; that is JAX's choice here.
            ids = np.array([int(d.id) for d in devices], dtype=np.int64)
            note = "jax.devices() order reshaped (mesh_utils refuses non-megacore chips)"
            return Placement(JAX_DEFAULT, note, mesh, ids.reshape(mesh.shape))
        raise PlacementError(f"JAX cannot build mesh {mesh} on {topology.name}: {exc}") from exc
    if split:
        note += " (allow_split_physical_axes=True)"
    ids = np.vectorize(lambda d: int(d.id), otypes=[np.int64])(arr)
    return Placement(JAX_DEFAULT, note, mesh, ids.reshape(mesh.shape))


def _create_device_mesh(mesh: MeshSpec, devices: list) -> tuple[np.ndarray, bool]:
    """mesh_utils' device array, splitting physical axes only if it cannot do without."""
    from jax.experimental import mesh_utils

    try:
        return mesh_utils.create_device_mesh(mesh.shape, devices=devices, allow_split_physical_axes=False), False
    except (ValueError, NotImplementedError, AssertionError):
        return mesh_utils.create_device_mesh(mesh.shape, devices=devices, allow_split_physical_axes=True), True
