"""The simulator on TPU7x: a D2D link is a link with its own capacity; v4's cores stay free."""

import numpy as np
import pytest

from aoizora.hlo.program import CollectiveKind
from aoizora.hlo.synthetic import ProgramBuilder
from aoizora.placement import MeshSpec, Placement
from aoizora.sim import best_ring_order, simulate
from aoizora.topology import get_topology

MB = 2**20


def _permute(n: int, pairs, nbytes: int):
    b = ProgramBuilder(n)
    b.collective(CollectiveKind.COLLECTIVE_PERMUTE, [], nbytes, pairs=pairs)
    return b.build()


def _identity(topo) -> Placement:
    ids = np.array(sorted(topo.positions))
    return Placement("ids", "device ids in order", MeshSpec(("a",), (len(ids),)), ids)


def test_permute_between_the_cores_of_a_chip_takes_the_d2d_link():
    topo = get_topology("tpu7x:2x2x1")
    hw = topo.chip_hardware
    res = simulate(_permute(8, ((0, 1),), 8 * MB), topo, _identity(topo))  # devices 0, 1: cores of chip (0,0,0)
    assert res.step_seconds == pytest.approx(
        hw.collective_launch_s + 8 * MB / hw.d2d_bandwidth_Bps + hw.hop_latency_s, rel=1e-9)
    used = np.flatnonzero(res.link_bytes)
    assert [topo.links[l].kind for l in used] == ["d2d"]
    cross = simulate(_permute(8, ((0, 2),), 8 * MB), topo, _identity(topo))  # to core 0 of chip (1,0,0)
    assert cross.step_seconds == pytest.approx(
        hw.collective_launch_s + 8 * MB / hw.link_bandwidth_Bps + hw.hop_latency_s, rel=1e-9)


def test_v4_cores_of_a_chip_exchange_at_no_cost():
    topo = get_topology("v4:2x2x2")
    res = simulate(_permute(16, ((0, 1),), 8 * MB), topo, _identity(topo))
    # only the collective's launch: no link, no hop
    assert res.step_seconds == pytest.approx(topo.hardware.collective_launch_s, abs=1e-12)
    assert not res.link_bytes.any()


def test_best_ring_order_counts_a_d2d_hop_at_its_speed():
    """Four devices on chips (0,0,0) and (1,0,0), bidirectional: the best ring crosses ICI only twice."""
    topo = get_topology("tpu7x:2x2x1")
    order = best_ring_order(topo, (0, 2, 1, 3), True)
    crossings = sum(topo.positions[a].chip != topo.positions[b].chip
                    for a, b in zip(order, order[1:] + order[:1], strict=True))
    assert crossings == 2
