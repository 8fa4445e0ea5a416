"""Rank agreement of Q2 with the reference simulator over every placement of 2- and 3-axis meshes.

    .venv/bin/python benchmarks/validate_q2.py [--ring-order reordering-map|listed|best]

For each (slice, mesh): the collective micro-programs and a 4-layer transformer block are
compiled with libtpu for the slice, then every distinct placement is scored by Q2 and simulated.
Prints Spearman rho / Kendall tau pooled and per program, top-1 agreement and regret.
"""

from __future__ import annotations

import argparse
import time

import aoizora  # noqa: F401  (sets libtpu's multi-process switch)
from aoizora.cost import Q2Options
from aoizora.evaluation.validation.programs import default_suite
from aoizora.evaluation.validation.rank import validate
from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.topology import get_topology

CASES = [
    ("v5e:2x4", "sp=2,tp=4"),
    ("v5e:2x4", "dp=2,sp=2,tp=2"),
    ("v5e:4x4", "sp=4,tp=4"),
    ("v5e:4x4", "dp=2,sp=2,tp=4"),
]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ring-order", default="reordering-map", choices=["reordering-map", "listed", "best"])
    args = ap.parse_args()
    options = Q2Options(ring_order=args.ring_order)
    print(f"ring order: {args.ring_order}")
    print("| slice | mesh | suite | pairs | Spearman | Kendall | mean per-program Spearman | top-1 | worst regret "
          "| seconds |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for topo_name, mesh in CASES:
        topo = get_topology(topo_name)
        spec = MeshSpec.parse(mesh)
        placements = enumerate_placements(topo, spec).placements
        for suite in ("micro", "transformer"):
            t0 = time.perf_counter()
            programs = default_suite(topo, spec, suite)
            rep = validate(programs, topo, placements, options=options)
            print(
                f"| {topo_name} | {mesh} | {suite} | {len(rep.pairs)} | {rep.spearman:.3f} | {rep.kendall:.3f} | "
                f"{rep.mean_within_program_spearman:.3f} | {rep.top1_agreement:.0%} | {rep.max_regret:.1%} | "
                f"{time.perf_counter() - t0:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
