"""Cold and warm planning time of `plan_space`, with the experts' early compiles and without.

Each run plans in a fresh cache directory (cold: nothing compiled, no Stage 1 analyses), then
plans once more with another Top-K in the same directory (warm). "without" makes the early
compiles start nothing, so Stage 2 compiles the experts itself after Stage 1, as the planner did
before early compiles existed. Runs alternate between the two variants so that the host's load
falls on both alike; medians are printed.

    .venv/bin/python benchmarks/planning_time.py --model wan2.1-t2v-1.3b --topology v5e:2x2 \\
        --resolution 480p --frames 21
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
from unittest import mock


def plan_once(model: str, topology_name: str, resolution: str, frames: int, top_k: int, early: bool,
              workers: int) -> dict[str, float]:
    from aoizora.models.registry import wan_space
    from aoizora.plan import plan_space
    from aoizora.stage2 import CompileWorkers
    from aoizora.stage2.compiling import EarlyCompiles
    from aoizora.topology import get_topology

    topo = get_topology(topology_name)
    space = wan_space(model, resolution, frames, generation=topo.generation)
    patch = contextlib.nullcontext() if early else mock.patch.object(EarlyCompiles, "start", lambda *a, **k: None)
    with patch:
        t0 = time.perf_counter()
        with CompileWorkers(workers) as executor:
            result = plan_space(space, topo, top_k=top_k, progress=False, executor=executor)
        wall = time.perf_counter() - t0
    timings = result.plan.data["timings"]
    return {"wall": wall, **{k: float(v) for k, v in timings.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="wan2.1-t2v-1.3b")
    ap.add_argument("--topology", default="v5e:2x2")
    ap.add_argument("--resolution", default="480p")
    ap.add_argument("--frames", type=int, default=21)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=1)
    args = ap.parse_args()
    rows: dict[str, list[dict[str, float]]] = {"early": [], "without": [], "warm": []}
    for _ in range(args.reps):
        for variant in ("early", "without"):
            with tempfile.TemporaryDirectory(prefix="aoizora-planning-time-") as cache:
                os.environ["AOIZORA_CACHE_DIR"] = cache
                cold = plan_once(args.model, args.topology, args.resolution, args.frames, args.top_k,
                                 variant == "early", args.workers)
                rows[variant].append(cold)
                print(f"{variant:8s} cold: wall {cold['wall']:.1f} s, stage1 {cold['stage1']:.1f} s, "
                      f"compile {cold.get('compile', 0):.1f} s, verify {cold.get('verify', 0):.1f} s", flush=True)
                if variant == "early":
                    warm = plan_once(args.model, args.topology, args.resolution, args.frames, args.top_k - 1, True,
                                     args.workers)
                    rows["warm"].append(warm)
                    print(f"warm (Top-{args.top_k - 1}): wall {warm['wall']:.1f} s", flush=True)
    for variant, runs in rows.items():
        print(f"median {variant}: wall {statistics.median(r['wall'] for r in runs):.1f} s over {len(runs)} run(s)")


if __name__ == "__main__":
    main()
