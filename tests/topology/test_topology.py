import pytest

from aoizora.errors import TopologyError
from aoizora.toolchain import compile_only_devices
from aoizora.topology import get_topology, hardware_profile, parse_topology_name


@pytest.mark.parametrize(
    "name, chips, devices, links, wrap",
    [
        ("v5e:2x2", 4, 4, 8, (False, False)),
        ("v5e:2x4", 8, 8, 20, (False, False)),
        ("v5e:4x4", 16, 16, 48, (False, False)),
        ("v5e:8x16", 128, 128, 480, (False, True)),
        ("v5e:16x16", 256, 256, 1024, (True, True)),
        ("v6e:4x4", 16, 16, 48, (False, False)),
        ("v4:4x4x4", 64, 128, 384, (True, True, True)),
        ("v4:2x2x2", 8, 16, 24, (False, False, False)),
        ("v5p:2x2x4", 16, 16, 56, (False, False, False)),
    ],
)
def test_chip_and_link_counts(name, chips, devices, links, wrap):
    topo = get_topology(name)
    assert topo.num_chips == chips
    assert topo.num_devices == devices
    assert len(topo.links) == links
    assert topo.wrap == wrap


def test_coordinates_come_from_libtpu():
    topo = get_topology("v5e:2x4")
    for dev in compile_only_devices("v5e:2x4"):
        assert topo.positions[dev.id].chip == tuple(dev.coords[:2])
    assert {c.coords for c in topo.chips} == {(x, y) for x in range(2) for y in range(4)}


def test_v4_exposes_two_cores_per_chip():
    topo = get_topology("v4:2x2x2")
    assert topo.cores_per_chip == 2
    assert all(len(c.device_ids) == 2 for c in topo.chips)
    a, b = topo.chips[0].device_ids
    assert topo.device_route(a, b) == ()  # two cores of one chip share no ICI link


def test_links_join_neighbours_one_per_direction():
    for name in ("v5e:4x4", "v5e:16x16", "v4:4x4x4"):
        topo = get_topology(name)
        pairs = {(l.src, l.dst) for l in topo.links}
        assert len(pairs) == len(topo.links)
        for l in topo.links:
            assert (l.dst, l.src) in pairs  # full duplex
            diff = [(a - b) % n for a, b, n in zip(l.dst, l.src, topo.shape, strict=True)]
            assert sorted(d for d in diff if d) in ([1], [n - 1 for n in [topo.shape[l.dim]]])
            assert l.bandwidth_Bps == topo.hardware.link_bandwidth_Bps
        out_degree = {}
        for l in topo.links:
            out_degree[l.src] = out_degree.get(l.src, 0) + 1
        assert max(out_degree.values()) <= topo.hardware.ici_ports_per_chip
    torus = get_topology("v5e:16x16")
    assert all(sum(1 for l in torus.links if l.src == c.coords) == 4 for c in torus.chips)


def _walk(topo, src, route):
    cur = src
    for i in route:
        link = topo.links[i]
        assert link.src == cur
        cur = link.dst
    return cur


def test_routes_on_open_axes_are_dimension_ordered():
    topo = get_topology("v5e:4x4")
    route = topo.route((0, 0), (3, 2))
    assert len(route) == 5
    assert _walk(topo, (0, 0), route) == (3, 2)
    dims = [topo.links[i].dim for i in route]
    assert dims == sorted(dims)  # x first, then y
    back = topo.route((3, 2), (0, 0))
    assert [topo.links[i].direction for i in back] == [-1] * 5
    assert topo.route((1, 1), (1, 1)) == ()


def test_routes_on_wrapped_axes_take_the_short_way():
    topo = get_topology("v5e:16x16")
    route = topo.route((0, 0), (15, 0))
    assert len(route) == 1 and topo.links[route[0]].wraparound
    assert topo.links[route[0]].direction == -1
    tie = topo.route((0, 0), (8, 0))
    assert len(tie) == 8 and all(topo.links[i].direction == +1 for i in tie)  # tie -> positive
    assert _walk(topo, (3, 14), topo.route((3, 14), (12, 1))) == (12, 1)
    assert len(topo.route((3, 14), (12, 1))) == 7 + 3
    mixed = get_topology("v5e:8x16")
    assert len(mixed.route((0, 0), (7, 15))) == 7 + 1  # x open, y wrapped


def test_hardware_profiles_from_data_file():
    hw = hardware_profile("v5e")
    assert hw.link_bandwidth_Bps == 4.5e10 and hw.hbm_bytes == 16 * 2**30
    assert hw.peak_bf16_flops == 1.97e14 and hw.clock_hz == 1.5e9
    assert hardware_profile("v5").generation == "v5p"
    for gen in ("v5e", "v6e", "v4", "v5p"):
        assert hardware_profile(gen).sources


@pytest.mark.parametrize(
    "name, fragment",
    [
        ("v7:2x2", "unknown TPU generation"),
        ("v5e-2x4", "malformed TPU slice name"),
        ("v4:2x4", "3-D"),
        ("v5e:3x3", "libtpu does not accept"),
        ("v5e:1x4", "libtpu does not accept"),  # beyond one host's default 2x2 block, not whole blocks
        ("v5e:0x4", "positive"),
    ],
)
def test_bad_names_raise_clear_errors(name, fragment):
    with pytest.raises(TopologyError, match=fragment):
        get_topology(name)


@pytest.mark.parametrize("name, chips, devices, links", [
    ("v5e:1x1", 1, 1, 0), ("v5e:1x2", 2, 2, 2), ("v6e:2x1", 2, 2, 2), ("v5p:1x1x1", 1, 1, 0),
    ("tpu7x:1x1x1", 1, 2, 2),  # one chip's two cores and their die-to-die links
])
def test_slices_inside_one_hosts_block_are_described_as_that_hosts_chips(name, chips, devices, links):
    topo = get_topology(name)
    assert (topo.num_chips, len(topo.devices), len(topo.links)) == (chips, devices, links)
    assert topo.name == name and not any(topo.wrap)


def test_name_aliases():
    assert parse_topology_name("v5:2x2x4") == ("v5p", (2, 2, 4))
    assert get_topology("v5:2x2x2").name == "v5p:2x2x2"


@pytest.mark.parametrize("topology", ["v5e:2x2", "v6e:2x2", "v4:2x2x1", "v5p:2x2x1"])
def test_usable_hbm_is_what_the_compiler_allows(topology):
    """The compiler refuses a program above `hbm_usable_bytes` (below the chip's nominal HBM)."""
    import re

    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(compile_only_devices(topology)[:1]), ("x",))
    huge = jax.jit(lambda x: jnp.sin(jnp.broadcast_to(x, (64, 2**10, 2**10, 2**10))),
                   in_shardings=NamedSharding(mesh, PartitionSpec()))
    with pytest.raises(Exception, match="available HBM") as err:
        huge.lower(jax.ShapeDtypeStruct((2**10,), jnp.float32)).compile()
    available = re.search(r"available HBM \(([0-9.]+)G\)", str(err.value)).group(1)
    hw = get_topology(topology).hardware
    assert f"{hw.hbm_usable_bytes / 2**30:.2f}" == available
    if not topology.startswith("v5p"):  # Cloud's v5p figure (95 GiB per chip) is below libtpu's 95.74 GiB limit
        assert hw.hbm_usable_bytes < hw.hbm_bytes


def _all_gather_of_a_computed_activation(topology: str, compiler_options: dict | None = None) -> str:
    """Compiled HLO of an all-gather of an activation each device computes (as K and V of
    all-gather attention), beside independent compute it could overlap."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = compile_only_devices(topology)
    mesh = Mesh(np.array(devices), ("x",))
    sharded, replicated = NamedSharding(mesh, PartitionSpec("x", None)), NamedSharding(mesh, PartitionSpec())

    def step(a, w, b):
        k = jax.lax.with_sharding_constraint(jnp.tanh(a @ w), replicated)
        return (jnp.tanh(b @ w) @ k.T).astype(jnp.bfloat16)

    n = len(devices) * 1024
    args = (jax.ShapeDtypeStruct((n, 1024), jnp.bfloat16, sharding=sharded),
            jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16, sharding=replicated),
            jax.ShapeDtypeStruct((n, 1024), jnp.bfloat16, sharding=sharded))
    lowered = jax.jit(step, out_shardings=sharded).lower(*args)
    return lowered.compile(compiler_options=compiler_options or {}).as_text()


@pytest.mark.parametrize("topology", ["v5e:2x2", "v6e:2x2", "v4:2x2x1", "v5p:2x2x1", "tpu7x:2x2x1"])
def test_async_collective_fusion_is_what_the_compiler_does(topology):
    """`async_collective_fusion` says whether libtpu, with its default flags, runs an all-gather of
    a computed activation as an async collective fusion (the second, outside copy Stage 1's memory
    estimate adds) or as a synchronous all-gather."""
    import re

    text = _all_gather_of_a_computed_activation(topology)
    fused = bool(re.search(r"%async-collective-start[.0-9]* = ", text))
    assert fused == get_topology(topology).hardware.async_collective_fusion
    assert fused or re.search(r"%all-gather[.0-9]* = ", text)


def test_async_collective_fusion_is_libtpus_flag_on_v5e_and_absent_on_v6e():
    """The mechanism is libtpu's async collective fusion: off by its flag on v5e, and not turned on
    by MaxDiffusion's README flags on v6e."""
    from aoizora.models.wan.kernels.experts import README_LIBTPU_ARGS
    from aoizora.toolchain import CompilerFlags

    off = _all_gather_of_a_computed_activation("v5e:2x2", {"xla_tpu_enable_async_collective_fusion": False})
    assert "async-collective-start" not in off
    readme = CompilerFlags.parse(" ".join(README_LIBTPU_ARGS)).compiler_options()
    assert "async-collective-start" not in _all_gather_of_a_computed_activation("v6e:2x2", readme)


def _scanned_weight_stack(topology: str, tile: tuple[int, int] | None) -> tuple[str, int, int]:
    """Compiled HLO, temp bytes and stack bytes of a bf16 weight stack scanned into matmuls (as
    the model's layer loop uses its stacked weights) on one device, the stack handed over in
    `tile` (an input `Format`) or, with None, as the runtime puts an array on a device."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental.layout import Format, Layout
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh = Mesh(np.array(compile_only_devices(topology)[:1]), ("x",))
    sharding = NamedSharding(mesh, PartitionSpec())

    def layers(stack, x):
        return jax.lax.scan(lambda h, w: (jnp.tanh(h @ w), None), x, stack)[0]

    stack = jax.ShapeDtypeStruct((16, 2048, 2048), jnp.bfloat16, sharding=sharding)
    x = jax.ShapeDtypeStruct((512, 2048), jnp.bfloat16, sharding=sharding)
    handed = sharding if tile is None else Format(Layout(major_to_minor=(0, 1, 2), tiling=(tile, (2, 1))), sharding)
    compiled = jax.jit(layers, in_shardings=(handed, sharding)).lower(stack, x).compile()
    return compiled.as_text(), compiled.memory_analysis().temp_size_in_bytes, 16 * 2048 * 2048 * 2


@pytest.mark.parametrize("topology", ["v5e:2x2", "v6e:2x2", "v4:2x2x1", "v5p:2x2x1", "tpu7x:2x2x1"])
def test_tile_16bit_is_what_the_compiler_wants(topology):
    """`tile_16bit` is the tile libtpu's matmuls want a 16-bit weight stack in: handed over in the
    runtime's tile (`RUNTIME_TILE_16BIT`), the stack is copied into a second HBM buffer exactly
    where the two differ (TPU7x); handed over in `tile_16bit`, never."""
    import re

    from aoizora.topology import RUNTIME_TILE_16BIT

    wanted = get_topology(topology).hardware.tile_16bit
    text, temp_default, stack_bytes = _scanned_weight_stack(topology, None)
    runtime = re.search(r"bf16\[16,2048,2048\]\{2,1,0:T\((\d+),(\d+)\)\(2,1\)\} parameter\(0\)", text)
    assert tuple(int(g) for g in runtime.groups()) == RUNTIME_TILE_16BIT
    assert (temp_default >= stack_bytes) == (wanted != RUNTIME_TILE_16BIT)
    _, temp_wanted, _ = _scanned_weight_stack(topology, wanted)
    assert temp_wanted < stack_bytes
