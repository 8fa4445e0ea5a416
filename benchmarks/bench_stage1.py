"""Time Stage 1 over the whole transformer strategy space at Wan-14B-like dims.

    .venv/bin/python benchmarks/bench_stage1.py [--topology v5e:4x4] [--seq 4096] [--layers 40] \\
        [--top-k 6] [--repeats 2]

Each repeat runs the whole stage: enumerate, reject illegal, lower every legal strategy
(`jax.jit(...).lower`, no compile), read the IR, build the prediction DAG, Q1, memory, rank.
The first repeat is cold (JAX tracing caches empty); later ones show the steady state. The
machine is shared, so wall-clock times are noisy: read the medians.
"""

from __future__ import annotations

import argparse
import statistics
import time

import aoizora  # noqa: F401  (sets libtpu's multi-process switch)
from aoizora.stage1 import DEFAULT_TOP_K, run_stage1
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topology", default="v5e:4x4")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--top-k", type=int, default=DEFAULT_TOP_K)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    topo = get_topology(args.topology)
    cfg = TransformerConfig.like_wan_14b(seq=args.seq, layers=args.layers)
    print(f"config {cfg} on {topo.name}")
    walls, lowers, analyses = [], [], []
    res = None
    for r in range(args.repeats):
        t0 = time.perf_counter()
        res = run_stage1(TransformerSpace(cfg), topo, top_k=args.top_k, progress=(r == 0))
        walls.append(time.perf_counter() - t0)
        lowers.append(res.timings["lower"])
        analyses.append(res.timings["analyse"])
        print(f"repeat {r}: {walls[-1]:.2f} s wall (lowering {lowers[-1]:.2f} s, "
              f"IR + DAG + Q1 + memory {analyses[-1]:.2f} s)")
    assert res is not None
    c = res.counts()
    lowered = sum(1 for e in res.entries if e.lower_seconds > 0)
    print(f"counts: {c}")
    print(f"cold {walls[0]:.2f} s; median {statistics.median(walls):.2f} s over {len(walls)} runs; "
          f"{lowered} strategies lowered and analysed, "
          f"{statistics.median(analyses) / max(lowered, 1) * 1e3:.1f} ms analysis each")
    for e in res.entries:
        if e.verdict == "out-of-memory":
            print(f"  dropped {e.key}: {e.reasons[0]}")


if __name__ == "__main__":
    main()
