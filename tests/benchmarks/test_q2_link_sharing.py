"""benchmarks/q2_link_sharing.py: fair sharing of a link in closed form, and inside Q2's schedule
against the simulator (without compiling)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from aoizora.cost import CostModel
from aoizora.hlo.program import CollectiveKind
from aoizora.hlo.synthetic import ProgramBuilder
from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.topology import get_topology

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

from q2_link_sharing import SharedLinks, shared_links_model  # noqa: E402

MB = 2**20


def one_link(*loads: float) -> SharedLinks:
    """Collectives with the given bytes on a single link of 1 byte/s, no latency."""
    return SharedLinks([np.array([b]) for b in loads], [0.0] * len(loads), np.array([1.0]))


def test_collectives_issued_together_end_in_order_of_their_bytes():
    links = one_link(10.0, 2.0)
    links.run(0, 0.0, 0.0)
    assert links.run(1, 0.0, 0.0) == pytest.approx(4.0)  # two flows at half the rate each
    assert links.finish(0, 0.0) == pytest.approx(12.0)  # then alone: the link stays busy


def test_a_later_collective_shares_what_is_left():
    links = one_link(10.0, 2.0)
    assert links.run(0, 0.0, 0.0) == pytest.approx(10.0)
    assert links.run(1, 5.0, 0.0) == pytest.approx(9.0)  # 5 bytes of the first left at t = 5
    assert links.finish(0, 10.0) == pytest.approx(12.0)


def test_a_collective_never_ends_before_its_time_alone():
    links = one_link(1.0)
    assert links.run(0, 0.0, 3.0) == pytest.approx(3.0)


def test_small_collective_behind_a_large_one_on_shared_links_like_the_simulator():
    from aoizora.sim import simulate

    topo = get_topology("v5e:2x2")
    place = enumerate_placements(topo, MeshSpec.parse("a=4")).placements[0]
    ring = ((0, 1), (1, 0), (2, 3), (3, 2))
    b = ProgramBuilder(4)
    large = b.start(CollectiveKind.COLLECTIVE_PERMUTE, [(0, 1, 2, 3)], 64 * MB, pairs=ring)
    small = b.start(CollectiveKind.COLLECTIVE_PERMUTE, [(0, 1, 2, 3)], 4 * MB, pairs=ring)
    b.done(small)
    b.compute(flops=2e11)  # about as long as the large permute: it could hide the large one
    b.done(large)
    program = b.build()
    cost_model = CostModel(topo)
    in_turn = cost_model.evaluate(program, place).step_seconds
    shared = shared_links_model(topo).evaluate(program, place).step_seconds
    simulated = simulate(program, topo, place).step_seconds
    assert shared == pytest.approx(simulated, rel=0.05)
    assert in_turn > 1.2 * simulated  # the small permute waited for the large one's bytes
