import itertools

import numpy as np
import pytest
from jax.experimental import mesh_utils

from aoizora.errors import MeshSpecError, PlacementError
from aoizora.placement import JAX_DEFAULT, MeshSpec, enumerate_placements
from aoizora.placement.geometry import axis_groups, axis_signature, group_extent, ring_hops
from aoizora.placement.orders import cycle, folded, snake
from aoizora.placement.symmetry import canonical_keys, point_symmetries
from aoizora.topology import get_topology

CASES = [
    ("v5e:2x2", "tp=4"),
    ("v5e:2x2", "dp=2,tp=2"),
    ("v5e:2x4", "sp=2,tp=4"),
    ("v5e:2x4", "tp=4,sp=2"),
    ("v5e:2x4", "dp=2,sp=2,tp=2"),
    ("v5e:2x4", "sp=8"),
    ("v5e:4x4", "sp=4,tp=4"),
    ("v5e:4x4", "dp=2,sp=2,tp=4"),
    ("v5e:4x4", "sp=16"),
    ("v5p:2x2x2", "a=2,b=4"),
    ("v4:2x2x2", "a=4,b=4"),
]


@pytest.mark.parametrize("topo_name, mesh", CASES)
def test_every_placement_is_a_permutation_of_all_devices(topo_name, mesh):
    topo = get_topology(topo_name)
    space = enumerate_placements(topo, MeshSpec.parse(mesh))
    assert space.placements[0].name == JAX_DEFAULT
    assert space.generated >= space.distinct >= 2 or topo.num_devices == 4
    names = [p.name for p in space.placements]
    assert len(set(names)) == len(names)
    for p in space.placements:
        assert sorted(p.device_ids.ravel().tolist()) == sorted(topo.positions)
        assert p.device_ids.shape == space.mesh.shape


@pytest.mark.parametrize(
    "topo_name, shape",
    [("v5e:2x2", (4,)), ("v5e:2x2", (2, 2)), ("v5e:2x4", (2, 4)), ("v5e:2x4", (8,)), ("v5e:4x4", (4, 4)),
     ("v5e:4x4", (2, 2, 4)), ("v5e:4x4", (16,)), ("v5p:2x2x2", (2, 4))],
)
def test_jax_default_is_exactly_mesh_utils(topo_name, shape):
    topo = get_topology(topo_name)
    mesh = MeshSpec(tuple(f"a{i}" for i in range(len(shape))), shape)
    default = enumerate_placements(topo, mesh).by_name(JAX_DEFAULT)
    try:
        expected = mesh_utils.create_device_mesh(shape, devices=list(topo.devices))
    except (ValueError, NotImplementedError):
        expected = mesh_utils.create_device_mesh(shape, devices=list(topo.devices), allow_split_physical_axes=True)
    assert default.device_ids.tolist() == np.vectorize(lambda d: d.id)(expected).tolist()


def test_jax_default_on_v5e_2x4_is_the_tray_ring():
    # create_device_mesh((2,4)) on v5e:2x4 steps diagonally inside each 4-device group (checked below).
    topo = get_topology("v5e:2x4")
    default = enumerate_placements(topo, MeshSpec.parse("sp=2,tp=4")).by_name(JAX_DEFAULT)
    assert default.coords(topo).tolist() == [[[0, 0], [1, 0], [0, 1], [1, 1]], [[1, 3], [0, 3], [1, 2], [0, 2]]]
    hops = [ring_hops(topo, g) for g in axis_groups(default, "tp")]
    assert hops == [(1, 2, 1, 2), (1, 2, 1, 2)]


def test_square_tp_groups_exist_on_v5e_2x4():
    topo = get_topology("v5e:2x4")
    space = enumerate_placements(topo, MeshSpec.parse("sp=2,tp=4"))
    squares = [
        p for p in space.placements
        if all(group_extent(topo, g) == (2, 2) and ring_hops(topo, g) == (1, 1, 1, 1) for g in axis_groups(p, "tp"))
    ]
    assert squares, "expected a placement whose tp groups are 2x2 rings"
    lines = [p for p in space.placements if all(group_extent(topo, g) == (1, 4) for g in axis_groups(p, "tp"))]
    assert lines, "expected a placement whose tp groups are 1x4 lines"


@pytest.mark.parametrize("topo_name, mesh", CASES + [("v5e:8x16", "a=8,b=16")])
def test_dedup_never_merges_different_geometry(topo_name, mesh):
    topo = get_topology(topo_name)
    spec = MeshSpec.parse(mesh)
    raw = enumerate_placements(topo, spec, deduplicate=False).placements
    if len(raw) > 400:
        raw = raw[:: len(raw) // 400]
    coords = np.stack([p.coords(topo).reshape(topo.num_devices, -1) for p in raw])
    keys = canonical_keys(coords, topo)
    classes: dict[bytes, list] = {}
    for key, p in zip(keys, raw, strict=True):
        classes.setdefault(key, []).append(p)
    for members in classes.values():
        first = axis_signature(topo, members[0])
        for other in members[1:]:
            assert axis_signature(topo, other) == first, (members[0].name, other.name)


def test_symmetric_images_share_a_key_and_distinct_shapes_do_not():
    topo = get_topology("v5e:4x4")
    space = enumerate_placements(topo, MeshSpec.parse("sp=4,tp=4"))
    p = space.placements[3]
    coords = p.coords(topo).reshape(16, 2)
    images = []
    for perm, flips in point_symmetries(topo):
        img = coords[:, list(perm)].copy()
        for axis, flip in enumerate(flips):
            if flip:
                img[:, axis] = 3 - img[:, axis]
        images.append(img)
    keys = canonical_keys(np.stack([coords] + images), topo)
    assert len(set(keys)) == 1
    assert len(point_symmetries(topo)) == 8  # square grid: D4
    distinct = np.stack([q.coords(topo).reshape(16, 2) for q in space.placements[1:]])
    assert len(set(canonical_keys(distinct, topo))) == len(distinct)


def test_translations_are_symmetries_only_on_wrapped_axes():
    torus = get_topology("v5e:16x16")
    base = np.array([[(x, y) for y in range(16) for x in range(16)]])
    shifted = (base + np.array([3, 5])) % 16
    assert canonical_keys(np.concatenate([base, shifted]), torus)[0] == canonical_keys(shifted, torus)[0]
    grid = get_topology("v5e:4x4")
    base = np.array([[(x, y) for y in range(4) for x in range(4)]])
    rolled = base.copy()
    rolled[0, :, 0] = (rolled[0, :, 0] + 1) % 4
    k = canonical_keys(np.concatenate([base, rolled]), grid)
    assert k[0] != k[1]


def test_placement_counts_are_stable():
    # Figures quoted in the closing note of the foundation issue.
    counts = {}
    for topo_name, mesh in [("v5e:2x4", "sp=2,tp=4"), ("v5e:2x4", "dp=2,sp=2,tp=2"),
                            ("v5e:4x4", "sp=4,tp=4"), ("v5e:4x4", "dp=2,sp=2,tp=4")]:
        space = enumerate_placements(get_topology(topo_name), MeshSpec.parse(mesh))
        counts[(topo_name, mesh)] = (space.generated, space.distinct)
        assert space.distinct < space.generated or mesh == "dp=2,sp=2,tp=2"
    assert all(d >= 6 for _, d in counts.values())


def test_orders_are_unit_step_walks():
    for sizes in [(2, 2), (2, 4), (4, 4), (2, 2, 2), (4, 2)]:
        for perm in (snake(sizes), cycle(sizes)):
            assert sorted(perm) == list(range(int(np.prod(sizes))))
            pts = [np.unravel_index(i, sizes) for i in perm]
            steps = [sum(abs(a - b) for a, b in zip(p, q, strict=True)) for p, q in itertools.pairwise(pts)]
            assert steps == [1] * (len(pts) - 1)
        pts = [np.unravel_index(i, sizes) for i in cycle(sizes)]
        assert sum(abs(a - b) for a, b in zip(pts[-1], pts[0], strict=True)) == 1  # closes
        assert cycle(sizes)[0] == 0
    assert cycle((3, 3)) is None
    assert folded(4) == (0, 2, 3, 1) and folded(6) == (0, 2, 4, 5, 3, 1)


@pytest.mark.parametrize(
    "text, exc, fragment",
    [
        ("sp=2,tp=3", MeshSpecError, "multiply to 8"),
        ("sp2,tp=4", MeshSpecError, "malformed mesh axis"),
        ("sp=2,sp=4", MeshSpecError, "repeat"),
        ("sp=0,tp=8", MeshSpecError, "positive"),
    ],
)
def test_bad_meshes(text, exc, fragment):
    with pytest.raises(exc, match=fragment):
        enumerate_placements(get_topology("v5e:2x4"), MeshSpec.parse(text))


def test_space_size_limit_is_a_clear_error():
    with pytest.raises(PlacementError, match="more than the limit"):
        enumerate_placements(get_topology("v5e:4x4"), MeshSpec.parse("sp=4,tp=4"), max_candidates=10)


def test_mesh_object_builds():
    topo = get_topology("v5e:2x4")
    p = enumerate_placements(topo, MeshSpec.parse("sp=2,tp=4")).placements[1]
    mesh = p.jax_mesh(topo)
    assert mesh.axis_names == ("sp", "tp") and mesh.devices.shape == (2, 4)
    assert [d.id for d in mesh.devices.ravel()] == p.device_ids.ravel().tolist()
