"""Physical placements of a logical mesh on a TPU slice: axis orders, ring embeddings, dedup."""

from aoizora.placement.jax_default import JAX_DEFAULT, jax_default_placement
from aoizora.placement.mesh_spec import MeshSpec, same_mesh
from aoizora.placement.placement import Placement
from aoizora.placement.slice_devices import DeviceMismatch, arrange_devices
from aoizora.placement.space import DEFAULT_MAX_CANDIDATES, PlacementSet, enumerate_placements, prime_factors

__all__ = [
    "DEFAULT_MAX_CANDIDATES",
    "DeviceMismatch",
    "JAX_DEFAULT",
    "MeshSpec",
    "Placement",
    "arrange_devices",
    "PlacementSet",
    "enumerate_placements",
    "prime_factors",
    "jax_default_placement",
    "same_mesh",
]
