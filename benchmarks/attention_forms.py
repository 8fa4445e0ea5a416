"""The forms aoizora's Wan program can take from MaxDiffusion's, side by side per attention variant:
splash calls with or without a cost estimate for libtpu's scheduler (`WanConfig.splash_cost_estimate`,
as MaxDiffusion's tokamax kernels carry one), and for ring and 2D context attention the ring's K/V
rotated in the model's layout or in the splash kernel's (`Strategy.ring_layout`).

For each variant one strategy of the model (the one `program_form.py` takes: data=2 × context,
replicated weights, the blocks and flags aoizora fits for the slice) is compiled by libtpu for the
slice on a CPU host in each form, over the same device order, and costed by Q2 and the simulator:
the predicted step, its compute and exposed-collective parts, fusions and HBM. Simulated: no TPU
runs. One compile runs at a time; each goes through the compile cache.

    python benchmarks/attention_forms.py [--topology tpu7x:2x2x1] [--model wan2.1-t2v-14b]
        [--resolution 720p] [--frames 81] [--variants allgather,ulysses,ring,ulysses_ring]
        [--layouts sequence_major,heads_major] [--estimate both|yes|no] [--json OUT]

`--layouts` and `--estimate` keep only the forms named (a ring layout applies to ring variants).

`--json` writes every record as it comes (`docs/data/attention-forms/` holds the committed runs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from typing import Any

from program_form import add_workload_arguments, pick, run

from aoizora.models.wan.transformer.strategy import RING_LAYOUTS


def forms(variant: str) -> list[tuple[str, bool]]:
    """(ring layout, cost estimate) of each form the variant takes: the layouts only with a ring."""
    layouts = RING_LAYOUTS if variant in ("ring", "ulysses_ring") else RING_LAYOUTS[:1]
    return [(layout, estimate) for estimate in (False, True) for layout in layouts]


def line(rec: dict[str, Any]) -> str:
    return (f"{rec['variant']:<13}{rec['ring_layout']:<15}{'estimate' if rec['splash_cost_estimate'] else '-':<10}"
            f"step {rec['step_seconds'] * 1e3:8.1f} ms  compute {rec['compute_seconds'] * 1e3:8.1f} ms  exposed comm "
            f"{rec['exposed_comm_seconds'] * 1e3:6.1f} ms  sim {rec['sim_step_seconds'] * 1e3:8.1f} ms  fusions "
            f"{rec['fusions']:5d}" + ("  (cached)" if rec["cached"] else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_workload_arguments(ap, "tpu7x:2x2x1")
    ap.add_argument("--layouts", default=",".join(RING_LAYOUTS), help="ring layouts to compile")
    ap.add_argument("--estimate", choices=("both", "yes", "no"), default="both",
                    help="forms with the splash calls' cost estimate, without it, or both")
    args = ap.parse_args()
    layouts = args.layouts.split(",")
    if unknown := set(layouts) - set(RING_LAYOUTS):
        ap.error(f"unknown ring layout(s) {sorted(unknown)}: choose from {', '.join(RING_LAYOUTS)}")
    estimates = {"both": (False, True), "yes": (True,), "no": (False,)}[args.estimate]
    from aoizora.models import registry
    from aoizora.stage2.compile_cache import default_compile_cache
    from aoizora.topology import get_topology

    topo = get_topology(args.topology)
    cache = default_compile_cache()
    spaces = {estimate: registry.wan_space(args.model, args.resolution, args.frames, generation=topo.generation,
                                           splash_cost_estimate=estimate) for estimate in (False, True)}
    runs: list[dict[str, Any]] = []
    for variant in args.variants.split(","):
        base = pick(spaces[False], topo.num_devices, variant)
        for layout, estimate in forms(variant):
            if estimate not in estimates or (variant in ("ring", "ulysses_ring") and layout not in layouts):
                continue
            strategy = dataclasses.replace(base, ring_layout=layout)
            rec = {"variant": variant, "ring_layout": layout, "splash_cost_estimate": estimate,
                   "strategy": strategy.key(), **run(spaces[estimate], strategy, topo, cache)}
            runs.append(rec)
            print(line(rec), flush=True)
            if args.json:
                doc = {"what": f"the forms of aoizora's Wan program per attention variant on {topo.name}",
                       "command": " ".join(["benchmarks/attention_forms.py", *sys.argv[1:]]), "runs": runs}
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
