"""Stage 1 as it is now, against the simulated latencies of committed bench cells.

    .venv/bin/python benchmarks/q1_against_oracle.py docs/data/bench/held-out/cells/*.json \\
        docs/data/bench/oracle-v5e-2x2-480p-21/cells/*.json

A bench cell holds the simulated latency of every placement of each strategy it compiled,
and the Stage 1 ranks and Q1 bounds of the source that ran it. This reruns Stage 1 (lowering
only, no compile) on each cell's space and prints, beside what the cell recorded: the Stage 1
rank of the oracle's strategy (top-1 recall at K needs K >= it), the Spearman correlation of Q1
with each compiled strategy's best simulated latency, the strategies whose Stage 1 rank differs
from the recorded one (a change that moves no rank leaves the cell's choices as they were), and
the strategies whose Q1 exceeds that latency (Q1 must be a lower bound: there must be none). A
cell without the full oracle is read the same way over the strategies it compiled (its Top-K and
the baselines): the rank is then that of the best strategy it compiled, and no recall is
claimed. The simulated latencies are the cell's: a change to Stage 1 that leaves the lowered
programs alone leaves them valid.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from scipy.stats import spearmanr


def check(doc: dict, top_k: int) -> dict:
    """Stage 1 now against the cell's record (see the module docstring)."""
    from aoizora.evaluation.bench.harness import best_simulated_seconds
    from aoizora.models.registry import wan_space
    from aoizora.stage1 import run_stage1
    from aoizora.topology import get_topology

    cell = doc["cell"]
    topo = get_topology(cell["topology"])
    space = wan_space(cell["model"], cell["resolution"], cell["frames"], generation=topo.generation)
    result = run_stage1(space, topo, top_k=top_k, progress=False)
    now = {e.key: (e.rank, e.q1.seconds) for e in result.entries if e.rank is not None}
    best = best_simulated_seconds(doc["pairs"])
    oracle = doc["metrics"]["oracle"]["strategy"]
    recorded_q1 = doc["stage1"]["q1_seconds"]
    recorded_ranks = doc["stage1"]["ranks"]
    both = [k for k in best if k in now and k in recorded_q1]
    rho = lambda q1: float(spearmanr([q1[k] for k in both], [best[k] for k in both])[0])  # noqa: E731
    return {
        "cell": f"{cell['topology']} {cell['resolution']}/{cell['frames']} {cell['model']}",
        "oracle": oracle,
        "rank_recorded": recorded_ranks.get(oracle),
        "ranks_moved": sorted(k for k in set(now) | set(recorded_ranks)
                              if now.get(k, (None, None))[0] != recorded_ranks.get(k)),
        "rank_now": now.get(oracle, (None, None))[0],
        "ranked_now": len(now),
        "rho_recorded": rho(recorded_q1),
        "rho_now": rho({k: q for k, (_, q) in now.items()}),
        "strategies": len(both),
        "violations_now": sorted((k, now[k][1], best[k]) for k in both if now[k][1] > best[k]),
        "violations_recorded": sorted(k for k in both if recorded_q1[k] > best[k]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cells", nargs="+", type=Path, help="bench cell JSON files with the full oracle")
    ap.add_argument("--top-k", type=int, default=8, help="the K top-1 recall is read at")
    args = ap.parse_args()
    for path in args.cells:
        doc = json.loads(path.read_text())
        complete = doc["metrics"]["oracle"]["complete"]
        best = "the oracle's strategy" if complete else "the best compiled strategy (no full oracle)"
        r = check(doc, args.top_k)
        print(f"{r['cell']}: {best} {r['oracle']}")
        recall = f"; top-1 recall at K = {args.top_k}: {r['rank_now'] is not None and r['rank_now'] <= args.top_k}"
        print(f"  Stage 1 rank of {best.split(' (')[0]}: recorded {r['rank_recorded']}, now {r['rank_now']} "
              f"(of {r['ranked_now']} ranked{recall if complete else ''})")
        moved = r["ranks_moved"]
        print(f"  Stage 1 ranks that differ from the recorded ones: {len(moved)}"
              + (f" ({', '.join(moved[:3])}{', ...' if len(moved) > 3 else ''})" if moved else ""))
        print(f"  rho(Q1, best simulated) over {r['strategies']} compiled strategies: recorded "
              f"{r['rho_recorded']:.3f}, now {r['rho_now']:.3f}")
        print(f"  Q1 above the best simulated latency: recorded {len(r['violations_recorded'])}, "
              f"now {len(r['violations_now'])}")
        for key, q1, sim in r["violations_now"]:
            print(f"    {key}: Q1 {q1 * 1e3:.1f} ms > simulated {sim * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
