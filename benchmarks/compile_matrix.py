"""Where a Stage 2 compile's time goes: one Wan 14B 720p/81 denoise step compiled per cell of a
matrix (slice x splash tile x scoped-VMEM limit x attention kernel), with libtpu's own stage
durations and what each choice changes in the inputs Q2 reads.

    .venv/bin/python benchmarks/compile_matrix.py [--topologies v5e:2x4,v6e:2x4,tpu7x:2x2x1]
        [--strategy "fsdp=2,context=4 | weights=gathered | attn=allgather"] [--cells ...]
        [--repeat 1] [--json OUT]

The strategy is the one of that mesh, weights and attention in the space `aoizora plan` searches
on each slice. Its cells (`--cells`, comma-separated; default all five):

- `fitted-default`: the splash tile fitted at libtpu's default scoped-VMEM limit, that limit;
- `fitted-raised`: the same tile under the raised limit the tile search chose;
- `searched-raised`: the searched tile under it (what Stage 2 compiles);
- `standin-default`, `standin-raised`: the searched tile's program with each splash call replaced by
  a stand-in Pallas kernel over the same operands and results (it copies its query block; the
  log-sum-exp residual is a zero array beside it), at each limit: what the compile costs without
  Mosaic's splash kernel.

Each compile runs in a fresh process with `--xla_jf_print_compilation_stats=true` (log lines
only: the program is the same), the limit passed as that compile's option as Stage 2 passes it.
Per cell it records the lowering and compile seconds (wall and CPU), libtpu's HLO-pass,
back-end and code-generation stage durations, the program's bundle count, and Q2's inputs: the
fusion count, the collectives (count and bytes per device), libtpu's estimated cycles summed
over the program (loops by trip count) and Q2's step on the placement it was compiled over.
`--json` writes every run (`docs/data/planning/compile_matrix.json` holds the committed one).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CELLS = ("fitted-default", "fitted-raised", "searched-raised", "standin-default", "standin-raised")
STAGES = {
    "hlo_passes_s": r"HLO_PASSES stage duration: ([\d.]+ms|(?:\d+m)?[\d.]+s)",
    "backend_s": r"BACKEND_PASSES stage duration: ([\d.]+ms|(?:\d+m)?[\d.]+s)",
    "codegen_s": r"CODE_GENERATION stage duration: ([\d.]+ms|(?:\d+m)?[\d.]+s)",
}
DEFAULT_STRATEGY = "fsdp=2,context=4 | weights=gathered | attn=allgather"


def _seconds(text: str) -> float:
    """libtpu's durations: "440.8ms", "30.09s", "1m36.9s"."""
    if text.endswith("ms"):
        return float(text[:-2]) / 1e3
    m = re.match(r"(?:(\d+)m)?([\d.]+)s", text)
    assert m is not None
    return int(m.group(1) or 0) * 60 + float(m.group(2))


def _standin_splash() -> None:
    """Replace JAX's splash kernel by a stand-in over the same operands: a Pallas kernel that
    copies its query block to the output (one grid step per head and 512 query rows), with the
    log-sum-exp residual, when asked for, a zero array computed beside it."""
    import jax
    import jax.numpy as jnp
    from jax.experimental import pallas as pl
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

    def make(mask: Any, *, save_residuals: bool = False, **_: Any) -> Any:
        def call(q: Any, k: Any, v: Any, segment_ids: Any = None) -> Any:
            h, lq, d = q.shape
            bq = next(b for b in (512, 256, 128) if lq % b == 0)

            def body(q_ref: Any, k_ref: Any, v_ref: Any, o_ref: Any) -> None:
                o_ref[...] = q_ref[...]

            out = pl.pallas_call(
                body, grid=(h, lq // bq),
                in_specs=[pl.BlockSpec((None, bq, d), lambda i, j: (i, j, 0)),
                          pl.BlockSpec((None, 128, d), lambda i, j: (i, 0, 0)),
                          pl.BlockSpec((None, 128, d), lambda i, j: (i, 0, 0))],
                out_specs=pl.BlockSpec((None, bq, d), lambda i, j: (i, j, 0)),
                out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype), name="splash_standin",
            )(q, k, v)
            return (out, (jnp.zeros((h, lq), jnp.float32),)) if save_residuals else out

        return call

    sk.make_splash_mha = make


def _algorithm_digest(collectives: Any) -> str:
    """A digest of the collectives' algorithm choices, independent of their order in the program:
    equal digests mean the same multiset of (collective, emitter, strategy, reordering map)."""
    import hashlib

    rows = sorted(repr((c.kind.value, c.mode.value, c.groups, c.source_target_pairs, c.dtype, c.payload_bytes,
                        c.multiplicity, None if c.algorithm is None else
                        (c.algorithm.emitter, c.algorithm.strategy, c.algorithm.has_reordering_map)))
                  for c in collectives)
    return hashlib.sha256("\n".join(rows).encode()).hexdigest()[:16]


def child(args: argparse.Namespace) -> None:
    """Compile one cell in this process and print its record as one JSON line."""
    import dataclasses

    import jax  # noqa: F401  (libtpu loads here, with the parent's flags)

    from aoizora.cost import CostModel
    from aoizora.hlo.builder import build_program
    from aoizora.hlo.program import NodeKind
    from aoizora.models.registry import wan_space
    from aoizora.models.wan.kernels.splash_tiles import fitted_splash_blocks
    from aoizora.placement import enumerate_placements
    from aoizora.toolchain import CompilerFlags, compile_lowered
    from aoizora.topology import get_topology, hardware_profile

    tile, limit_kind, *_ = args.child.split("-")
    topo = get_topology(args.topology)
    space = wan_space("wan2.1-t2v-14b", "720p", 81, generation=topo.generation)
    strategy = next(c.strategy for c in space.candidates(topo.num_devices) if c.key.startswith(args.strategy + " |")
                    or c.key == args.strategy)
    searched_limit = strategy.scoped_vmem_kib
    if tile == "fitted":
        blocks = fitted_splash_blocks(strategy, space.video.tokens(space.config), space.batch,
                                      hardware_profile(topo.generation).splash_max_block_q)
        strategy = dataclasses.replace(strategy, splash_blocks=blocks, scoped_vmem_kib=None)
    if tile == "standin":
        _standin_splash()
    limit = searched_limit if limit_kind == "raised" else None
    flags = CompilerFlags.parse(f"--xla_tpu_scoped_vmem_limit_kib={limit}" if limit else "")
    placement = enumerate_placements(topo, space.mesh_spec(strategy)).placements[0]
    mesh = placement.jax_mesh(topo)
    c0, t0 = time.process_time(), time.perf_counter()
    lowered = space.lowering_inputs(strategy, mesh).lower()
    lower_s = time.perf_counter() - t0
    c1, t1 = time.process_time(), time.perf_counter()
    compiled = compile_lowered(lowered, flags or None)
    wall, cpu = time.perf_counter() - t1, time.process_time() - c1
    text = compiled.as_text()
    program = build_program(text, opaque_cost=lambda op: space.compiled_kernel_cost(strategy, op))
    q2 = CostModel(topo).evaluate(program, placement)
    collectives = program.collectives
    record = {
        "topology": args.topology, "cell": args.child, "strategy": space.key_of(strategy),
        "scoped_vmem_kib": limit, "lower_s": lower_s, "lower_cpu_s": c1 - c0, "wall_s": wall, "cpu_s": cpu,
        "fusions": sum(n.multiplicity for n in program.nodes if n.kind is NodeKind.COMPUTE and n.opcode == "fusion"),
        "collectives": sum(c.multiplicity for c in collectives),
        "collective_bytes_per_device": sum(c.payload_bytes * c.multiplicity for c in collectives),
        "estimated_cycles": program.total_estimated_cycles(),
        "reordering_maps": sum(c.multiplicity for c in collectives
                               if c.algorithm is not None and c.algorithm.has_reordering_map),
        "collective_algorithms": _algorithm_digest(collectives),
        "q2_step_s": q2.step_seconds, "q2_compute_s": q2.compute_seconds,
        "q2_exposed_comm_s": q2.exposed_comm_seconds,
        "memory_bytes": getattr(compiled.memory_analysis(), "temp_size_in_bytes", None),
    }
    print(json.dumps(record), flush=True)


def measure(topology: str, cell: str, strategy: str) -> dict[str, Any]:
    """One cell compiled in a fresh process, with libtpu's stage durations from its log."""
    env = dict(os.environ, TPU_STDERR_LOG_LEVEL="0", TPU_MIN_LOG_LEVEL="0",
               LIBTPU_INIT_ARGS=(os.environ.get("LIBTPU_INIT_ARGS", "")
                                 + " --xla_jf_print_compilation_stats=true").strip())
    cmd = [sys.executable, __file__, "--child", cell, "--topology", topology, "--strategy", strategy]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        return {"topology": topology, "cell": cell, "error": p.stderr.strip().splitlines()[-1:]}
    rec = json.loads(lines[-1])
    for key, pat in STAGES.items():
        found = [_seconds(m) for m in re.findall(pat, p.stderr)]
        rec[key] = max(found) if found else None  # the step's compile, not the flag probes'
    bundles = [int(b.replace(",", "")) for b in re.findall(r"final program bundle count: ([\d,]+)", p.stderr)]
    rec["bundles"] = max(bundles) if bundles else None
    rec["load_average"] = os.getloadavg()[0]
    return rec


def table(runs: list[dict[str, Any]]) -> str:
    """Medians per (slice, cell)."""
    keys = ["wall_s", "cpu_s", "hlo_passes_s", "backend_s", "codegen_s", "bundles", "fusions", "collectives",
            "estimated_cycles", "q2_step_s"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        groups.setdefault((r["topology"], r["cell"]), []).append(r)
    lines = [f"{'slice':<13}{'cell':<17}" + "".join(f"{k:>17}" for k in keys)]
    for (topo, cell), rs in groups.items():
        ok = [r for r in rs if "error" not in r]
        if not ok:
            lines.append(f"{topo:<13}{cell:<17}error: {rs[0]['error']}")
            continue
        med = {k: statistics.median([r[k] for r in ok if r.get(k) is not None] or [float("nan")]) for k in keys}
        lines.append(f"{topo:<13}{cell:<17}" + "".join(f"{med[k]:>17,.3f}" if k == "q2_step_s" else
                                                       f"{med[k]:>17,.1f}" for k in keys))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--topology", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--topologies", default="v5e:2x4,v6e:2x4,tpu7x:2x2x1")
    ap.add_argument("--strategy", default=DEFAULT_STRATEGY)
    ap.add_argument("--cells", default=",".join(CELLS))
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    runs = []
    for _ in range(args.repeat):
        for topology in args.topologies.split(","):
            for cell in args.cells.split(","):
                rec = measure(topology, cell, args.strategy)
                runs.append(rec)
                print(json.dumps(rec), file=sys.stderr, flush=True)
    print(table(runs))
    if args.json:
        args.json.write_text(json.dumps({"strategy": args.strategy, "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
