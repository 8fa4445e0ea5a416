"""Q1's `overlap` modes against the simulated best placement of each strategy a bench cell compiled.

    .venv/bin/python benchmarks/q1_overlap_check.py CELL.json [CELL.json ...]

For each `aoizora bench` cell: lowers every strategy Stage 1 ranked (no compile), computes Q1
under `"prefetch"` and `"async"`, and prints the Stage 1 rank of the strategy with the best
simulated latency (among the strategies the cell compiled: all of them in a full-oracle cell) and
Spearman's rho of Q1 against the simulated best over the compiled strategies.
"""
import json
import math
import sys

from scipy.stats import spearmanr

from aoizora.models.registry import wan_space
from aoizora.stage1.q1 import q1
from aoizora.stage1.search import analyse
from aoizora.topology import get_topology

MODES = ("prefetch", "async")


def check(path: str) -> None:
    cell = json.load(open(path))
    c = cell["cell"]
    topo = get_topology(c["topology"])
    space = wan_space(c["model"], c["resolution"], c["frames"], generation=topo.generation)
    cands = {x.key: x.strategy for x in space.candidates(topo.num_devices)}
    best: dict[str, float] = {}
    for p in cell["pairs"]:
        best[p["strategy"]] = min(best.get(p["strategy"], math.inf), p["sim_seconds"])
    rows = []
    for key in cell["stage1"]["ranks"]:
        pred, *_ = analyse(space, cands[key], topo)
        rows.append((best.get(key), {m: q1(pred, topo, m).seconds for m in MODES}))
    have = [r for r in rows if r[0] is not None]
    winner = min(have, key=lambda r: r[0])
    oracle = "full oracle" if cell.get("oracle_complete") else "partial"
    label = f"{c['topology']} {c['resolution']}/{c['frames']}f ({oracle})"
    parts = []
    for m in MODES:
        rank = 1 + sum(1 for r in rows if r[1][m] < winner[1][m])
        rho = spearmanr([r[1][m] for r in have], [r[0] for r in have]).statistic
        parts.append(f"{m}: rank {rank}/{len(rows)} rho {rho:.3f}")
    print(f"{label:38s} compiled {len(have):2d}  " + "  ".join(parts), flush=True)


if __name__ == "__main__":
    for path in sys.argv[1:]:
        check(path)
