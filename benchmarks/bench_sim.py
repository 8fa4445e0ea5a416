"""Time one reference-simulator run of a 40-layer scanned 14B-sized DiT program on v5e:4x4.

The program is hand-built (`aoizora.hlo.synthetic.ProgramBuilder`) with the shape of a compiled
Wan-14B block under mesh context=4,tp=4 at 75,600 tokens: per layer an async weight all-gather
over all 16 devices (prefetched under the norm/QKV compute), two Ulysses all-to-alls over
`context`, an async ring-attention permute over `context`, and two synchronous all-reduces over
`tp`; compute nodes carry roofline FLOPs/bytes. The body is one `while` loop of 40 iterations.

Run:  .venv/bin/python benchmarks/bench_sim.py [--repeat 5] [--full]

With ``--hlo FILE --mesh fsdp=4,tensor=4`` it times a *compiled* program instead (libtpu HLO text,
parsed by `aoizora.hlo.analyze`, which needs the HLO parser of branch ``hlo``); opaque kernels
(splash attention) then cost ``--opaque-seconds`` each, a stand-in that only matters for the
simulated step, not for the simulator's speed.
"""

from __future__ import annotations

import argparse
import statistics
import time

from aoizora.hlo.synthetic import PINCER, ProgramBuilder, algorithm
from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.sim import simulate
from aoizora.topology import get_topology

LAYERS = 40
TOKENS, DIM, FFN = 75_600, 5120, 13_824
DEVICES, CONTEXT, TP = 16, 4, 4
BF16 = 2


def wan14b_program():
    """A scanned 40-layer program with a few collectives per layer (see the module docstring)."""
    tp_groups = [[c * TP + t for t in range(TP)] for c in range(CONTEXT)]
    ctx_groups = [[c * TP + t for c in range(CONTEXT)] for t in range(TP)]
    act = TOKENS * DIM * BF16 // DEVICES  # activation bytes per device
    layer_params = 2 * (4 * DIM * DIM + 3 * DIM * FFN) // 2  # ~ weights of one block
    shard = layer_params * BF16 // DEVICES
    tok = TOKENS // DEVICES
    b = ProgramBuilder(DEVICES, "wan14b_scan")
    b.compute(flops=1e9, hbm_bytes=act, name="embed")
    with b.loop(LAYERS):
        w = b.start("all-gather", [list(range(DEVICES))], shard, algo=algorithm("1DAllGatherNonMajorDimImbalanced"))
        b.compute(flops=10 * tok * DIM, hbm_bytes=2 * act, name="norm")
        b.compute(flops=2 * TOKENS * DIM * 3 * DIM / DEVICES, hbm_bytes=4 * act, name="qkv")
        b.done(w)
        b.collective("all-to-all", ctx_groups, 3 * act, algo=algorithm("AllToAllEmitter"))
        p = b.start("collective-permute", payload_bytes=act // 2,
                    pairs=[(g[i], g[(i + 1) % CONTEXT]) for g in ctx_groups for i in range(CONTEXT)])
        b.compute(flops=4 * TOKENS * TOKENS * DIM / DEVICES, hbm_bytes=6 * act, name="attention")
        b.done(p)
        b.collective("all-to-all", ctx_groups, act, algo=algorithm("AllToAllEmitter"))
        b.compute(flops=2 * TOKENS * DIM * DIM / DEVICES, hbm_bytes=2 * act, name="out_proj")
        b.collective("all-reduce", tp_groups, act, algo=PINCER)
        b.compute(flops=2 * 2 * TOKENS * DIM * FFN / DEVICES, hbm_bytes=6 * act, name="ffn")
        b.collective("all-reduce", tp_groups, act, algo=PINCER)
    b.compute(flops=1e9, hbm_bytes=act, name="head")
    return b.build()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--full", action="store_true", help="also time walking all 40 iterations")
    ap.add_argument("--hlo", help="time this compiled HLO text instead of the hand-built program")
    ap.add_argument("--mesh", default=f"context={CONTEXT},tp={TP}", help="mesh of --hlo (NAME=SIZE,...)")
    ap.add_argument("--topology", default="v5e:4x4")
    ap.add_argument("--opaque-seconds", type=float, default=2e-3)
    args = ap.parse_args()
    topo = get_topology(args.topology)
    placements = enumerate_placements(topo, MeshSpec.parse(args.mesh)).placements
    opaque = None
    if args.hlo:
        import aoizora.hlo

        if not hasattr(aoizora.hlo, "analyze"):
            raise SystemExit("--hlo needs the HLO parser (aoizora.hlo.analyze, branch hlo)")
        with open(args.hlo, encoding="utf-8") as fh:
            prog = aoizora.hlo.analyze(fh.read())
        opaque = lambda node: args.opaque_seconds  # noqa: E731
    else:
        prog = wan14b_program()
    modes = [True] + ([False] if args.full else [])
    print(f"program: {len(prog.nodes)} nodes, {len(prog.collectives)} collectives, "
          f"loops x{[lp.trip_count for lp in prog.loops]}; {len(placements)} placements")
    for extrapolate in modes:
        for place in (placements[0], placements[-1]):
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                res = simulate(prog, topo, place, extrapolate_loops=extrapolate, opaque_seconds=opaque)
                times.append(time.perf_counter() - t0)
            print(f"extrapolate_loops={extrapolate!s:5} placement={place.name:24} "
                  f"median {statistics.median(times):.3f} s "
                  f"(min {min(times):.3f}, max {max(times):.3f}, n={len(times)}) | "
                  f"step {res.step_seconds * 1e3:.2f} ms, "
                  f"exposed comm {res.exposed_comm_seconds * 1e3:.2f} ms, events {res.events}, "
                  f"rate solves {res.rate_solves}, iterations extrapolated {res.loops_extrapolated}")


if __name__ == "__main__":
    main()
