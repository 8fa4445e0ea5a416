"""Per-device programs measured on a TPU v5e chip against Q2's compute, with the profile they were
measured under and with the current one.

    python benchmarks/chip/per_device_check.py [--data docs/data/chip/v5e_per_device_demo_top8.json]

Each row of an `aoizora measure --per-device` document records Q2's compute of the very module the
chip's compiler produced, split into fusions (libtpu's cycle estimates), kernels (the splash
model) and other nodes. The calibration changes only the splash model, so this script traces each
strategy's program again on this host (no compile: the model's record of its splash calls, the
same that costs the compiled calls), checks that the recorded profile's kernel time is reproduced,
and replaces it with the current profile's. It prints each program's measured and predicted time
before and after, and the Spearman rank correlation of predicted against measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from calibrate_v5e import uncalibrated
from scipy.stats import spearmanr

from aoizora.api import wan_request_space
from aoizora.measure.per_device import with_layers
from aoizora.models.wan.space.costs import splash_opaque_cost
from aoizora.models.wan.transformer.strategy import Strategy, make_mesh
from aoizora.models.wan.video.sampling import opaque_kernel_costs
from aoizora.toolchain import compile_only_devices
from aoizora.topology import get_topology

DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "chip" / "v5e_per_device_demo_top8.json"


def kernel_seconds(space, strategy: Strategy, topology, hardware) -> float:
    """The splash calls of one run of the strategy's program, costed as Stage 2 costs them."""
    mesh = make_mesh(strategy, compile_only_devices(topology.name))
    total = 0.0
    for kc in opaque_kernel_costs(space.config, space.video, strategy, mesh, space.batch):
        cost = splash_opaque_cost(kc.flops, kc.bytes_accessed, kc.q_shape[3], kc.grid_steps, strategy.kernel_profile,
                                  kc.compute_blocks_per_step, kc.kv_stream_bytes)
        total += hardware.roofline_seconds(cost.flops, cost.hbm_bytes, cost.kernel) * kc.calls
    return total


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", type=Path, default=None, help="write the table and correlations here")
    args = ap.parse_args(argv)
    doc = json.loads(args.data.read_text())
    topo = get_topology(doc["topology"])
    w = doc["workload"]
    space = wan_request_space({"model": w["name"], "resolution": f"{w['shapes']['width']}x{w['shapes']['height']}",
                               "frames": w["shapes"]["frames"], "kernel_profile": "jax-splash", "program": "aoizora"},
                              topo, vae_decode=False)
    now = topo.hardware
    measured_under = uncalibrated(now)
    rows = []
    for r in doc["rows"]:
        st = Strategy.from_key(r["key"])
        small = with_layers(space, r["layers"])
        before = kernel_seconds(small, st, topo, measured_under)
        after = kernel_seconds(small, st, topo, now)
        p = r["predicted"]
        rest = p["seconds"] - p["kernels_seconds"]
        rows.append({"key": r["key"], "measured_s": r["median_seconds"], "predicted_before_s": p["seconds"],
                     "kernels_recorded_s": p["kernels_seconds"], "kernels_retraced_s": before,
                     "predicted_after_s": rest + after, "fusions_s": p["fusions_seconds"]})
    measured = [r["measured_s"] for r in rows]
    out = {"rows": rows, "spearman_before": spearmanr([r["predicted_before_s"] for r in rows], measured).statistic,
           "spearman_after": spearmanr([r["predicted_after_s"] for r in rows], measured).statistic}
    print(f"{'strategy':90s} {'measured':>9s} {'before':>9s} {'after':>9s}  (ms; after/measured)")
    for r in rows:
        print(f"{r['key']:90s} {r['measured_s'] * 1e3:9.1f} {r['predicted_before_s'] * 1e3:9.1f} "
              f"{r['predicted_after_s'] * 1e3:9.1f}  {r['predicted_after_s'] / r['measured_s']:.3f}"
              f"  [kernels recorded {r['kernels_recorded_s'] * 1e3:.2f}, retraced {r['kernels_retraced_s'] * 1e3:.2f}]")
    print(f"Spearman predicted vs measured: before {out['spearman_before']:.2f}, after {out['spearman_after']:.2f}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
