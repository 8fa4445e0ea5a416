"""A small recall check of Stage 1: does the Q1 Top-K contain the strategy Q2 likes best?

    .venv/bin/python benchmarks/recall_stage1.py [--topology v5e:2x4] [--dim 1024] [--seq 4096] [--layers 4]
    .venv/bin/python benchmarks/recall_stage1.py --wan wan2.1-t2v-1.3b --resolution 480p --frames 5 --topology v5e:2x2

Compiles every legal strategy of the generic transformer (Stage 2's job, done here for all of
them), scores each with its best placement under Q2 (`aoizora.cost`), and reports the rank
under Q1 of Q2's best strategy (top-1 recall needs K >= that rank), the smallest K reaching it,
and the Spearman rank correlation of Q1 with min-over-placements Q2. Q2 is a model, not a
measurement: this checks Stage 1 against Stage 2, not against hardware.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from scipy.stats import spearmanr

import aoizora  # noqa: F401
from aoizora.cost.model import CostModel
from aoizora.models.registry import wan_space
from aoizora.placement import enumerate_placements, jax_default_placement
from aoizora.stage1 import run_stage1
from aoizora.stage2.compiling import compile_strategy
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topology", default="v5e:2x4")
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--mlp", type=int, default=4096)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--wan", metavar="MODEL", help="Use the Wan space of this model instead of the transformer")
    ap.add_argument("--resolution", default="480p")
    ap.add_argument("--frames", type=int, default=5)
    ap.add_argument("--cache", type=Path,
                    help="JSON file keeping best-Q2 per strategy between runs (compiles are slow)")
    args = ap.parse_args()
    topo = get_topology(args.topology)
    if args.wan:
        space = wan_space(args.wan, args.resolution, args.frames, generation=topo.generation)
        cfg = f"{args.wan} {args.resolution} {args.frames} frames"
    else:
        cfg = TransformerConfig(layers=args.layers, dim=args.dim, heads=args.heads, head_dim=128, mlp=args.mlp,
                                seq=args.seq, batch=2)
        space = TransformerSpace(cfg)
    res = run_stage1(space, topo, top_k=len(list(space.candidates(topo.num_devices))), progress=False)
    model = CostModel(topo)
    tag = f"{topo.name} {cfg}"
    cache = json.loads(args.cache.read_text()) if args.cache and args.cache.exists() else {}
    rows = []
    for e in res.ranked:
        t0 = time.perf_counter()
        q2 = cache.get(tag, {}).get(e.key)
        if q2 is None:
            spec = space.mesh_spec(e.candidate.strategy)
            # compiled exactly as Stage 2 compiles (with the workload's opaque-kernel costs)
            program = compile_strategy(space, e.candidate.strategy, e.key, topo, jax_default_placement(topo, spec),
                                       None).program
            placements = enumerate_placements(topo, spec).placements
            q2 = min(model.evaluate(program, p).step_seconds for p in placements)
            cache.setdefault(tag, {})[e.key] = q2
            if args.cache:
                args.cache.write_text(json.dumps(cache, indent=1))
        rows.append((e.rank, e.key, e.q1.seconds, q2))
        print(f"Q1 rank {e.rank:2d}  Q1 {e.q1.seconds * 1e3:8.3f} ms  best Q2 {q2 * 1e3:8.3f} ms  "
              f"Q1/Q2 {e.q1.seconds / q2:.2f}  "
              f"{e.key}  (compile+Q2 {time.perf_counter() - t0:.1f} s)", flush=True)
    best = min(rows, key=lambda r: r[3])
    rho = spearmanr([r[2] for r in rows], [r[3] for r in rows]).statistic
    print(f"\n{cfg} on {topo.name}: {len(rows)} strategies fit; Q2's best is {best[1]!r} at Q1 rank {best[0]} "
          f"(top-1 recall needs K >= {best[0]}); Spearman(Q1, best Q2) = {rho:.3f}; "
          f"Q1 <= Q2 for all: {all(r[2] <= r[3] for r in rows)}")


if __name__ == "__main__":
    main()
