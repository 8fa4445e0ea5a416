"""What compiling in a child process costs: the same compiles in this process and in a child, side by side.

    .venv/bin/python benchmarks/compile_child_overhead.py                  # a small transformer, 5 repetitions
    .venv/bin/python benchmarks/compile_child_overhead.py --wan --reps 2   # + one Wan 2.1 1.3B step (480p, 21 frames)

For each program, the median wall time of `compile_strategy` (no compile cache) in this process
(the thread path, used for workloads that cannot be pickled) and in a child process that is
already running (`CompileWorkers`, as Stage 2 reuses its children), and the child's start-up
(spawn + jax/libtpu imports), paid once per child. The child's extra per compile is the
lowering it repeats, the pickles through the pipe and the compiled text's transfer.
"""
from __future__ import annotations

import argparse
import statistics
import time

from aoizora.placement import enumerate_placements
from aoizora.stage2.compile_workers import CompileWorkers
from aoizora.stage2.compiling import compile_strategy
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig


def _first_legal(space, topo):
    return next(c for c in space.candidates(topo.num_devices) if c.legal)


def _measure(label: str, space, topo, candidate, reps: int) -> dict[str, float]:
    placement = enumerate_placements(topo, space.mesh_spec(candidate.strategy)).placements[0]
    here, child, compile_here, compile_child = [], [], [], []
    with CompileWorkers(1) as workers:
        t0 = time.perf_counter()
        compile_strategy(space, candidate.strategy, candidate.key, topo, placement, None, executor=workers)  # warm
        first = time.perf_counter() - t0
        for _ in range(reps):
            t0 = time.perf_counter()
            c = compile_strategy(space, candidate.strategy, candidate.key, topo, placement, None, executor=workers)
            child.append(time.perf_counter() - t0)
            compile_child.append(c.compile_seconds)
        start = workers.start_seconds[0]
        workers.refuse(space)  # from here on: this process (the thread path)
        for _ in range(reps):
            t0 = time.perf_counter()
            c = compile_strategy(space, candidate.strategy, candidate.key, topo, placement, None, executor=workers)
            here.append(time.perf_counter() - t0)
            compile_here.append(c.compile_seconds)
    row = {"in_process_s": statistics.median(here), "child_s": statistics.median(child),
           "libtpu_in_process_s": statistics.median(compile_here),
           "libtpu_in_child_s": statistics.median(compile_child),
           "child_start_s": start, "first_child_compile_s": first}
    print(f"{label}: in-process {row['in_process_s']:.2f} s (libtpu {row['libtpu_in_process_s']:.2f} s) | "
          f"child {row['child_s']:.2f} s (libtpu {row['libtpu_in_child_s']:.2f} s) | "
          f"overhead per compile {row['child_s'] - row['in_process_s']:+.2f} s | child start-up {start:.2f} s "
          f"(first compile with start-up {first:.2f} s) | median of {reps}")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--wan", action="store_true", help="also a Wan 2.1 1.3B step (480p, 21 frames) on v5e:2x2")
    args = ap.parse_args()
    topo = get_topology("v5e:2x2")
    small = TransformerSpace(TransformerConfig(layers=2, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2))
    _measure("small transformer (v5e:2x2)", small, topo, _first_legal(small, topo), args.reps)
    if args.wan:
        from aoizora.models.registry import wan_space

        space = wan_space("wan2.1-t2v-1.3b", "480p", 21, generation=topo.generation)
        candidate = next(c for c in space.candidates(topo.num_devices)
                         if c.key == "data=2,context=2 | weights=replicated | attn=ulysses")
        _measure("Wan 2.1 1.3B 480p/21 step (v5e:2x2)", space, topo, candidate, args.reps)


if __name__ == "__main__":
    main()
