"""Time Stage 1 over the whole Wan 2.1 strategy space (the issue's target: 14B, 720p, 81 frames on
v5e:4x4 in under 20 s on a 2-core machine).

    .venv/bin/python benchmarks/bench_stage1_wan.py [--topology v5e:4x4] [--resolution 720p] [--frames 81] [--repeats 3]

Each repeat is a fresh process, as `aoizora plan` is (cold JAX and Pallas caches); the time is
`run_stage1`'s own (enumerate, lower every legal strategy, read the IR, predict, Q1, memory, rank),
not the interpreter's start-up. Prints every run and the median.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys


def once(args: argparse.Namespace) -> None:
    import time

    from aoizora.models.registry import wan_space
    from aoizora.stage1 import run_stage1
    from aoizora.topology import get_topology

    topo = get_topology(args.topology)
    space = wan_space(args.model, args.resolution, args.frames, generation=topo.generation)
    t0 = time.perf_counter()
    result = run_stage1(space, topo, progress=False, workers=args.workers)
    print(json.dumps({"seconds": time.perf_counter() - t0, "counts": result.counts(),
                      "cpu_seconds": result.timings}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="wan2.1-t2v-14b")
    ap.add_argument("--topology", default="v5e:4x4")
    ap.add_argument("--resolution", default="720p")
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--workers", type=int, default=None, help="processes (default: Stage 1's own choice)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.once:
        return once(args)
    runs = []
    for _ in range(args.repeats):
        cmd = [sys.executable, __file__, "--once", "--model", args.model, "--topology", args.topology,
               "--resolution", args.resolution, "--frames", str(args.frames)]
        if args.workers is not None:
            cmd += ["--workers", str(args.workers)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
        run = json.loads(out)
        runs.append(run["seconds"])
        print(f"{run['seconds']:.1f} s  {run['counts']}  CPU {run['cpu_seconds']}")
    print(f"median {statistics.median(runs):.1f} s over {len(runs)} runs "
          f"({args.model} {args.resolution} {args.frames}f on {args.topology})")


if __name__ == "__main__":
    main()
