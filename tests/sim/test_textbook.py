"""The simulator against textbook collective costs on isolated collectives.

Tolerances: bandwidth terms are exact in a fluid model, so the measured time may exceed the
textbook figure only by the per-hop latency of each ring step (payloads are chosen so that
this is < 0.5%); each assertion states its band.
"""

import pytest
from simhelpers import device_at, identity_placement, placement_from_chips

from aoizora.hlo.synthetic import PINCER, UNI_RING, ProgramBuilder, algorithm
from aoizora.sim import simulate
from aoizora.topology import get_topology

S = 2**26  # 64 MiB per device: latency (~1 us per hop) is noise next to ~ms transfers


def _all_gather(n_devices, group, algo, payload=S):
    b = ProgramBuilder(n_devices)
    b.collective("all-gather", [group], payload, algo=algo)
    return b.build()


@pytest.mark.parametrize("topo_name", ["v5e:16x16", "v4:4x4x4"])
def test_bidirectional_all_gather_on_a_wrapped_axis_is_V_over_2W(topo_name):
    topo = get_topology(topo_name)
    assert topo.wrap[0]
    n = topo.shape[0]
    chips = [(x,) + (0,) * (len(topo.shape) - 1) for x in range(n)]
    place = placement_from_chips(topo, chips)
    res = simulate(_all_gather(topo.num_devices, list(range(n)), PINCER), topo, place)
    w = topo.hardware.link_bandwidth_Bps
    v = n * S
    textbook = v / (2 * w)
    exact = (n - 1) / n * textbook  # the ring moves N-1 of N shards
    assert res.step_seconds / exact == pytest.approx(1.0, abs=0.005)
    assert 0.70 <= res.step_seconds / textbook <= 1.0
    # a unidirectional ring on the same axis uses one direction only: twice as slow
    uni = simulate(_all_gather(topo.num_devices, list(range(n)), UNI_RING), topo, place)
    assert uni.step_seconds / res.step_seconds == pytest.approx(2.0, rel=0.01)


@pytest.mark.parametrize("algo", [PINCER, UNI_RING], ids=["bidirectional", "unidirectional"])
@pytest.mark.parametrize("topo_name, n", [("v5e:4x4", 4), ("v5e:8x16", 8)])
def test_all_gather_on_an_open_line_is_n_minus_1_over_n_V_over_W(topo_name, n, algo):
    topo = get_topology(topo_name)
    assert not topo.wrap[0]
    chips = [(x, 0) for x in range(n)]
    place = placement_from_chips(topo, chips)
    res = simulate(_all_gather(topo.num_devices, list(range(n)), algo), topo, place)
    w = topo.hardware.link_bandwidth_Bps
    expected = (n - 1) / n * (n * S) / w
    assert res.step_seconds / expected == pytest.approx(1.0, abs=0.005)


def test_two_groups_forced_through_one_link_take_twice_as_long():
    topo = get_topology("v5e:2x4")
    # group A: (0,0)<->(0,2) and group B: (0,1)<->(0,3) both cross the link (0,1)->(0,2) (both ways)
    place = placement_from_chips(topo, [(0, 0), (0, 2), (0, 1), (0, 3)])
    rest = [[i] for i in range(4, 8)]
    one = ProgramBuilder(8)
    one.collective("all-gather", [[0, 1], [2], [3]] + rest, S, algo=PINCER)
    two = ProgramBuilder(8)
    two.collective("all-gather", [[0, 1], [2, 3]] + rest, S, algo=PINCER)
    t1 = simulate(one.build(), topo, place).step_seconds
    res2 = simulate(two.build(), topo, place)
    assert res2.step_seconds / t1 == pytest.approx(2.0, rel=0.01)
    shared = topo.link_index[((0, 1), (0, 2))]
    assert res2.link_bytes[shared] == pytest.approx(2 * S)  # each group sends its whole shard across it


def _ring_program(kind, algo):
    b = ProgramBuilder(8)
    b.collective(kind, [[0, 1, 2, 3], [4, 5, 6, 7]], S, algo=algo)
    return b.build()


@pytest.mark.parametrize("kind", ["all-gather", "all-reduce", "reduce-scatter"])
def test_a_4_chip_ring_as_a_2x2_square_beats_a_1x4_line(kind):
    topo = get_topology("v5e:2x4")
    square = placement_from_chips(topo, [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2), (1, 3), (0, 3)])
    line = placement_from_chips(topo, [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)])
    prog = _ring_program(kind, PINCER)
    t_square = simulate(prog, topo, square).step_seconds
    t_line = simulate(prog, topo, line).step_seconds
    assert t_square < t_line
    # bidirectional: the square's directed links carry one hop each, the line's two (closing hop)
    assert t_line / t_square == pytest.approx(2.0, rel=0.02)


def test_all_reduce_is_reduce_scatter_plus_all_gather():
    topo = get_topology("v5e:2x4")
    place = identity_placement(topo)
    times = {k: simulate(_ring_program(k, PINCER), topo, place).step_seconds
             for k in ("all-reduce", "reduce-scatter")}
    b = ProgramBuilder(8)
    b.collective("all-gather", [[0, 1, 2, 3], [4, 5, 6, 7]], S // 4, algo=PINCER)
    t_ag = simulate(b.build(), topo, place).step_seconds
    assert times["all-reduce"] == pytest.approx(times["reduce-scatter"] + t_ag, rel=0.01)


def test_all_to_all_on_a_2x2_square_matches_hand_count():
    topo = get_topology("v5e:2x4")
    place = placement_from_chips(topo, [(0, 0), (1, 0), (0, 1), (1, 1)])
    b = ProgramBuilder(8)
    b.collective("all-to-all", [[0, 1, 2, 3], [4], [5], [6], [7]], S, algo=algorithm("AllToAllEmitter"))
    res = simulate(b.build(), topo, place)
    w = topo.hardware.link_bandwidth_Bps
    # 12 direct flows of S/4; dimension-order routing puts exactly 2 on every directed link of the
    # square, so each flow gets W/2: S/4 / (W/2) = S/(2W), plus at most 2 hops of latency.
    launch = topo.hardware.collective_launch_s
    assert res.step_seconds == pytest.approx(launch + S / (2 * w) + 2 * topo.hardware.hop_latency_s, rel=1e-6)
    # bytes on links: 8 one-hop flows and 4 two-hop (diagonal) flows of S/4 each
    assert res.link_bytes.sum() == pytest.approx((8 + 4 * 2) * S / 4)


def test_collective_permute_shift_on_a_line_and_a_shared_link():
    topo = get_topology("v5e:2x4")
    line = [(0, 0), (0, 1), (0, 2), (0, 3)]
    place = placement_from_chips(topo, line)
    w, lat = topo.hardware.link_bandwidth_Bps, topo.hardware.hop_latency_s
    launch = topo.hardware.collective_launch_s
    shift = ProgramBuilder(8)
    shift.collective("collective-permute", payload_bytes=S, pairs=[(i, (i + 1) % 4) for i in range(4)])
    res = simulate(shift.build(), topo, place)
    # the closing pair 3->0 runs back over the reverse links: no link is shared
    assert res.step_seconds == pytest.approx(launch + S / w + 3 * lat, rel=1e-9)
    both = ProgramBuilder(8)
    both.collective("collective-permute", payload_bytes=S, pairs=[(0, 2), (1, 3)])  # share (0,1)->(0,2)
    res2 = simulate(both.build(), topo, place)
    assert res2.step_seconds == pytest.approx(launch + 2 * S / w + 2 * lat, rel=1e-9)


def test_two_cores_of_one_chip_exchange_without_links():
    topo = get_topology("v4:2x2x2")
    a, b_ = device_at(topo, (0, 0, 0), 0), device_at(topo, (0, 0, 0), 1)
    ids = [a, b_] + sorted(d for d in topo.positions if d not in (a, b_))
    import numpy as np

    from aoizora.placement import MeshSpec, Placement

    place = Placement("cores", "", MeshSpec.parse(f"all={len(ids)}"), np.array(ids))
    b = ProgramBuilder(topo.num_devices)
    b.collective("all-gather", [[0, 1]], S, algo=PINCER)
    res = simulate(b.build(), topo, place)
    assert res.step_seconds == pytest.approx(topo.hardware.collective_launch_s)  # only the launch
    assert res.link_bytes.sum() == 0.0


def test_nd_strategy_runs_one_ring_per_dimension():
    topo = get_topology("v5e:4x4")
    place = identity_placement(topo)
    nd = algorithm("RotatedPincerShortEmitter", "StrategyND", colors=2,
                   debug="\nStrategyND{colors:2 phases:2 cores:{4 4},{4 4} nophase0:0 num_dims:2 "
                         "active_dims:111 dim_sizes:4,4 dim_used:{0 1},{1 0} use_ndnway:0}")
    b = ProgramBuilder(16)
    b.collective("all-reduce", [list(range(16))], S, algo=nd)
    res = simulate(b.build(), topo, place)
    assert "nd(4, 4)" in res.collectives[0].algorithm
    w = topo.hardware.link_bandwidth_Bps
    # each color (S/2) reduce-scatters over a 4-line (3 steps of D/4), then the other 4-line
    # (3 steps of D/16), then all-gathers back; a bidirectional ring on an open 4-line moves
    # step_bytes per step at W; the two colors use disjoint dimensions in every phase.
    d = S / 2
    expected = 2 * (3 * d / 4 + 3 * d / 16) / w
    assert (res.step_seconds - topo.hardware.collective_launch_s) / expected == pytest.approx(1.0, abs=0.01)
