"""The documented MaxDiffusion Wan deployments (dated and today's), and plans compared with them.

    .venv/bin/python benchmarks/expert_table.py [--json docs/data/experts/rows.json] [PLAN ...]

Prints one Markdown row per expert row of `aoizora.models.wan.kernels.experts` (its date, generation,
mesh, MaxDiffusion attention and kernel profile, tiles, scoped-VMEM limit, what it documents, its
source), and writes them as JSON with `--json`. Each PLAN given (a plan file of `aoizora plan`)
adds a table of the plan against every documented deployment it compiled: the row, its kernel
profile, its predicted step, and the plan's speedup over it (Q2, simulated on libtpu-compiled
programs; no TPU).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from aoizora.models.wan.kernels.experts import TODAYS_WAN_EXPERTS, WAN_EXPERTS, WanExpert


def row(e: WanExpert, compiled: bool) -> dict:
    meshes = dict(e.meshes) or {8: (2, 4)}
    mesh = "; ".join(f"{n} devices: data {d} x context {c}" + (f" (U {e.context_ulysses} x R {c // e.context_ulysses})"
                                                              if e.attention == "ulysses_ring" else "")
                     for n, (d, c) in meshes.items())
    b = e.splash_blocks
    return {"name": e.name, "date": e.date, "generations": list(e.generations) or ["any other"], "mesh": mesh,
            "maxdiffusion_attention": e.maxdiffusion_attention, "kernel_profile": e.kernel_profile,
            "tiles": b.describe() if b else None, "scoped_vmem_limit_kib": e.scoped_vmem_limit_kib,
            "kernel_options": dict(e.kernel_options), "libtpu_args": list(e.libtpu_args),
            "documented": e.documented, "source": e.source, "compared_by_default": compiled}


def rows() -> list[dict]:
    return [row(e, True) for e in WAN_EXPERTS] + [row(e, False) for e in TODAYS_WAN_EXPERTS]


def print_rows(table: list[dict]) -> None:
    print("| row | date | generation | mesh | attention (kernel profile) | tiles q/kv/kv_compute | scoped VMEM "
          "| documented |")
    print("|---|---|---|---|---|---|---|---|")
    for r in sorted(table, key=lambda r: (r["generations"][0], r["date"]), reverse=True):
        vmem = f"{r['scoped_vmem_limit_kib'] // 1024} MiB" if r["scoped_vmem_limit_kib"] else "libtpu default"
        print(f"| `{r['name']}` | {r['date']} | {', '.join(r['generations'])} | {r['mesh']} | "
              f"`{r['maxdiffusion_attention']}` ({r['kernel_profile']}) | {r['tiles']} | {vmem} | {r['documented']} |")


def print_plan(path: Path) -> None:
    doc = json.loads(path.read_text())
    chosen = doc["prediction"]["step_seconds"]
    kernel = doc["strategy"].get("kernel_profile", "jax-splash")
    print(f"\n{path.name}: {doc['workload']['name']} on {doc['topology']['name']}, kernel profile {kernel}; "
          f"plan `{doc['strategy']['key'].replace('|', chr(92) + '|')}` on `{doc['placement']['name']}`: "
          f"{chosen * 1e3:,.1f} ms per step")
    print("| documented deployment | kernel profile | strategy compiled | step (ms) | plan's speedup |")
    print("|---|---|---|---|---|")
    for e in doc.get("baselines", {}).get("experts", []):
        strategy = e["strategy"].replace("|", "\\|")
        print(f"| `{e['name']}` | {kernel} | `{strategy}` | {e['step_seconds'] * 1e3:,.1f} | "
              f"{e['speedup_of_plan']:.3f}x |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("plans", nargs="*", type=Path)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    table = rows()
    print_rows(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(table, indent=1) + "\n")
    for path in args.plans:
        print_plan(path)


if __name__ == "__main__":
    main()
