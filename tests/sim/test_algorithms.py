"""Algorithm-config mapping, ring orders and the transfer DAGs of the simulator."""

import pytest
from simhelpers import device_at, identity_placement, placement_from_chips

from aoizora.hlo.algorithm import RingDirection, RingOrder
from aoizora.hlo.program import CollectiveKind
from aoizora.hlo.synthetic import PINCER, UNI_RING, ProgramBuilder, algorithm
from aoizora.sim import best_ring_order, ring_direction, simulate
from aoizora.sim.algorithms import build_plan, nd_layout, ring_link_loads
from aoizora.topology import get_topology

S = 2**24


@pytest.mark.parametrize("emitter, strategy, colors, expected", [
    ("RotatedPincerEmitter", "UniDirection1DRingStrategy", 2, "bidirectional"),  # all-reduce, v5e:2x4
    ("RotatedPincerShortEmitter", "StrategyND", 2, "bidirectional"),  # 16-device all-reduce, v5e:4x4
    ("SingleInputAllReduceScatterFusion", "StrategyRing", 1, "unidirectional"),  # reduce-scatter fusion
    ("SomeEmitter", "UniDirection1DRingStrategy", 1, "unidirectional"),
    ("SomeEmitter", "BiDirection1DRingStrategy", 1, "bidirectional"),
    ("RotatedPincerEmitter", None, 1, "unidirectional"),  # a one-armed pincer is a one-way ring
    ("1DAllGatherNonMajorDim", None, None, "bidirectional"),  # no direction named: the default
])
def test_algorithm_config_to_ring_direction(emitter, strategy, colors, expected):
    assert ring_direction(algorithm(emitter, strategy, colors=colors)) == expected


def test_unknown_config_uses_the_default_direction():
    assert ring_direction(None) == "bidirectional"
    assert ring_direction(None, default="unidirectional") == "unidirectional"
    assert ring_direction(algorithm("1DAllGatherNonMajorDim"), default="unidirectional") == "unidirectional"


def test_nd_layout_parses_dims_and_color_orders():
    debug = ("\nStrategyND{colors:2 phases:2 cores:{4 4},{4 4} nophase0:0 reserved_sflags:1 num_dims:2 "
             "active_dims:111 dim_sizes:4,4 dim_used:{0 1},{1 0} use_ndnway:0}")
    nd = nd_layout(algorithm("RotatedPincerShortEmitter", "StrategyND", colors=2, debug=debug), 16)
    assert nd is not None
    assert nd.dim_sizes == (4, 4)
    assert nd.dim_orders == ((0, 1), (1, 0))
    assert nd_layout(algorithm("RotatedPincerShortEmitter", "StrategyND", debug=debug), 8) is None  # does not fit
    assert nd_layout(PINCER, 16) is None


def test_force_direction_switch_overrides_the_config():
    topo = get_topology("v5e:2x4")
    place = placement_from_chips(topo, [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2), (1, 3), (0, 3)])
    b = ProgramBuilder(8)
    b.collective("all-gather", [[0, 1, 2, 3], [4, 5, 6, 7]], S, algo=UNI_RING)
    prog = b.build()
    auto = simulate(prog, topo, place).step_seconds
    bidi = simulate(prog, topo, place, ring_direction="bidirectional").step_seconds
    assert auto / bidi == pytest.approx(2.0, rel=0.01)


def test_ring_transfers_follow_the_listed_order_and_carry_the_ring_bytes():
    topo = get_topology("v5e:2x4")
    place = identity_placement(topo)
    l2p = [int(d) for d in place.device_ids.ravel()]
    b = ProgramBuilder(8)
    c = b.collective("reduce-scatter", [[0, 1, 2, 3], [4, 5, 6, 7]], S, algo=UNI_RING)
    coll = b.build().collectives[c]
    plan = build_plan(coll, l2p, topo, ring_order=RingOrder.LISTED, chunks=2, direction=None,
                      default_direction=RingDirection.BIDIRECTIONAL)
    pairs = {(s, d) for s, d in zip(plan.src, plan.dst, strict=True)}
    assert pairs == {(l2p[g[i]], l2p[g[(i + 1) % 4]]) for g in ([0, 1, 2, 3], [4, 5, 6, 7]) for i in range(4)}
    # reduce-scatter: N-1 steps of S/N from every device
    for dev in plan.members:
        sent = sum(nb for s, nb in zip(plan.src, plan.nbytes, strict=True) if s == dev)
        assert sent == pytest.approx(3 * S / 4)
    # chunk c of step s waits for chunk c of step s-1 into its sender
    for t, pre in enumerate(plan.prereqs):
        for p in pre:
            assert plan.dst[p] == plan.src[t]


def test_best_ring_order_turns_a_zigzag_into_the_square():
    topo = get_topology("v5e:2x4")
    zigzag = tuple(device_at(topo, c) for c in [(0, 0), (1, 1), (1, 0), (0, 1)])
    best = best_ring_order(topo, zigzag, bidirectional=True)
    assert max(ring_link_loads(topo, best, True).values()) == 1
    assert max(ring_link_loads(topo, zigzag, True).values()) > 1
    square = tuple(device_at(topo, c) for c in [(0, 0), (1, 0), (1, 1), (0, 1)])
    assert best_ring_order(topo, square, bidirectional=True) == square  # already optimal: kept


@pytest.mark.parametrize("slice_name, size, bidirectional", [
    ("v5e:4x4", 8, True), ("v5e:4x4", 8, False), ("v5e:4x4", 6, True), ("v5e:2x4", 5, False), ("v4:2x2x2", 8, True),
])
def test_exact_ring_search_matches_the_plain_search_over_every_order(slice_name, size, bidirectional):
    import itertools
    import random

    from aoizora.sim.algorithms import exact_ring_order, ring_cost

    topo = get_topology(slice_name)
    rng = random.Random(size * 2 + bidirectional)
    for _ in range(3):
        group = tuple(rng.sample(sorted(topo.positions), size))
        # the definition: the first order (listed first) of least (bottleneck, longest hop, total hops)
        best, best_cost = group, ring_cost(topo, group, bidirectional)
        for rest in itertools.permutations(group[1:]):
            cost = ring_cost(topo, (group[0], *rest), bidirectional)
            if cost < best_cost:
                best, best_cost = (group[0], *rest), cost
        assert exact_ring_order(topo, group, bidirectional) == best
        assert best_ring_order(topo, group, bidirectional) == best  # memoised: the same answer again
        assert best_ring_order(topo, group, bidirectional) == best


def test_ring_order_switch_changes_the_simulated_time():
    topo = get_topology("v5e:2x4")
    # groups listed as zigzags over the two 2x2 squares
    place = placement_from_chips(topo, [(0, 0), (1, 1), (1, 0), (0, 1), (0, 2), (1, 3), (1, 2), (0, 3)])
    b = ProgramBuilder(8)
    b.collective("all-reduce", [[0, 1, 2, 3], [4, 5, 6, 7]], S, algo=PINCER)
    prog = b.build()
    listed = simulate(prog, topo, place).step_seconds
    best = simulate(prog, topo, place, ring_order="best").step_seconds
    assert best < listed * 0.75


def test_best_ring_order_on_16_devices_finds_a_load_one_ring_on_4x4():
    topo = get_topology("v5e:4x4")
    raster = tuple(sorted(topo.positions, key=lambda d: topo.positions[d].chip[::-1]))
    best = best_ring_order(topo, raster, bidirectional=True)
    assert sorted(best) == sorted(raster)
    assert max(ring_link_loads(topo, best, True).values()) == 1  # a Hamiltonian cycle of neighbours
    assert max(ring_link_loads(topo, raster, True).values()) > 1


def test_all_to_all_and_permute_plans():
    topo = get_topology("v5e:2x4")
    place = identity_placement(topo)
    l2p = [int(d) for d in place.device_ids.ravel()]
    b = ProgramBuilder(8)
    a = b.collective("all-to-all", [[0, 1, 2, 3], [4, 5, 6, 7]], S)
    p = b.collective("collective-permute", payload_bytes=S, pairs=[(0, 5), (5, 0), (2, 3)])
    prog = b.build()
    kw = dict(ring_order=RingOrder.LISTED, chunks=4, direction=None, default_direction=RingDirection.BIDIRECTIONAL)
    plan = build_plan(prog.collectives[a], l2p, topo, **kw)
    assert len(plan.src) == 2 * 4 * 3 and all(nb == S / 4 for nb in plan.nbytes)
    assert not any(plan.prereqs)
    plan = build_plan(prog.collectives[p], l2p, topo, **kw)
    assert list(zip(plan.src, plan.dst, strict=True)) == [(l2p[0], l2p[5]), (l2p[5], l2p[0]), (l2p[2], l2p[3])]
    assert set(plan.members) == {l2p[i] for i in (0, 5, 2, 3)}
    assert prog.collectives[a].kind is CollectiveKind.ALL_TO_ALL


ND4 = algorithm("RotatedPincerEmitter", "UniDirectionNDRingStrategy", colors=4,
                debug="\nUniDirectionNDRingStrategy{colors:4 phases:2 cores:{4 4},{4 4},{4 4},{4 4} nophase0:0 "
                      "reserved_sflags:1 has_reordering_map:0 num_dims:2 active_dims:111 dim_sizes:4,4 "
                      "dim_used:{0 1},{1 0},{0 1},{1 0}}")  # printed by libtpu for a 16-device psum on v5e:4x4


def test_nd_ring_strategy_as_libtpu_prints_it():
    nd = nd_layout(ND4, 16)
    assert nd is not None and nd.dim_sizes == (4, 4)
    assert nd.dim_orders == ((0, 1), (1, 0), (0, 1), (1, 0))
    assert ring_direction(ND4) == "bidirectional"


def test_nd_strategy_lines_are_physical_lines_whatever_the_listed_order():
    topo = get_topology("v5e:4x4")
    raster = [(x, y) for y in range(4) for x in range(4)]
    by_column = [(x, y) for x in range(4) for y in range(4)]
    b = ProgramBuilder(16)
    b.collective("all-reduce", [list(range(16))], S, algo=ND4)
    prog = b.build()
    t_raster = simulate(prog, topo, placement_from_chips(topo, raster)).step_seconds
    t_column = simulate(prog, topo, placement_from_chips(topo, by_column)).step_seconds
    assert t_column == pytest.approx(t_raster, rel=1e-9)
    # listed order inside a line matters under ring_order="listed" (a 4-line walked 0,2,1,3 has a
    # 2-hop step), not under "best"
    zig = [(x, y) for y in range(4) for x in (0, 2, 1, 3)]
    place = placement_from_chips(topo, zig)
    t_zig = simulate(prog, topo, place).step_seconds
    assert t_zig > 1.2 * t_raster
    assert simulate(prog, topo, place, ring_order="best").step_seconds == pytest.approx(
        simulate(prog, topo, placement_from_chips(topo, raster), ring_order="best").step_seconds, rel=1e-9)


def test_reordering_map_switch_reorders_only_flagged_collectives():
    topo = get_topology("v5e:2x4")
    place = placement_from_chips(topo, [(0, 0), (1, 1), (1, 0), (0, 1), (0, 2), (1, 3), (1, 2), (0, 3)])  # zigzags
    flagged = algorithm("1DAllGatherNonMajorDim", has_reordering_map=True)
    plain = algorithm("RotatedPincerEmitter", "UniDirection1DRingStrategy", colors=2, has_reordering_map=False)
    times = {}
    for name, algo in (("flagged", flagged), ("plain", plain)):
        b = ProgramBuilder(8)
        b.collective("all-gather", [[0, 1, 2, 3], [4, 5, 6, 7]], S, algo=algo)
        prog = b.build()
        times[name] = {o: simulate(prog, topo, place, ring_order=o).step_seconds
                       for o in ("listed", "best", "reordering-map")}
    assert times["flagged"]["reordering-map"] == times["flagged"]["best"] < times["flagged"]["listed"]
    assert times["plain"]["reordering-map"] == times["plain"]["listed"] > times["plain"]["best"]


def test_simulate_placements_ranks_square_rings_first():
    from aoizora.placement import MeshSpec, enumerate_placements
    from aoizora.sim import simulate_placements

    topo = get_topology("v5e:2x4")
    b = ProgramBuilder(8)
    b.collective("all-reduce", [[0, 1, 2, 3], [4, 5, 6, 7]], S, algo=PINCER)  # over the tp axis
    places = enumerate_placements(topo, MeshSpec.parse("sp=2,tp=4")).placements
    ranked = simulate_placements(b.build(), topo, places)
    assert len(ranked) == len(places)
    times = [r.step_seconds for _, r in ranked]
    assert times == sorted(times)
    best_place = ranked[0][0]
    for row in best_place.device_ids:  # the winner lays each tp group as a 2x2 square ring
        order = tuple(int(d) for d in row)
        assert max(ring_link_loads(topo, order, True).values()) == 1
