"""A physical placement: which device each logical mesh position lands on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from aoizora.errors import PlacementError
from aoizora.placement.mesh_spec import MeshSpec
from aoizora.topology import Topology


@dataclass(frozen=True, eq=False)
class Placement:
    """`device_ids[i, j, ...]` is the libtpu device id at logical mesh position (i, j, ...)."""

    name: str
    description: str
    mesh: MeshSpec
    device_ids: np.ndarray

    def __post_init__(self) -> None:
        if tuple(self.device_ids.shape) != self.mesh.shape:
            raise PlacementError(
                f"placement {self.name!r} has a device array of shape {self.device_ids.shape}, "
                f"mesh {self.mesh} needs {self.mesh.shape}"
            )

    def check(self, topology: Topology) -> None:
        """Raise PlacementError unless every device of the topology appears exactly once."""
        ids = sorted(int(i) for i in self.device_ids.ravel())
        expected = sorted(topology.positions)
        if ids != expected:
            raise PlacementError(
                f"placement {self.name!r} is not a permutation of the {topology.num_devices} devices of "
                f"{topology.name}; rebuild it for this slice"
            )

    def coords(self, topology: Topology) -> np.ndarray:
        """Physical position of each mesh position: chip coordinates, plus the core when chips have several."""
        with_core = topology.cores_per_chip > 1
        flat = []
        for d in self.device_ids.ravel():
            pos = topology.positions[int(d)]
            flat.append(pos.chip + ((pos.core,) if with_core else ()))
        return np.array(flat, dtype=np.int64).reshape(self.mesh.shape + (len(flat[0]),))

    def devices(self, topology: Topology) -> np.ndarray:
        """The device objects in mesh order, ready for `jax.sharding.Mesh`."""
        by_id = {int(d.id): d for d in topology.devices}
        out = np.empty(self.mesh.shape, dtype=object)
        for idx, d in np.ndenumerate(self.device_ids):
            out[idx] = by_id[int(d)]
        return out

    def jax_mesh(self, topology: Topology) -> Any:
        """A `jax.sharding.Mesh` over the topology's devices in this placement's order."""
        from jax.sharding import Mesh

        return Mesh(self.devices(topology), self.mesh.axis_names)

    def to_json(self, topology: Topology) -> dict[str, Any]:
        return {
            "name": self.name,
            "description": self.description,
            "mesh": {"axis_names": list(self.mesh.axis_names), "axis_sizes": list(self.mesh.axis_sizes)},
            "device_coords": self.coords(topology).tolist(),
        }
