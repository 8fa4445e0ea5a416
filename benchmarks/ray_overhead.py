"""What compiling on Ray costs, side by side with local child processes, on a local Ray cluster.

    .venv/bin/python benchmarks/ray_overhead.py                    # 7 repetitions, the sweep once each
    .venv/bin/python benchmarks/ray_overhead.py --reps 5 --sweeps 2

1. Per compile task: the same compile job (a small transformer on v5e:2x2, no compile cache) sent
   to an executor that is already running (`CompileWorkers(1)`, `RayCompileWorkers(1)`); the
   median of the executor's wall time minus the compile's own seconds inside the worker. That is
   what a task adds besides libtpu: scheduling, shipping the job (pickled space and strategy),
   lowering again in the worker, checking its digest, returning the compiled text.
2. A libtpu compile's CPU time over its wall time (in this process, for a medium transformer):
   what `--ray-cpus-per-compile` reserves.
3. The bench's oracle sweep (`run_cell`, exhaustive oracle, empty compile cache) of a medium
   transformer on v5e:2x4, with 1 and 2 workers, locally and on Ray: wall seconds after planning
   (the baselines and the oracle's compiles and simulations), and the 2-worker/1-worker ratio.
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import tempfile
import time
from typing import Any

from aoizora.evaluation.bench import BenchOptions, Cell, run_cell
from aoizora.placement import enumerate_placements
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compile_workers import CompileWorkers
from aoizora.stage2.executors import executor_from_spec
from aoizora.toolchain import compile_lowered
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

SMALL = TransformerConfig(layers=2, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2)
MEDIUM = TransformerConfig(layers=4, dim=1024, heads=8, head_dim=128, mlp=4096, seq=2048, batch=2)


def _job(executor: Any, space: TransformerSpace, topo: Any) -> Any:
    candidate = next(c for c in space.candidates(topo.num_devices) if c.legal)
    placement = enumerate_placements(topo, space.mesh_spec(candidate.strategy)).placements[0]
    text = space.lowering_inputs(candidate.strategy, placement.jax_mesh(topo)).lower().as_text()
    return executor.job(space, candidate.strategy, topo.name, placement, None, text)


def task_overhead(name: str, executor: Any, reps: int) -> dict[str, float]:
    """Median wall and in-worker compile seconds of one job sent `reps` times (after a warm-up)."""
    space, topo = TransformerSpace(SMALL), get_topology("v5e:2x2")
    job = _job(executor, space, topo)
    executor.compile(job, None)  # the worker's start-up and imports
    walls, inside = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        result = executor.compile(job, None)
        walls.append(time.perf_counter() - t0)
        inside.append(result.compile_seconds)
    row = {"wall_s": statistics.median(walls), "compile_s": statistics.median(inside),
           "overhead_s": statistics.median(w - c for w, c in zip(walls, inside, strict=True))}
    print(f"per task, {name}: wall {row['wall_s']:.3f} s, libtpu {row['compile_s']:.3f} s, "
          f"overhead {row['overhead_s']:.3f} s (median of {reps})", flush=True)
    return row


def compile_cpu_share() -> None:
    """CPU seconds over wall seconds of libtpu compiles in this process."""
    space, topo = TransformerSpace(MEDIUM), get_topology("v5e:2x4")
    for candidate in [c for c in space.candidates(topo.num_devices) if c.legal][:2]:
        placement = enumerate_placements(topo, space.mesh_spec(candidate.strategy)).placements[0]
        lowered = space.lowering_inputs(candidate.strategy, placement.jax_mesh(topo)).lower()
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        compile_lowered(lowered)
        r1, wall = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
        cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
        print(f"compile CPU share, {candidate.key}: {cpu:.2f} s CPU / {wall:.2f} s wall = {cpu / wall:.2f}", flush=True)


def sweep_seconds(spec: str, workers: int) -> tuple[float, int, float]:
    """Wall seconds of a cell after planning, the strategies it compiled (empty compile cache) and
    the sum of their compiles' own seconds (libtpu in the workers; the rest of the wall time is
    this process lowering, simulating and waiting)."""
    cell = Cell("v5e:2x4", "480p", 21, "medium-transformer")
    opts = BenchOptions(top_k=2, oracle=True, oracle_bound=False)
    with tempfile.TemporaryDirectory() as cache_dir, executor_from_spec(spec, workers) as executor:
        doc = run_cell(cell, opts, CompileCache(cache_dir), progress=False, space=TransformerSpace(MEDIUM),
                       executor=executor)
    libtpu = sum(s.get("compile_seconds", 0.0) for s in doc["strategies"].values())
    return doc["bench_seconds"] - doc["planning_seconds"]["total"], doc["metrics"]["strategies_compiled"], libtpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=7, help="repetitions of the per-task measurement")
    ap.add_argument("--sweeps", type=int, default=1, help="oracle sweeps per executor and worker count")
    args = ap.parse_args()
    compile_cpu_share()  # before Ray's threads start in this process (they would count as its CPU time)
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with CompileWorkers(1) as local:
            task_overhead("local child", local, args.reps)
        with executor_from_spec("ray", 1) as on_ray:
            task_overhead("Ray actor", on_ray, args.reps)
        seconds: dict[tuple[str, int], list[float]] = {}
        for _ in range(args.sweeps):
            for spec in ("local", "ray"):
                for workers in (1, 2):
                    s, compiled, libtpu = sweep_seconds(spec, workers)
                    seconds.setdefault((spec, workers), []).append(s)
                    print(f"oracle sweep, {spec}, {workers} worker(s): {s:.1f} s after planning "
                          f"({compiled} strategies compiled, libtpu {libtpu:.1f} s of them; load average "
                          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores)", flush=True)
        for spec in ("local", "ray"):
            one, two = (statistics.median(seconds[(spec, w)]) for w in (1, 2))
            print(f"oracle sweep, {spec}: 2 workers / 1 worker = {two:.1f} s / {one:.1f} s = {two / one:.2f}")
    finally:
        ray.shutdown()


if __name__ == "__main__":
    main()
