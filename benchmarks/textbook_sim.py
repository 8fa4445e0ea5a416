"""Print the simulator's textbook checks (the ratios `tests/sim/test_textbook.py` asserts).

Run:  .venv/bin/python benchmarks/textbook_sim.py
"""

from __future__ import annotations

import numpy as np

from aoizora.hlo.synthetic import PINCER, UNI_RING, ProgramBuilder, algorithm
from aoizora.placement import MeshSpec, Placement
from aoizora.sim import simulate
from aoizora.topology import Topology, get_topology

S = 2**26


def placement_from_chips(topo: Topology, first: list[tuple[int, ...]]) -> Placement:
    """A 1-axis placement whose first logical devices sit on the chips `first` (in order, core 0),
    the rest by device id."""
    at = {(pos.chip, pos.core): d for d, pos in topo.positions.items()}
    head = [at[(tuple(chip), 0)] for chip in first]
    rest = sorted(d for d in topo.positions if d not in head)
    ids = np.array(head + rest)
    return Placement("textbook", "chips named by the check", MeshSpec.parse(f"all={ids.size}"), ids)


def ag(n_dev, groups, algo, payload=S):
    b = ProgramBuilder(n_dev)
    b.collective("all-gather", groups, payload, algo=algo)
    return b.build()


def main() -> None:
    rows = []
    for name in ("v5e:16x16", "v4:4x4x4"):
        topo = get_topology(name)
        n = topo.shape[0]
        place = placement_from_chips(topo, [(x,) + (0,) * (len(topo.shape) - 1) for x in range(n)])
        w = topo.hardware.link_bandwidth_Bps
        for label, algo in (("bidirectional", PINCER), ("unidirectional", UNI_RING)):
            t = simulate(ag(topo.num_devices, [list(range(n))], algo), topo, place).step_seconds
            expect = (n - 1) / n * (1 if label == "bidirectional" else 2)
            rows.append((f"{name} wrapped axis N={n}, {label} ring all-gather: t / (V/(2W))", expect,
                         t / (n * S / (2 * w))))
    for name, n in (("v5e:4x4", 4), ("v5e:8x16", 8)):
        topo = get_topology(name)
        place = placement_from_chips(topo, [(x, 0) for x in range(n)])
        w = topo.hardware.link_bandwidth_Bps
        for label, algo in (("bidirectional", PINCER), ("unidirectional", UNI_RING)):
            t = simulate(ag(topo.num_devices, [list(range(n))], algo), topo, place).step_seconds
            rows.append((f"{name} open line N={n}, {label} ring all-gather: t / ((N-1)/N*V/W)", 1.0,
                         t / ((n - 1) * S / w)))
    topo = get_topology("v5e:2x4")
    place = placement_from_chips(topo, [(0, 0), (0, 2), (0, 1), (0, 3)])
    rest = [[i] for i in range(4, 8)]
    t1 = simulate(ag(8, [[0, 1], [2], [3]] + rest, PINCER), topo, place).step_seconds
    t2 = simulate(ag(8, [[0, 1], [2, 3]] + rest, PINCER), topo, place).step_seconds
    rows.append(("v5e:2x4 two 2-device groups through one link / one group", 2.0, t2 / t1))
    square = placement_from_chips(topo, [(0, 0), (1, 0), (1, 1), (0, 1), (0, 2), (1, 2), (1, 3), (0, 3)])
    line = placement_from_chips(topo, [(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (1, 2), (1, 3)])
    for kind in ("all-gather", "reduce-scatter", "all-reduce"):
        b = ProgramBuilder(8)
        b.collective(kind, [[0, 1, 2, 3], [4, 5, 6, 7]], S, algo=PINCER)
        p = b.build()
        rows.append((f"v5e:2x4 bidirectional {kind}: 1x4 line / 2x2 square", 2.0,
                     simulate(p, topo, line).step_seconds / simulate(p, topo, square).step_seconds))
    topo = get_topology("v5e:2x4")
    place = placement_from_chips(topo, [(0, 0), (1, 0), (0, 1), (1, 1)])
    b = ProgramBuilder(8)
    b.collective("all-to-all", [[0, 1, 2, 3], [4], [5], [6], [7]], S, algo=algorithm("AllToAllEmitter"))
    t = simulate(b.build(), topo, place).step_seconds
    rows.append(("v5e:2x4 all-to-all on a 2x2 square: t / (S/(2W))", 1.0,
                 t / (S / (2 * topo.hardware.link_bandwidth_Bps))))
    width = max(len(r[0]) for r in rows)
    print(f"{'check':<{width}}  measured  expected")
    for what, expect, ratio in rows:
        print(f"{what:<{width}}  {ratio:8.4f}  {expect:8.4f}")


if __name__ == "__main__":
    main()
