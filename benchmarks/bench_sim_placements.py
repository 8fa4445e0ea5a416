"""Simulate every placement of one compiled program, as the bench's oracle and `validate` do.

Where the time went: with ``ring_order="reordering-map"`` (the bench's setting) every all-gather
whose config carries a reordering map gets the best ring order of each of its groups, an exact
search over all 5,040 orders of an 8-member group, costed one order at a time. Three passes, side
by side on the same program and placements:

* ``plain search``: that search as it was (a loop over `itertools.permutations`, each order
  costed by `ring_cost`), for every group of every collective of every simulation;
* ``vectorised``: the library's exact search (all orders costed at once with numpy), still
  searched afresh for every group;
* ``vectorised + memo``: what `simulate` does now — orders memoised per slice, so a program's
  collectives that share groups, and later placements that map a group onto the same chips,
  reuse them (the memo is cleared once before the pass).

All passes must give the same simulated step for every placement (asserted).

Run:  .venv/bin/python benchmarks/bench_sim_placements.py --hlo FILE --mesh data=2,context=8 \\
          [--topology v5e:4x4] [--repeat 3] [--placements N]

``FILE`` is a compiled program's HLO text (e.g. a record of the compile cache,
``~/.cache/aoizora/compiled``); opaque kernels cost ``--opaque-seconds`` each, which changes the
simulated step but not the simulator's work.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time

from aoizora.cost import Q2Options
from aoizora.evaluation.validation.rank import simulator_options
from aoizora.hlo import build_program
from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.sim import algorithms, simulate
from aoizora.topology import get_topology


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hlo", required=True, help="compiled HLO text of the program")
    ap.add_argument("--mesh", required=True, help="the program's mesh, NAME=SIZE,...")
    ap.add_argument("--topology", default="v5e:4x4")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--placements", type=int, default=0, help="simulate only the first N placements (0: all)")
    ap.add_argument("--opaque-seconds", type=float, default=2e-3)
    args = ap.parse_args()
    topo = get_topology(args.topology)
    placements = enumerate_placements(topo, MeshSpec.parse(args.mesh)).placements
    if args.placements:
        placements = placements[: args.placements]
    with open(args.hlo, encoding="utf-8") as fh:
        prog = build_program(fh.read())
    opaque = lambda node: args.opaque_seconds  # noqa: E731
    sim_options = simulator_options(Q2Options())  # the compiler assumptions the bench simulates with
    print(f"program: {len(prog.nodes)} nodes, {len(prog.collectives)} collectives; {len(placements)} placements "
          f"of {args.mesh} on {topo.name}")

    memoised_search = algorithms.best_ring_order
    vectorised_exact = algorithms.exact_ring_order

    def plain_exact(topology, group, bidirectional):  # the search before numpy: one order at a time
        best, best_cost = group, algorithms.ring_cost(topology, group, bidirectional)
        for rest in itertools.permutations(group[1:]):
            cost = algorithms.ring_cost(topology, (group[0], *rest), bidirectional)
            if cost < best_cost:
                best, best_cost = (group[0], *rest), cost
        return best

    def one_pass(mode: str) -> tuple[float, list[float], list[float]]:
        algorithms.clear_ring_order_memo()
        # build_plan and search_ring_order look these up in their module at each call
        algorithms.best_ring_order = memoised_search if mode == "vectorised + memo" else algorithms.search_ring_order
        algorithms.exact_ring_order = plain_exact if mode == "plain search" else vectorised_exact
        per, steps = [], []
        t_all = time.perf_counter()
        for p in placements:
            t0 = time.perf_counter()
            steps.append(simulate(prog, topo, p, opaque_seconds=opaque, **sim_options).step_seconds)
            per.append(time.perf_counter() - t0)
        algorithms.best_ring_order = memoised_search
        algorithms.exact_ring_order = vectorised_exact
        return time.perf_counter() - t_all, per, steps

    modes = ("plain search", "vectorised", "vectorised + memo")
    totals: dict[str, list[float]] = {m: [] for m in modes}
    per_sim: dict[str, list[float]] = {k: [] for k in totals}
    reference = None
    for _ in range(args.repeat):  # interleave the passes so each sees the same machine load
        for name in modes:
            total, per, steps = one_pass(name)
            totals[name].append(total)
            per_sim[name].extend(per)
            if reference is None:
                reference = steps
            assert steps == reference, f"{name}: simulated steps differ"
    base = statistics.median(totals["plain search"])
    for name in totals:
        med = statistics.median(totals[name])
        print(f"{name:18s} all placements: median {med:7.2f} s (min {min(totals[name]):.2f}, n={len(totals[name])}) | "
              f"per simulation: median {statistics.median(per_sim[name]):.3f} s | speed-up {base / med:.2f}x")
    print(f"simulated step (best placement): {min(reference) * 1e3:.1f} ms; identical in every pass")


if __name__ == "__main__":
    main()
