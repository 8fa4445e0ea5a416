"""Stage 1's memory estimate against the compiler's, on every strategy an `aoizora bench` run compiled.

    .venv/bin/python benchmarks/memory_estimate.py OUT1/cells [OUT2/cells ...]     # aoizora bench output directories

Each bench cell records the compiled `memory_analysis()` total per strategy, or the compiler's
out-of-HBM refusal; this lowers the same strategies again (no compile) and prints the estimate, the
error, and summary lines: the error against `memory_analysis()` for every compiled strategy, and
Stage 1's fit (which leaves out the async collective copies the compiler does not check) against
the compiler's verdict.
"""
from __future__ import annotations

import argparse
import glob
import json
import statistics
from pathlib import Path
from typing import Any

from aoizora.models.registry import wan_space
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.plan.planner import expert_entries
from aoizora.stage1.ir import read_module
from aoizora.stage1.memory import estimate_memory
from aoizora.stage1.predict import predict
from aoizora.stage2.outcomes import OUT_OF_HBM
from aoizora.toolchain import environment_flags
from aoizora.topology import get_topology
from aoizora.workload import lowering_inputs_on

GIB = 2**30


def compiled_strategy(key: str, experts: dict[str, Any], kernel: str) -> Any:
    """The strategy a cell compiled under `key`: an expert deployment by its key (which names its
    flags, not a strategy), any other as its key reads (the splash blocks and scoped-VMEM limit it
    was compiled with, not those the current space would plan for it)."""
    return experts[key] if key in experts else Strategy.from_key(key, kernel)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cell_dirs", nargs="+", help="`cells/` directories of aoizora bench runs")
    args = ap.parse_args()
    errors = []
    verdicts = []  # (refused by the compiler, fits by Stage 1, label) where either says no
    for path in sorted(p for d in args.cell_dirs for p in glob.glob(str(Path(d) / "*.json"))):
        doc = json.loads(Path(path).read_text())
        cell = doc["cell"]
        topo = get_topology(cell["topology"])
        space = wan_space(cell["model"], cell["resolution"], int(cell["frames"]), generation=topo.generation)
        experts = {e.key: e.deployment.strategy for e in expert_entries(space, topo, environment_flags())}
        for key, compiled in doc["strategies"].items():
            refused = (compiled.get("dropped") or "").startswith(OUT_OF_HBM)
            if not compiled.get("memory_bytes") and not refused:
                continue  # not compiled, or failed for another reason
            st = compiled_strategy(key, experts, space.kernel)
            lowered = lowering_inputs_on(space, st, topo).lower()
            pred = predict(read_module(lowered), lambda call, st=st, space=space: space.kernel_cost(st, call),
                           async_collective_fusion=topo.hardware.async_collective_fusion)
            mem = estimate_memory(pred, topo.hardware)
            if refused or not mem.fits:
                verdicts.append((refused, mem.fits, f"{cell['topology']} {cell['resolution']} {cell['frames']}f {key}"))
            if refused:
                continue
            est = mem.total_bytes
            err = est / compiled["memory_bytes"] - 1
            errors.append(abs(err))
            label = f"{cell['topology']} {cell['resolution']} {cell['frames']}f"
            print(f"{label:18s} {key:64s} estimate {est / GIB:6.2f} GiB  "
                  f"compiled {compiled['memory_bytes'] / GIB:6.2f} GiB  {err:+.1%}")
    if not errors:
        raise SystemExit("no compiled strategy in these cells")
    within = sum(e <= 0.15 for e in errors)
    print(f"{len(errors)} compiled strategies: |error| median {statistics.median(errors):.1%}, "
          f"max {max(errors):.1%}, within 15%: {within}/{len(errors)}")
    wrong_drops = [label for refused, fits, label in verdicts if not refused and not fits]
    missed = [label for refused, fits, label in verdicts if refused and fits]
    print(f"refused by the compiler: {sum(r for r, _, _ in verdicts)}; Stage 1 drops "
          f"{sum(r and not f for r, f, _ in verdicts)} of them, keeps {len(missed)} (Stage 2 backfills)")
    print(f"accepted by the compiler but dropped by Stage 1: {len(wrong_drops)}")
    for label in wrong_drops:
        print(f"  {label}")


if __name__ == "__main__":
    main()
