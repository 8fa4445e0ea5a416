"""Stage 1's cold time of two source trees side by side, alone and inside a plan.

    .venv/bin/python benchmarks/stage1_speed.py --tree before=PATH --tree after=PATH [--runs 2]
        [--model M] [--topology v5e:2x4] [--resolution R] [--frames F] [--in-plan NAME] [--json OUT]

Each tree is a checkout of aoizora (e.g. `git worktree add --detach /tmp/before cdef60c`), run with
this interpreter and `PYTHONPATH=TREE/src`, each run with an empty `AOIZORA_CACHE_DIR`; the trees
alternate (A B A B ...). Per run: `aoizora plan --stage1-only --json` (Stage 1 alone: its
`seconds` and its counts of strategies enumerated, ranked and out of memory) and the command's
wall time. `--in-plan NAME` adds, per run, that tree's Stage 1 inside a plan
(`aoizora plan --time-budget 20 --no-vae-decode`: the plan's `timings.stage1`, with the expert
deployments compiling beside it as a plan compiles them; the budget ends the plan soon after, so
Stage 2's compiles are not waited for). Medians per tree are printed; `--json` keeps every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from planning_speed import add_tree_and_request_options, tree_commit


def run_aoizora(tree: Path, argv: list[str], out: Path | None = None) -> tuple[float, dict[str, Any]]:
    """(wall seconds, the JSON the command printed or wrote to `out`) of one cold `aoizora` command."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, PYTHONPATH=str(tree / "src"), AOIZORA_CACHE_DIR=str(Path(tmp) / "cache"))
        t0 = time.perf_counter()
        p = subprocess.run([sys.executable, "-m", "aoizora.cli", *argv], env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode:
            raise SystemExit(f"{tree}: aoizora {' '.join(argv)} failed: {p.stderr.strip().splitlines()[-1:]}")
        return wall, json.loads(out.read_text() if out is not None else p.stdout)


def stage1_alone(tree: Path, request: list[str]) -> dict[str, Any]:
    wall, doc = run_aoizora(tree, ["plan", *request, "--stage1-only", "--json"])
    return {"wall_s": wall, "stage1_s": doc["seconds"], "counts": doc["counts"], "load_average": os.getloadavg()[0]}


def stage1_in_plan(tree: Path, request: list[str]) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        wall, doc = run_aoizora(tree, ["plan", *request, "--time-budget", "20", "--no-vae-decode",
                                       "--out", str(out)], out)
    return {"wall_s": wall, "stage1_s": doc["timings"]["stage1"], "load_average": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tree_and_request_options(ap, runs=2)
    ap.add_argument("--in-plan", action="append", default=[], help="NAME of a tree whose Stage 1 is also "
                    "timed inside a plan (it must know --time-budget and --no-vae-decode)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    trees = {name: Path(path).resolve() for name, path in (t.split("=", 1) for t in args.tree)}
    if set(args.in_plan) - set(trees):
        ap.error(f"--in-plan names no --tree: {sorted(set(args.in_plan) - set(trees))}")
    request = ["--model", args.model, "--topology", args.topology, "--resolution", args.resolution,
               "--frames", str(args.frames)]
    runs: dict[str, dict[str, list[dict[str, Any]]]] = {name: {"alone": [], "in_plan": []} for name in trees}
    for _ in range(args.runs):
        for name, tree in trees.items():
            runs[name]["alone"].append(stage1_alone(tree, request))
            print(name, "alone", json.dumps(runs[name]["alone"][-1]), file=sys.stderr, flush=True)
            if name in args.in_plan:
                runs[name]["in_plan"].append(stage1_in_plan(tree, request))
                print(name, "in plan", json.dumps(runs[name]["in_plan"][-1]), file=sys.stderr, flush=True)
    print(f"{'tree':<10}{'alone_s':>10}{'in_plan_s':>11}  counts")
    for name, r in runs.items():
        alone = statistics.median(x["stage1_s"] for x in r["alone"])
        in_plan = f"{statistics.median(x['stage1_s'] for x in r['in_plan']):>11.1f}" if r["in_plan"] else f"{'-':>11}"
        print(f"{name:<10}{alone:>10.1f}{in_plan}  {r['alone'][0]['counts']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"request": {k: getattr(args, k) for k in
                                                     ("model", "topology", "resolution", "frames")},
                                         "trees": {name: tree_commit(tree) for name, tree in trees.items()},
                                         "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
