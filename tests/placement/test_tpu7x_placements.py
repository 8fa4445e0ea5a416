"""Placements on TPU7x: the core is a physical axis; a size-2 logical axis may sit on it or across chips."""

import numpy as np
import pytest

from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.placement.jax_default import JAX_DEFAULT
from aoizora.topology import get_topology


def _axis_on_cores(topo, placement, axis: int) -> bool:
    """Whether every group along mesh axis `axis` is the two cores of one chip."""
    ids = np.moveaxis(placement.device_ids, axis, -1).reshape(-1, placement.device_ids.shape[axis])
    return all(len({topo.positions[int(d)].chip for d in group}) == 1 for group in ids)


@pytest.mark.parametrize("mesh_text, axis", [("u=2,r=4", 0), ("data=2,ctx_u=2,ctx_r=2", 1)])
def test_size2_axis_on_the_cores_and_across_chips_are_both_enumerated(mesh_text, axis):
    topo = get_topology("tpu7x:2x2x1")
    space = enumerate_placements(topo, MeshSpec.parse(mesh_text))
    on_cores = [p for p in space.placements if _axis_on_cores(topo, p, axis)]
    across = [p for p in space.placements if not _axis_on_cores(topo, p, axis)]
    assert on_cores and across
    assert any(f"{space.mesh.axis_names[axis]}=core" in p.name.split() for p in on_cores)


def test_jax_default_on_tpu7x_is_mesh_utils_with_the_core_axis():
    from jax.experimental import mesh_utils

    topo = get_topology("tpu7x:2x2x1")
    space = enumerate_placements(topo, MeshSpec.parse("u=2,r=4"))
    default = space.placements[0]
    assert default.name == JAX_DEFAULT and "mesh_utils" in default.description
    expected = mesh_utils.create_device_mesh((2, 4), devices=list(topo.devices))
    assert default.device_ids.tolist() == [[int(d.id) for d in row] for row in expected]
    # JAX puts the two cores of a chip next to each other on the minor (most communicating) axis
    pairs = type(default)("r-pairs", "", MeshSpec.parse("a=4,b=2"), default.device_ids.reshape(4, 2))
    assert _axis_on_cores(topo, pairs, 1)


def test_core_swap_is_a_symmetry_only_while_both_cores_reach_the_ici_links():
    from aoizora.placement.symmetry import canonical_keys

    mesh = MeshSpec.parse("u=2,r=4")
    for core_ici, symmetric in (("direct", True), ("via-core0", False)):
        topo = get_topology("tpu7x:2x2x1", core_ici)
        p = enumerate_placements(topo, mesh).by_name("u=x r=core.y")
        coords = p.coords(topo).reshape(1, -1, 4)
        swapped = coords.copy()
        swapped[..., 3] = 1 - swapped[..., 3]
        a, b = canonical_keys(np.concatenate([coords, swapped]), topo)
        assert (a == b) is symmetric
