"""How much of `memory_analysis()`'s temp lies outside libtpu's buffer assignment, with and without
async collective fusion.

    .venv/bin/python experiments/async_fusion_memory.py v5e:2x2 480p 21 \\
        "context=4 | weights=gathered | attn=allgather" "context=4 | weights=gathered | attn=ring"

For each Wan strategy: compile it (libtpu, compile-only) with an HLO dump, read the buffer
assignment's preallocated temp in HBM (color 0; color 1 is on-chip memory, which memory_analysis()
does not report), and print memory_analysis()'s temp, the assignment's and the difference; then
the same with `xla_tpu_enable_async_collective_fusion=false`. Evidence for Stage 1's rule that an
all-gather of an activation holds a second buffer (docs/notebook/memory-model.md).
"""

from __future__ import annotations

import argparse
import re
import tempfile
import time
from pathlib import Path

MiB = 2**20
OPTIONS = {"default": {}, "no async collective fusion": {"xla_tpu_enable_async_collective_fusion": False}}


def assigned_temp_bytes(dump_dir: str) -> int:
    """Preallocated temp in HBM from libtpu's buffer-assignment dump."""
    (path,) = Path(dump_dir).glob("*after_optimizations-buffer-assignment.txt")
    total = 0
    for line in path.read_text().splitlines():
        m = re.match(r"allocation \d+: size (\d+), (color \d+, )?preallocated-temp", line)
        if m and not m.group(2):
            total += int(m.group(1))
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("topology")
    ap.add_argument("resolution")
    ap.add_argument("frames", type=int)
    ap.add_argument("strategies", nargs="+", help="strategy keys as `aoizora plan --stage1-only` prints them")
    ap.add_argument("--model", default="wan2.1-t2v-14b")
    args = ap.parse_args()

    from aoizora.models.registry import wan_space
    from aoizora.placement.jax_default import jax_default_placement
    from aoizora.topology import get_topology

    topo = get_topology(args.topology)
    space = wan_space(args.model, args.resolution, args.frames, generation=topo.generation)
    candidates = {c.key: c for c in space.candidates(topo.num_devices)}
    print(f"{'strategy':52s} {'compiler options':28s} {'compile':>8s} {'temp':>10s} {'assigned':>10s} {'outside':>10s}")
    for key in args.strategies:
        if key not in candidates:
            raise SystemExit(f"unknown strategy {key!r} for {args.topology}")
        strategy = candidates[key].strategy
        mesh = jax_default_placement(topo, space.mesh_spec(strategy)).jax_mesh(topo)
        inp = space.lowering_inputs(strategy, mesh)
        lowered = inp.lower()
        for name, options in OPTIONS.items():
            with tempfile.TemporaryDirectory(prefix="aoizora-dump-") as dump:
                t0 = time.perf_counter()
                compiled = lowered.compile(
                    compiler_options={"xla_dump_to": dump, "xla_dump_hlo_as_text": True, **options})
                seconds = time.perf_counter() - t0
                temp = compiled.memory_analysis().temp_size_in_bytes
                assigned = assigned_temp_bytes(dump)
            print(f"{key:52s} {name:28s} {seconds:7.0f}s {temp / MiB:7.1f} MiB {assigned / MiB:7.1f} MiB "
                  f"{(temp - assigned) / MiB:7.1f} MiB", flush=True)


if __name__ == "__main__":
    main()
