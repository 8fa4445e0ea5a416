"""The planner's defaults, in one place: the library (`plan_space`, `run_stage1`, the bench) and the
CLI read them here."""

import os
from pathlib import Path

import platformdirs

#: Strategies Stage 1 passes to Stage 2: the smallest K with full top-1 recall on the tuning grid
#: (docs/methodology.md, "How K was chosen").
DEFAULT_TOP_K = 8

#: CPU seconds one TPU compile's process may use before its strategy is dropped (on the clock where
#: CPU time is not read: `stage2.compile_limits`): a Wan 14B 720p/81-frame step under a raised
#: scoped-VMEM limit used 120-215 CPU seconds on a 2-core host (docs/results/planning-speed.md, "Where a Stage 2
#: compile's time goes"), whatever the host's load.
DEFAULT_COMPILE_TIMEOUT_S = 900.0

#: Best (strategy, placement) pairs recompiled with their own device order before the choice.
DEFAULT_VERIFY_TOP = 1


def cache_root() -> Path:
    """Where the plan and compile caches live: `$AOIZORA_CACHE_DIR`, else the user's cache
    directory (e.g. ~/.cache/aoizora)."""
    env = os.environ.get("AOIZORA_CACHE_DIR")
    return Path(env) if env else Path(platformdirs.user_cache_dir("aoizora"))


#: Stage 2 compiles in flight at once, each in its own process: the host's cores (a compile is
#: single-process and CPU-bound; its memory, several GiB for a Wan 14B step, is the other limit).
DEFAULT_COMPILE_WORKERS = os.cpu_count() or 1
#: `aoizora measure`: programs compiled at once, in threads of the process that holds the chip (a
#: 14B block's compile holds a few GiB of host memory, so not one per core)
MEASURE_COMPILE_WORKERS = min(4, DEFAULT_COMPILE_WORKERS)

#: CPUs of a Ray cluster a compile reserves (`--ray-cpus-per-compile`): a libtpu compile keeps one
#: core busy on a loaded host (CPU time 0.96-0.99 of wall time) and takes a second one when it is
#: free (1.46-1.76 on an idle 2-core host; benchmarks/ray_overhead.py, docs/data/planning-time/), so
#: one CPU per compile keeps a node's cores busy without running more compiles than it has cores.
DEFAULT_RAY_CPUS_PER_COMPILE = 1.0

#: Largest batch per replica (videos a replica generates per run) `--objective throughput` tries.
#: Each batch tried is a plan of its own (Stage 1 and its compiles), so the cap bounds the work to
#: this many plans per split; the batch grows until nothing fits HBM or it reaches the cap, and the
#: plan records the cap (`replicas.max_videos_per_replica`) so a reader sees where the search stopped.
DEFAULT_MAX_VIDEOS_PER_REPLICA = 4
