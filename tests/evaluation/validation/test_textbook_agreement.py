"""Q2 and the reference simulator on isolated collectives: same textbook results, same ranking."""

import numpy as np
import pytest

from aoizora.cost import CostModel, Q2Options
from aoizora.hlo.program import CollectiveKind
from aoizora.hlo.synthetic import ProgramBuilder
from aoizora.placement import MeshSpec, Placement
from aoizora.sim import simulate
from aoizora.topology import get_topology

MB = 2**20


def placement(topo, shape, chip_order):
    ids = [topo.chip_by_coords[tuple(c)].device_ids[0] for c in chip_order]
    names = tuple(f"a{i}" for i in range(len(shape)))
    return Placement("custom", "test", MeshSpec(names, shape), np.array(ids).reshape(shape))


def one(kind, groups, nbytes, n, pairs=()):
    b = ProgramBuilder(n)
    b.collective(kind, groups, nbytes, pairs=pairs)
    return b.build()


def both(topo, prog, place, direction):
    options = Q2Options(ring_direction=direction, ring_order="listed")
    q2 = CostModel(topo, options).evaluate(prog, place).step_seconds
    sim = simulate(prog, topo, place, ring_direction=options.direction).step_seconds
    return q2, sim


CASES = {
    "wrapped ring all-gather (v5e:16x16 row)": (
        "v5e:16x16", (16, 16), [(x, y) for y in range(16) for x in range(16)],
        lambda: one(CollectiveKind.ALL_GATHER, [tuple(range(r * 16, r * 16 + 16)) for r in range(16)], 4 * MB, 256)),
    "open-line ring all-gather (v5e:4x4 row)": (
        "v5e:4x4", (4, 4), [(x, y) for y in range(4) for x in range(4)],
        lambda: one(CollectiveKind.ALL_GATHER, [tuple(range(r * 4, r * 4 + 4)) for r in range(4)], 8 * MB, 16)),
    "square all-reduce (v5e:2x4)": (
        "v5e:2x4", (2, 4), [(0, 0), (0, 1), (1, 1), (1, 0), (0, 2), (0, 3), (1, 3), (1, 2)],
        lambda: one(CollectiveKind.ALL_REDUCE, [(0, 1, 2, 3), (4, 5, 6, 7)], 16 * MB, 8)),
    "line all-reduce (v5e:2x4)": (
        "v5e:2x4", (2, 4), [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)],
        lambda: one(CollectiveKind.ALL_REDUCE, [(0, 1, 2, 3), (4, 5, 6, 7)], 16 * MB, 8)),
    "two permutes through one link (v5e:2x4)": (
        "v5e:2x4", (4, 2), [(0, 0), (0, 2), (0, 1), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)],
        lambda: one(CollectiveKind.COLLECTIVE_PERMUTE, [], 16 * MB, 8, pairs=((0, 1), (2, 3)))),
}


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("direction", ["bi", "uni"])
def test_q2_matches_simulator_within_5_percent(name, direction):
    topo_name, shape, order, build = CASES[name]
    topo = get_topology(topo_name)
    q2, sim = both(topo, build(), placement(topo, shape, order), direction)
    assert q2 == pytest.approx(sim, rel=0.05), (q2, sim)


def test_square_beats_line_under_both():
    results = {}
    for name in ("square all-reduce (v5e:2x4)", "line all-reduce (v5e:2x4)"):
        topo_name, shape, order, build = CASES[name]
        topo = get_topology(topo_name)
        results[name] = both(topo, build(), placement(topo, shape, order), "bi")
    (q_sq, s_sq), (q_ln, s_ln) = results.values()
    assert q_sq < 0.6 * q_ln and s_sq < 0.6 * s_ln
