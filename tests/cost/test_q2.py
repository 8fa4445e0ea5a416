import numpy as np
import pytest

from aoizora.cost import CostModel, Q2Options
from aoizora.errors import CostModelOptionError, PlacementError
from aoizora.hlo.program import CollectiveKind, CollectiveMode, Program
from aoizora.hlo.synthetic import ProgramBuilder
from aoizora.placement import MeshSpec, Placement, enumerate_placements
from aoizora.topology import get_topology


def one_collective(
    kind: CollectiveKind,
    groups: list[tuple[int, ...]],
    operand_bytes: int,
    num_devices: int,
    *,
    pairs: tuple[tuple[int, int], ...] = (),
    compute_flops: float = 0.0,
    mode: CollectiveMode = CollectiveMode.SYNC,
) -> Program:
    """One collective, with one compute op beside it (async) or after it (sync)."""
    b = ProgramBuilder(num_devices)
    if mode == CollectiveMode.SYNC:
        b.collective(kind, groups, operand_bytes, pairs=pairs)
        if compute_flops:
            b.compute(flops=compute_flops)
    else:
        c = b.start(kind, groups, operand_bytes, pairs=pairs)
        if compute_flops:
            b.compute(flops=compute_flops)
        b.done(c)
    return b.build()

MB = 2**20


def raster_placement(topo, mesh: MeshSpec, coords_in_order) -> Placement:
    """A placement listing devices in the given chip order (first core of each chip)."""
    ids = [topo.chip_by_coords[tuple(c)].device_ids[0] for c in coords_in_order]
    return Placement("custom", "test", mesh, np.array(ids).reshape(mesh.shape))


def test_bidirectional_ring_all_gather_on_wrapped_axis():
    topo = get_topology("v5e:16x16")
    mesh = MeshSpec(("y", "x"), (16, 16))
    order = [(x, y) for y in range(16) for x in range(16)]  # x varies fastest: groups are rows along x
    place = raster_placement(topo, mesh, order)
    shard = 4 * MB
    groups = [tuple(range(r * 16, r * 16 + 16)) for r in range(16)]
    prog = one_collective(CollectiveKind.ALL_GATHER, groups, shard, 256)
    res = CostModel(topo, Q2Options(ring_direction="bi")).evaluate(prog, place)
    V, W = 16 * shard, topo.hardware.link_bandwidth_Bps
    assert res.step_seconds == pytest.approx(V / (2 * W), rel=0.08)


def test_ring_all_gather_on_open_line():
    topo = get_topology("v5e:4x4")
    mesh = MeshSpec(("y", "x"), (4, 4))
    place = raster_placement(topo, mesh, [(x, y) for y in range(4) for x in range(4)])
    shard, N = 8 * MB, 4
    groups = [tuple(range(r * 4, r * 4 + 4)) for r in range(4)]
    W = topo.hardware.link_bandwidth_Bps
    for direction in ("uni", "bi"):
        res = CostModel(topo, Q2Options(ring_direction=direction)).evaluate(
            one_collective(CollectiveKind.ALL_GATHER, groups, shard, 16), place
        )
        assert res.step_seconds == pytest.approx((N - 1) / N * (N * shard) / W, rel=0.02)


def test_two_groups_through_one_link_take_twice_as_long():
    topo = get_topology("v5e:2x4")
    mesh = MeshSpec(("a", "b"), (4, 2))
    # groups {(0,0),(0,2)} and {(0,1),(0,3)}: both routes cross the link (0,1)->(0,2)
    order = [(0, 0), (0, 2), (0, 1), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)]
    place = raster_placement(topo, mesh, order)
    cm = CostModel(topo, Q2Options(ring_direction="uni"))
    one = cm.evaluate(one_collective(CollectiveKind.COLLECTIVE_PERMUTE, [], 16 * MB, 8, pairs=((0, 1),)), place)
    two = cm.evaluate(one_collective(CollectiveKind.COLLECTIVE_PERMUTE, [], 16 * MB, 8, pairs=((0, 1), (2, 3))), place)
    lat = 2 * topo.hardware.hop_latency_s + topo.hardware.collective_launch_s  # paid once, not per byte
    assert (two.step_seconds - lat) == pytest.approx(2 * (one.step_seconds - lat), rel=1e-9)


def test_square_ring_beats_line_ring():
    topo = get_topology("v5e:2x4")
    mesh = MeshSpec(("a", "b"), (2, 4))
    square = raster_placement(topo, mesh, [(0, 0), (0, 1), (1, 1), (1, 0), (0, 2), (0, 3), (1, 3), (1, 2)])
    line = raster_placement(topo, mesh, [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)])
    prog = one_collective(CollectiveKind.ALL_REDUCE, [(0, 1, 2, 3), (4, 5, 6, 7)], 32 * MB, 8)
    bi = CostModel(topo, Q2Options(ring_direction="bi", ring_order="listed"))
    assert bi.evaluate(prog, square).step_seconds < 0.6 * bi.evaluate(prog, line).step_seconds
    # A one-way ring on a full-duplex line sends its closing hop on the links of the other
    # direction, so only the closing hop's latency separates it from the square.
    uni = CostModel(topo, Q2Options(ring_direction="uni", ring_order="listed"))
    assert uni.evaluate(prog, square).step_seconds < uni.evaluate(prog, line).step_seconds


def test_best_ring_order_repairs_a_diagonal_listing():
    topo = get_topology("v5e:2x4")
    mesh = MeshSpec(("a", "b"), (2, 4))
    diagonal = raster_placement(topo, mesh, [(0, 0), (1, 1), (0, 1), (1, 0), (0, 2), (1, 3), (0, 3), (1, 2)])
    square = raster_placement(topo, mesh, [(0, 0), (0, 1), (1, 1), (1, 0), (0, 2), (0, 3), (1, 3), (1, 2)])
    prog = one_collective(CollectiveKind.ALL_GATHER, [(0, 1, 2, 3), (4, 5, 6, 7)], 8 * MB, 8)
    listed = CostModel(topo, Q2Options(ring_order="listed"))
    best = CostModel(topo, Q2Options(ring_order="best"))
    assert listed.evaluate(prog, diagonal).step_seconds > listed.evaluate(prog, square).step_seconds
    assert best.evaluate(prog, diagonal).step_seconds == pytest.approx(listed.evaluate(prog, square).step_seconds)


def test_async_collective_hides_under_compute_and_sync_does_not():
    topo = get_topology("v5e:2x2")
    place = enumerate_placements(topo, MeshSpec.parse("a=4")).placements[0]
    flops = 2e10  # ~100 us of compute on v5e
    sync = one_collective(CollectiveKind.ALL_REDUCE, [(0, 1, 2, 3)], 2 * MB, 4, compute_flops=flops)
    asyn = one_collective(
        CollectiveKind.ALL_REDUCE, [(0, 1, 2, 3)], 2 * MB, 4, compute_flops=flops, mode=CollectiveMode.ASYNC
    )
    cm = CostModel(topo)
    rs, ra = cm.evaluate(sync, place), cm.evaluate(asyn, place)
    compute = flops / topo.hardware.peak_bf16_flops
    assert rs.compute_seconds == pytest.approx(compute) == ra.compute_seconds
    assert rs.step_seconds == pytest.approx(compute + rs.collectives[0].seconds)
    assert ra.step_seconds == pytest.approx(max(compute, ra.collectives[0].seconds))
    assert ra.exposed_comm_seconds < rs.exposed_comm_seconds


def test_all_to_all_loads_direct_routes():
    topo = get_topology("v5e:2x2")
    place = enumerate_placements(topo, MeshSpec.parse("a=4")).placements[0]
    prog = one_collective(CollectiveKind.ALL_TO_ALL, [(0, 1, 2, 3)], 4 * MB, 4)
    res = CostModel(topo).evaluate(prog, place)
    assert res.link_bytes.sum() == pytest.approx(
        sum(topo.hops(topo.positions[a].chip, topo.positions[b].chip) for a in range(4) for b in range(4)) * MB
    )


def test_link_bytes_cover_every_directed_link_once():
    topo = get_topology("v5e:4x4")
    space = enumerate_placements(topo, MeshSpec.parse("sp=4,tp=4"))
    prog = one_collective(CollectiveKind.ALL_GATHER, [tuple(range(r * 4, r * 4 + 4)) for r in range(4)], MB, 16)
    res = CostModel(topo).evaluate(prog, space.placements[1])
    assert res.link_bytes.shape == (len(topo.links),)
    assert res.link_bytes.min() >= 0


def test_mismatched_placement_is_a_clear_error():
    topo = get_topology("v5e:2x4")
    prog = one_collective(CollectiveKind.ALL_REDUCE, [(0, 1, 2, 3)], MB, 4)
    place = enumerate_placements(topo, MeshSpec.parse("a=8")).placements[0]
    with pytest.raises(PlacementError, match="compiled for 4 devices"):
        CostModel(topo).evaluate(prog, place)
    other = get_topology("v5e:2x2")
    with pytest.raises(PlacementError, match="not a permutation"):
        CostModel(other).evaluate(one_collective(CollectiveKind.ALL_REDUCE, [(0, 1, 2, 3, 4, 5, 6, 7)], MB, 8), place)


def _two_permutes(pairs_a, pairs_b, payload: int) -> Program:
    """Two async collective-permutes in flight at once (ring attention's K and V), then both done."""
    b = ProgramBuilder(4)
    ka = b.start(CollectiveKind.COLLECTIVE_PERMUTE, [(0, 1, 2, 3)], payload, pairs=pairs_a)
    kb = b.start(CollectiveKind.COLLECTIVE_PERMUTE, [(0, 1, 2, 3)], payload, pairs=pairs_b)
    b.done(ka)
    b.done(kb)
    return b.build()


def test_concurrent_collectives_share_links_like_the_simulator():
    from aoizora.sim import simulate

    topo = get_topology("v5e:2x2")
    place = enumerate_placements(topo, MeshSpec.parse("a=4")).placements[0]
    cm = CostModel(topo)
    coords = [tuple(c) for c in place.coords(topo).reshape(4, -1)[:, :2].tolist()]
    square = [coords.index(c) for c in ((0, 0), (1, 0), (1, 1), (0, 1))]  # logical ids around the square
    ring = tuple((square[i], square[(i + 1) % 4]) for i in range(4))  # each hop one neighbour link
    one = cm.evaluate(one_collective(CollectiveKind.COLLECTIVE_PERMUTE, [(0, 1, 2, 3)], 16 * MB, 4, pairs=ring,
                                     mode=CollectiveMode.ASYNC), place)
    alone, latency = one.step_seconds, one.collectives[0].latency_seconds
    assert 0 < latency < alone
    # same links: the second permute's bytes queue behind the first's (hop latency paid once more, not twice)
    same = _two_permutes(ring, ring, 16 * MB)
    assert cm.evaluate(same, place).step_seconds == pytest.approx(2 * alone - latency, rel=1e-6)
    # opposite directions use the other directed links: no slowdown
    reverse = tuple((b, a) for a, b in ring)
    assert cm.evaluate(_two_permutes(ring, reverse, 16 * MB), place).step_seconds == pytest.approx(alone, rel=1e-6)
    for prog in (same, _two_permutes(ring, reverse, 16 * MB)):
        q2 = cm.evaluate(prog, place).step_seconds
        assert q2 == pytest.approx(simulate(prog, topo, place).step_seconds, rel=0.05)


def test_open_line_ring_pays_its_closing_edge_once_per_pass():
    # A 4-ring listed along an open line: edges of 1, 1, 1 and 3 hops. A chunk is forwarded as
    # soon as it arrives, so its latency adds up along the 3 edges it crosses; the worst start
    # crosses 1 + 1 + 3 = 5 hops per pass, not 3 steps x 3 hops (a barrier after every step).
    topo = get_topology("v5e:2x4")
    mesh = MeshSpec(("a", "b"), (2, 4))
    place = raster_placement(topo, mesh, [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)])
    prog = one_collective(CollectiveKind.ALL_GATHER, [(0, 1, 2, 3), (4, 5, 6, 7)], 1024, 8)
    cm = CostModel(topo, Q2Options(ring_direction="bi", ring_order="listed"))
    est = cm.evaluate(prog, place).collectives[0]
    hw = topo.hardware
    assert est.latency_seconds == pytest.approx(hw.collective_launch_s + 5 * hw.hop_latency_s, rel=1e-9)


def test_every_collective_pays_its_launch_cost():
    topo = get_topology("v5e:2x4")
    hw = topo.hardware
    assert hw.collective_launch_s > 0 and "collective_launch_s" in hw.sources
    mesh = MeshSpec(("a", "b"), (2, 4))
    place = raster_placement(topo, mesh, [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)])
    cm = CostModel(topo)
    tiny = cm.evaluate(one_collective(CollectiveKind.COLLECTIVE_PERMUTE, [], 64, 8, pairs=((0, 1),)), place)
    assert tiny.step_seconds == pytest.approx(hw.collective_launch_s + hw.hop_latency_s + 64 / hw.link_bandwidth_Bps)
    # two of them one after the other pay it twice; a group of one moves nothing and is not launched
    b = ProgramBuilder(8)
    b.collective(CollectiveKind.COLLECTIVE_PERMUTE, [], 64, pairs=((0, 1),))
    b.collective(CollectiveKind.COLLECTIVE_PERMUTE, [], 64, pairs=((0, 1),))
    assert cm.evaluate(b.build(), place).step_seconds == pytest.approx(2 * tiny.step_seconds)
    alone = one_collective(CollectiveKind.ALL_GATHER, [(i,) for i in range(8)], 64, 8)
    assert cm.evaluate(alone, place).step_seconds == 0.0


def test_options_map_the_cli_spellings_onto_the_shared_switches():
    from aoizora.hlo.algorithm import RingDirection, RingOrder

    assert (Q2Options().order, Q2Options().direction) == (RingOrder.REORDERING_MAP, None)
    assert Q2Options("listed", "uni").order is RingOrder.LISTED
    assert Q2Options("best", "bi").direction is RingDirection.BIDIRECTIONAL
    with pytest.raises(CostModelOptionError, match="ring_order"):
        Q2Options(ring_order="reordered")
    with pytest.raises(CostModelOptionError, match="ring_direction"):
        Q2Options(ring_direction="unidirectional")


def test_the_ring_order_switch_is_spelled_as_ring_orders_values_everywhere():
    """The CLI's `--ring-order` choices and default, and Q2Options', are `RingOrder`'s values."""
    from aoizora.cli import cli
    from aoizora.hlo.algorithm import RingOrder

    values = [o.value for o in RingOrder]
    for name in ("plan", "rank", "validate"):
        option = next(p for p in cli.commands[name].params if p.name == "ring_order")
        assert sorted(option.type.choices) == sorted(values) and option.default == RingOrder.REORDERING_MAP
    assert [Q2Options(v).order for v in values] == list(RingOrder)
    assert Q2Options().ring_order == RingOrder.REORDERING_MAP
