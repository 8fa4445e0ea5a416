"""Q2's link queue against fair sharing of shared links, beside the simulator, on one bench cell.

When asynchronous collectives are in flight at once on the same directed links, Q2 lets each link
carry their bytes in turn, in the order they were issued: a small collective issued just after
large ones waits for all of their bytes. The simulator shares every link max-min fairly among the
flows on it, so the small one ends early and the large ones a little later. This script scores
every compiled (strategy, placement) pair of a bench cell three ways — Q2 as shipped, Q2 with each
directed link shared equally among the collectives on it (processor sharing per link, re-solved
whenever a collective starts; a collective ends when its last link has carried its bytes), and the
simulator — and prints each pair, Spearman's ρ of either Q2 against the simulator, and the pair
each one picks.

    .venv/bin/python benchmarks/q2_link_sharing.py docs/data/bench/tuning/cells/v5e-2x2_480p_41f_wan2.1-t2v-14b.json

The cell's file names the strategies and placements; their programs come from the compile cache
(a miss compiles the strategy: minutes for Wan 14B). An expert deployment is compiled with its own
flags, as the bench compiles it.
"""

from __future__ import annotations

import argparse
import json

import numpy as np


class SharedLinks:
    """Directed links each shared equally among the collectives carrying bytes over it.

    Per link: the bytes each collective still has to send and the time up to which that is known.
    A collective's completion is the time its last link has carried its bytes, were nothing else
    to start (then its hop latencies), and no earlier than its time alone; it is asked again at its
    done node, after later collectives have joined its links. Same interface as Q2's link queue.
    """

    def __init__(self, loads: list[np.ndarray], latencies: list[float], bandwidth_Bps: np.ndarray):
        self.loads = loads
        self.latencies = latencies
        self.bandwidth = bandwidth_Bps
        size = loads[0].size if loads else 0
        self.known_until = np.zeros(size)
        self.remaining: list[dict[int, float]] = [{} for _ in range(size)]
        self.started: dict[int, tuple[float, float]] = {}  # collective -> (start, seconds alone)

    def _advance(self, link: int, t: float) -> None:
        """Drain `link` up to time `t`: its bandwidth split equally among the collectives on it."""
        flows = self.remaining[link]
        while flows and self.known_until[link] < t:
            smallest = min(flows.values())
            step = smallest * len(flows) / self.bandwidth[link]
            if self.known_until[link] + step <= t:
                for c in list(flows):
                    flows[c] -= smallest
                    if flows[c] <= 1e-9 * smallest:
                        del flows[c]
                self.known_until[link] += step
            else:
                sent = (t - self.known_until[link]) * self.bandwidth[link] / len(flows)
                for c in flows:
                    flows[c] -= sent
                self.known_until[link] = t
        self.known_until[link] = max(self.known_until[link], t)

    def _link_done(self, link: int, collective: int) -> float:
        """When `link` will have carried `collective`'s bytes if no other collective joins it."""
        flows = self.remaining[link]
        if collective not in flows:
            return self.known_until[link]
        mine = flows[collective]
        t, sent = self.known_until[link], 0.0
        for k, r in enumerate(sorted(flows.values())):
            t += (r - sent) * (len(flows) - k) / self.bandwidth[link]
            sent = r
            if r >= mine:
                break
        return t

    def _completion(self, collective: int) -> float:
        start, alone = self.started[collective]
        used = np.nonzero(self.loads[collective] > 0)[0]
        if not used.size:
            return start + alone
        last = max(self._link_done(int(link), collective) for link in used)
        return max(start + alone, last + self.latencies[collective])

    def run(self, collective: int | None, start: float, alone_seconds: float) -> float:
        if collective is None or not self.known_until.size:
            return start + alone_seconds
        self.started[collective] = (start, alone_seconds)
        loads = self.loads[collective]
        for link in np.nonzero(loads > 0)[0]:
            self._advance(int(link), start)
            flows = self.remaining[int(link)]
            flows[collective] = flows.get(collective, 0.0) + float(loads[link])
        return self._completion(collective)

    def finish(self, collective: int | None, recorded: float) -> float:
        if collective is None or collective not in self.started:
            return recorded
        return self._completion(collective)

    def shift(self, after: float, by: float) -> None:
        """A loop's remaining iterations were added at `after`: later link states move with them."""
        self.known_until = np.where(self.known_until > after, self.known_until + by, self.known_until)
        self.started = {c: (s + by if s > after else s, a) for c, (s, a) in self.started.items()}


def shared_links_model(topology):
    """Q2 for `topology` with `SharedLinks` in place of its link queue."""
    from aoizora.cost import CostModel

    class SharedLinksCostModel(CostModel):
        link_sharing = SharedLinks

    return SharedLinksCostModel(topology)


def main() -> None:
    from scipy.stats import spearmanr

    from aoizora.cost import CostModel, Q2Options
    from aoizora.evaluation.validation.rank import simulator_options
    from aoizora.models.registry import wan_space
    from aoizora.placement import enumerate_placements
    from aoizora.plan.planner import expert_entries
    from aoizora.sim import simulate
    from aoizora.stage2 import compile_strategy, default_compile_cache
    from aoizora.toolchain import environment_flags
    from aoizora.topology import get_topology

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cell", help="a bench cell's JSON (cells/*.json of a bench output directory)")
    args = ap.parse_args()
    with open(args.cell) as f:
        cell = json.load(f)
    if cell.get("libtpu_args"):
        raise SystemExit(f"{args.cell}: the cell was run with --libtpu-args; run this script on a cell without them")
    c = cell["cell"]
    topo = get_topology(c["topology"])
    space = wan_space(c["model"], c["resolution"], c["frames"], generation=topo.generation)
    compilable = {k.key: (k.strategy, None) for k in space.candidates(topo.num_devices)}
    compilable.update({e.key: (e.deployment.strategy, e.flags)
                       for e in expert_entries(space, topo, environment_flags())})
    wanted: dict[str, set[str]] = {}
    for pair in cell["pairs"]:
        wanted.setdefault(pair["strategy"], set()).add(pair["placement"])
    missing = sorted(set(wanted) - set(compilable))
    if missing:
        raise SystemExit(f"{args.cell}: strategies this code cannot build: {missing}; use a cell of the current models")

    cost_model = CostModel(topo, Q2Options())
    shared_model = shared_links_model(topo)
    rows = []
    for key in sorted(wanted):
        strategy, flags = compilable[key]
        placements = [p for p in enumerate_placements(topo, space.mesh_spec(strategy)).placements
                      if p.name in wanted[key]]
        program = compile_strategy(space, strategy, key, topo, placements[0], None, default_compile_cache(),
                                   flags=flags).program
        for placement in placements:
            in_turn = cost_model.evaluate(program, placement).step_seconds
            shared = shared_model.evaluate(program, placement).step_seconds
            sim = simulate(program, topo, placement, **simulator_options(Q2Options())).step_seconds
            rows.append((key, placement.name, in_turn, shared, sim))

    print(f"{topo.name} {c['resolution']} {c['frames']}f {c['model']}: {len(rows)} pairs")
    print(f"{'Q2 in turn':>11} {'Q2 shared':>10} {'simulator':>10}  (ms per step)  strategy @ placement")
    for key, name, in_turn, shared, sim in sorted(rows, key=lambda r: r[4]):
        print(f"{in_turn * 1e3:11.1f} {shared * 1e3:10.1f} {sim * 1e3:10.1f}  {key} @ {name}")
    sims = [r[4] for r in rows]
    for label, column in (("Q2 in turn", 2), ("Q2 shared", 3)):
        values = [r[column] for r in rows]
        worst = max(abs(v / s - 1) for v, s in zip(values, sims, strict=True))
        pick = min(rows, key=lambda r: r[column])
        print(f"{label}: Spearman ρ with the simulator {spearmanr(values, sims).statistic:.3f}, "
              f"worst |Q2/sim - 1| {worst * 100:.1f} %, picks {pick[0]} @ {pick[1]} "
              f"({pick[4] * 1e3:.1f} ms simulated)")
    best = min(rows, key=lambda r: r[4])
    print(f"simulator picks {best[0]} @ {best[1]} ({best[4] * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
