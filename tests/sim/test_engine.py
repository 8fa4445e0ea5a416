"""Scheduling, loops, costs, determinism and input checks of the simulator."""

import numpy as np
import pytest
from simhelpers import identity_placement

from aoizora.errors import AoizoraError, SimulationError
from aoizora.hlo.synthetic import PINCER, UNI_RING, ProgramBuilder, algorithm
from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.sim import max_min_rates, simulate
from aoizora.topology import get_topology

S = 2**24


@pytest.fixture(scope="module")
def topo():
    return get_topology("v5e:2x4")


def _comm_time(topo, place):
    b = ProgramBuilder(8)
    b.collective("all-gather", [[0, 1, 2, 3], [4, 5, 6, 7]], S, algo=PINCER)
    return simulate(b.build(), topo, place).step_seconds


def test_max_min_progressive_filling_textbook_case():
    # links 0,1 of capacity 1; flow a uses 0 and 1, b uses 0, c uses 1, d uses link 2 (capacity 10)
    rates = max_min_rates([(0, 1), (0,), (1,), (2,)], np.array([1.0, 1.0, 10.0]))
    assert rates.tolist() == pytest.approx([0.5, 0.5, 0.5, 10.0])
    # unequal: link 0 capacity 1 shared by a,b; b also on link 1 of capacity 3 with c -> c gets 2.5
    rates = max_min_rates([(0,), (0, 1), (1,)], np.array([1.0, 3.0]))
    assert rates.tolist() == pytest.approx([0.5, 0.5, 2.5])


@pytest.mark.parametrize("factor", [2.0, 0.5])
def test_async_collective_overlaps_compute_and_sync_does_not(topo, factor):
    place = identity_placement(topo)
    comm = _comm_time(topo, place)
    work = factor * comm
    a = ProgramBuilder(8)
    c = a.start("all-gather", [[0, 1, 2, 3], [4, 5, 6, 7]], S, algo=PINCER)
    a.compute(work)
    a.done(c)
    res_async = simulate(a.build(), topo, place)
    s = ProgramBuilder(8)
    s.collective("all-gather", [[0, 1, 2, 3], [4, 5, 6, 7]], S, algo=PINCER)
    s.compute(work)
    res_sync = simulate(s.build(), topo, place)
    assert res_async.step_seconds == pytest.approx(max(work, comm), rel=1e-9)
    assert res_async.exposed_comm_seconds == pytest.approx(max(0.0, comm - work), rel=1e-6, abs=1e-12)
    assert res_sync.step_seconds == pytest.approx(comm + work, rel=1e-9)
    assert res_sync.exposed_comm_seconds == pytest.approx(comm, rel=1e-9)
    assert res_async.collectives[0].mean_seconds == pytest.approx(comm, rel=1e-9)
    assert res_sync.collectives[0].wait_seconds == pytest.approx(comm, rel=1e-9)


def test_compute_cost_sources(topo):
    place = identity_placement(topo)
    hw = topo.hardware
    b = ProgramBuilder(8)
    b.compute(seconds=1e-3, cycles=10**9)  # seconds win
    b.compute(cycles=3 * 10**6)  # cycles / clock
    b.compute(flops=hw.peak_bf16_flops * 2e-3, hbm_bytes=int(hw.hbm_bandwidth_Bps * 1e-3))  # compute-bound
    b.compute(flops=1.0, hbm_bytes=int(hw.hbm_bandwidth_Bps * 4e-3))  # memory-bound
    b.compute(name="splash", opaque=True)
    b.compute(name="other", opaque=True)
    prog = b.build()
    res = simulate(prog, topo, place, opaque_seconds={"splash": 5e-3})
    expected = 1e-3 + 3e6 / hw.clock_hz + 2e-3 + 4e-3 + 5e-3
    assert res.step_seconds == pytest.approx(expected, rel=1e-6)
    assert res.compute_seconds == pytest.approx(expected, rel=1e-6)
    assert any("opaque" in w and "other" in w for w in res.warnings)
    res2 = simulate(prog, topo, place, opaque_seconds=lambda n: 1e-3 if n.name == "other" else None)
    assert res2.step_seconds == pytest.approx(expected - 5e-3 + 1e-3, rel=1e-6)


def _layered(trip, n=8, groups=((0, 1, 2, 3), (4, 5, 6, 7)), work=2e-4, hide=0.25):
    b = ProgramBuilder(n)
    b.compute(1e-4)
    with b.loop(trip):
        c = b.start("all-gather", [list(range(n))], S // 8, algo=PINCER)
        b.compute(work)
        b.done(c)
        b.collective("all-reduce", groups, S // 4, algo=PINCER)
        b.compute(work / 2)
        b.collective("all-to-all", groups, S // 8, algo=algorithm("AllToAllEmitter"))
        p = b.start("collective-permute", payload_bytes=S // 16, pairs=[(i, (i + 1) % n) for i in range(n)])
        b.compute(work * hide)
        b.done(p)
    b.compute(1e-4)
    return b.build()


def test_loop_body_runs_trip_count_times(topo):
    place = identity_placement(topo)
    one = simulate(_layered(1), topo, place, extrapolate_loops=False)
    many = simulate(_layered(7), topo, place, extrapolate_loops=False)
    per_iter = one.step_seconds - 2e-4
    # devices leave an iteration a few hop latencies apart, so later iterations may start their
    # collectives slightly staggered: equal to 1%, not exactly
    assert many.step_seconds == pytest.approx(2e-4 + 7 * per_iter, rel=0.01)
    assert many.compute_seconds == pytest.approx(2e-4 + 7 * (one.compute_seconds - 2e-4), rel=1e-9)
    assert [c.runs for c in many.collectives] == [7, 7, 7, 7]
    np.testing.assert_allclose(many.link_bytes, 7 * one.link_bytes)


@pytest.mark.parametrize("hide", [0.25, 20.0], ids=["exposed-permute", "hidden-permute"])
@pytest.mark.parametrize("placement_name", ["first", "last"])
def test_loop_extrapolation_equals_walking_every_iteration(topo, placement_name, hide):
    # hidden-permute: the permute finishes while devices still compute before its done, so the
    # iterations are skipped with devices parked between a start and its done
    places = enumerate_placements(topo, MeshSpec.parse("sp=2,tp=4")).placements
    place = places[0] if placement_name == "first" else places[-1]
    prog = _layered(40, hide=hide)
    full = simulate(prog, topo, place, extrapolate_loops=False)
    fast = simulate(prog, topo, place, extrapolate_loops=True)
    assert fast.loops_extrapolated and sum(fast.loops_extrapolated.values()) > 30
    assert fast.events < full.events / 5
    assert fast.step_seconds == pytest.approx(full.step_seconds, rel=1e-9)
    assert fast.compute_seconds == pytest.approx(full.compute_seconds, rel=1e-9)
    np.testing.assert_allclose(fast.link_bytes, full.link_bytes, rtol=1e-9)
    for a, b in zip(fast.collectives, full.collectives, strict=True):
        assert a.runs == b.runs == 40
        assert a.total_seconds == pytest.approx(b.total_seconds, rel=1e-9)
        assert a.wait_seconds == pytest.approx(b.wait_seconds, rel=1e-9, abs=1e-15)


def test_nested_loops(topo):
    place = identity_placement(topo)
    b = ProgramBuilder(8)
    with b.loop(5):
        with b.loop(3):
            b.collective("all-reduce", [[0, 1, 2, 3], [4, 5, 6, 7]], S // 8, algo=PINCER)
            b.compute(1e-4)
        b.compute(2e-4)
    prog = b.build()
    full = simulate(prog, topo, place, extrapolate_loops=False)
    fast = simulate(prog, topo, place)
    assert full.collectives[0].runs == fast.collectives[0].runs == 15
    assert fast.step_seconds == pytest.approx(full.step_seconds, rel=1e-9)
    assert full.compute_seconds == pytest.approx(15 * 1e-4 + 5 * 2e-4)


def test_simulation_is_deterministic():
    topo = get_topology("v5e:4x4")
    place = enumerate_placements(topo, MeshSpec.parse("sp=4,tp=4")).placements[-1]
    groups = [list(range(i, i + 4)) for i in range(0, 16, 4)]
    b = ProgramBuilder(16)
    with b.loop(6):
        c = b.start("all-gather", [list(range(16))], S // 16, algo=PINCER)
        b.compute(1e-4)
        b.done(c)
        b.collective("all-reduce", groups, S // 4, algo=UNI_RING)
        b.collective("all-to-all", [list(range(i, 16, 4)) for i in range(4)], S // 4)
    prog = b.build()
    runs = [simulate(prog, topo, place) for _ in range(2)]
    assert runs[0].step_seconds == runs[1].step_seconds
    assert np.array_equal(runs[0].link_bytes, runs[1].link_bytes)
    assert runs[0].collectives == runs[1].collectives
    assert runs[0].events == runs[1].events


def test_placement_of_another_topology_is_rejected(topo):
    other = get_topology("v5e:4x4")
    place = identity_placement(other)
    b = ProgramBuilder(8)
    b.compute(1e-3)
    with pytest.raises(SimulationError, match="does not match topology"):
        simulate(b.build(), topo, place)


def test_program_with_more_devices_than_the_placement_is_rejected(topo):
    place = identity_placement(topo)
    b = ProgramBuilder(16)
    b.collective("all-reduce", [list(range(16))], S)
    with pytest.raises(SimulationError, match="runs on 16 devices but placement") as info:
        simulate(b.build(), topo, place)
    assert isinstance(info.value, AoizoraError)


def test_collective_naming_unknown_devices_and_bad_options_are_rejected(topo):
    place = identity_placement(topo)
    b = ProgramBuilder(8)
    b.collective("all-gather", [[0, 9]], S)
    with pytest.raises(SimulationError, match="logical device 9"):
        simulate(b.build(), topo, place)
    ok = ProgramBuilder(8)
    ok.compute(1e-3)
    with pytest.raises(SimulationError, match="ring_order"):
        simulate(ok.build(), topo, place, ring_order="shortest")
    with pytest.raises(SimulationError, match="chunks"):
        simulate(ok.build(), topo, place, chunks=0)


def test_unknown_trip_count_needs_a_default(topo):
    place = identity_placement(topo)
    b = ProgramBuilder(8)
    with b.loop(3):
        b.compute(1e-3)
    prog = b.build()
    prog.loops[0].trip_count = None
    with pytest.raises(SimulationError, match="trip count"):
        simulate(prog, topo, place)
    res = simulate(prog, topo, place, default_trip_count=2)
    assert res.step_seconds == pytest.approx(2e-3)
    assert res.warnings


def test_chunks_pipeline_ring_steps(topo):
    # A 4-ring laid as a line (closing step: 3 hops). Without chunking a device forwards a step
    # only after the whole step arrived, so every step pays its hop latency on the critical path
    # (the shard crossing the 3-hop closing link, then two 1-hop steps: 5 latencies). With chunks
    # the next step's first chunk leaves while later chunks are still arriving.
    place = identity_placement(topo)
    w, lat = topo.hardware.link_bandwidth_Bps, topo.hardware.hop_latency_s
    launch = topo.hardware.collective_launch_s
    s = 2**18  # 3 steps of ~5.8 us each: latency matters
    b = ProgramBuilder(8)
    b.collective("all-gather", [[0, 2, 4, 6], [1, 3, 5, 7]], s, algo=UNI_RING)
    prog = b.build()
    bandwidth = 3 * s / w
    t1 = simulate(prog, topo, place, chunks=1).step_seconds
    t4 = simulate(prog, topo, place, chunks=4).step_seconds
    assert t1 == pytest.approx(launch + bandwidth + 5 * lat, rel=1e-9)
    assert launch + bandwidth + 3 * lat - 1e-12 <= t4 < t1 - lat
    big = ProgramBuilder(8)
    big.collective("all-gather", [[0, 2, 4, 6], [1, 3, 5, 7]], S, algo=UNI_RING)
    b1 = simulate(big.build(), topo, place, chunks=1).step_seconds
    b8 = simulate(big.build(), topo, place, chunks=8).step_seconds
    assert b8 == pytest.approx(b1, rel=0.01)  # bandwidth-bound: chunking changes only latency


def test_extrapolation_skips_while_devices_sit_between_start_and_done(topo):
    # the only quiescent moments are when the all-gather finishes under the compute, i.e. with
    # every device between the start and the done of a finished run
    place = identity_placement(topo)
    b = ProgramBuilder(8)
    with b.loop(12):
        c = b.start("all-gather", [[0, 1, 2, 3], [4, 5, 6, 7]], S // 4, algo=PINCER)
        b.compute(5e-3)
        b.done(c)
    prog = b.build()
    fast = simulate(prog, topo, place)
    full = simulate(prog, topo, place, extrapolate_loops=False)
    assert fast.loops_extrapolated.get(0, 0) >= 9
    assert fast.step_seconds == pytest.approx(full.step_seconds, rel=1e-12) == pytest.approx(12 * 5e-3)
    assert fast.collectives[0].runs == 12
    np.testing.assert_allclose(fast.link_bytes, full.link_bytes, rtol=1e-12)


def test_empty_replica_groups_mean_all_devices(topo):
    place = identity_placement(topo)
    empty = ProgramBuilder(8)
    empty.collective("all-reduce", [], S, algo=PINCER)
    full = ProgramBuilder(8)
    full.collective("all-reduce", [list(range(8))], S, algo=PINCER)
    t_empty = simulate(empty.build(), topo, place).step_seconds
    assert t_empty > 0
    assert t_empty == simulate(full.build(), topo, place).step_seconds


def test_program_on_fewer_devices_uses_the_first_placement_positions(topo):
    place = identity_placement(topo)
    b = ProgramBuilder(4)
    b.collective("all-gather", [[0, 1, 2, 3]], S, algo=PINCER)
    res = simulate(b.build(), topo, place)
    assert set(res.device_finish_seconds) == {int(d) for d in place.device_ids.ravel()[:4]}
    used = {l for l, nb in enumerate(res.link_bytes) if nb > 0}
    chips = {topo.positions[int(d)].chip for d in place.device_ids.ravel()[:4]}
    assert all(topo.links[l].src in chips and topo.links[l].dst in chips for l in used)


def test_collective_without_traffic_costs_nothing_and_keeps_loops_extrapolable(topo):
    place = identity_placement(topo)
    b = ProgramBuilder(8)
    with b.loop(20):
        b.collective("collective-permute", payload_bytes=S, pairs=[])  # no pair: no member
        b.compute(1e-4)
        b.collective("all-gather", [[i] for i in range(8)], S, algo=PINCER)  # groups of one
        b.compute(1e-4)
    res = simulate(b.build(), topo, place)
    assert res.step_seconds == pytest.approx(20 * 2e-4)
    assert res.link_bytes.sum() == 0
    assert [c.runs for c in res.collectives] == [20, 20]
    assert res.loops_extrapolated


def test_every_collective_run_pays_the_launch_cost(topo):
    # identity placement on v5e:2x4: devices 0 and 1 are neighbours (one hop)
    from aoizora.cost import CostModel

    place = identity_placement(topo)
    hw = topo.hardware
    one = ProgramBuilder(8)
    one.collective("collective-permute", payload_bytes=64, pairs=[(0, 1)])
    t1 = simulate(one.build(), topo, place).step_seconds
    assert t1 == pytest.approx(hw.collective_launch_s + 64 / hw.link_bandwidth_Bps + hw.hop_latency_s, rel=1e-9)
    # Q2 charges the same fixed cost: on a lone one-hop permute the two models agree exactly
    assert CostModel(topo).evaluate(one.build(), place).step_seconds == pytest.approx(t1, rel=1e-9)
    two = ProgramBuilder(8)
    two.collective("collective-permute", payload_bytes=64, pairs=[(0, 1)])
    two.collective("collective-permute", payload_bytes=64, pairs=[(0, 1)])
    assert simulate(two.build(), topo, place).step_seconds == pytest.approx(2 * t1, rel=1e-9)
