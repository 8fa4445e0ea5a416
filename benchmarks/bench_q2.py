"""Time one Q2 evaluation (and one simulator run) of a 40-layer scanned 14B-sized program on v5e:4x4.

    .venv/bin/python benchmarks/bench_q2.py [--topology v5e:4x4] [--mesh dp=2,sp=2,tp=4] [--repeats 20]

Prints medians measured side by side in one run: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import statistics
import time

import aoizora  # noqa: F401  (sets libtpu's multi-process switch)
from aoizora.cost import CostModel
from aoizora.evaluation.validation.programs import transformer_program
from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.topology import get_topology
from aoizora.workloads.transformer import TransformerConfig


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topology", default="v5e:4x4")
    ap.add_argument("--mesh", default="dp=2,sp=2,tp=4")
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--sim-repeats", type=int, default=3)
    args = ap.parse_args()

    topo = get_topology(args.topology)
    spec = MeshSpec.parse(args.mesh)
    rules = {"batch": "dp", "seq": "sp", "heads": "tp", "mlp": "tp"}
    t0 = time.perf_counter()
    named = transformer_program(topo, spec, TransformerConfig.like_wan_14b(seq=args.seq), rules)
    compile_s = time.perf_counter() - t0
    program = named.program
    placements = enumerate_placements(topo, spec).placements
    print(f"{named.name} on {topo.name} mesh {spec}: compiled in {compile_s:.1f} s; "
          f"{len(program.nodes)} nodes, {len(program.collectives)} collectives, "
          f"loops {[lp.trip_count for lp in program.loops]}; "
          f"{len(placements)} placements")

    model = CostModel(topo)
    model.evaluate(program, placements[0])  # warm the route and ring caches
    q2_times = []
    for _ in range(args.repeats):
        for p in placements:
            t = time.perf_counter()
            model.evaluate(program, p)
            q2_times.append(time.perf_counter() - t)
    q2_med = statistics.median(q2_times)
    print(f"Q2 evaluation: median {q2_med * 1e3:.2f} ms over {len(q2_times)} (program, placement) evaluations")

    try:
        from aoizora.sim import simulate
    except ImportError:
        print("simulator not available")
        return
    sim_times = []
    for _ in range(args.sim_repeats):
        for p in placements[:4]:
            t = time.perf_counter()
            simulate(program, topo, p)
            sim_times.append(time.perf_counter() - t)
    sim_med = statistics.median(sim_times)
    print(f"simulator run: median {sim_med:.3f} s over {len(sim_times)} runs; ratio sim/Q2 = {sim_med / q2_med:.0f}x")


if __name__ == "__main__":
    main()
