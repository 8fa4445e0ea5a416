"""Cold planning time of two source trees side by side, and whether they plan the same.

    .venv/bin/python benchmarks/planning_speed.py --tree before=PATH --tree after=PATH [--runs 1]
        [--model M] [--topology v5e:2x4] [--resolution R] [--frames F] [--top-k 3]
        [--tree-args NAME="--no-vae-decode"] [--warm-top-k K] [--json OUT]

Each tree is a checkout of aoizora (e.g. `git worktree add --detach /tmp/before cdef60c`), run
with this interpreter and `PYTHONPATH=TREE/src`. The trees plan in turn (A B A B ...), each run
with an empty `AOIZORA_CACHE_DIR`, the request the demo makes (Wan 2.1 14B 720p/81, Top-K 3 on
v5e:2x4 by default). Per run it records the wall seconds of the whole command and the plan's own
timings (Stage 1, compile wall, verify, total), and of the plan: the chosen strategy, placement,
compiler flags and predicted step. It prints the medians per tree and, per run, whether the plan
is the first tree's (same strategy, tile, limit and placement; step within 1 %). `--tree-args`
adds options to one tree's `aoizora plan` (an option older trees do not know, such as
`--no-vae-decode` where only the step's plan is compared). `--warm-top-k K` times, after each
cold plan, a re-plan with Top-K `K` in the same cache (`warm_replan_s`): what a user pays to
change only what Stage 1 keeps.
`docs/data/planning/planning_speed.json` holds the committed run.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TIMINGS = ("stage1", "compile_wall", "verify", "companions", "total")  # companions: absent before 57


def plan_once(tree: Path, args: argparse.Namespace, extra: list[str]) -> dict[str, Any]:
    """One cold plan with the tree's code: its wall time, the plan's timings and its choice."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "plan.json"
        env = dict(os.environ, PYTHONPATH=str(tree / "src"), AOIZORA_CACHE_DIR=str(Path(tmp) / "cache"))
        cmd = [sys.executable, "-m", "aoizora.cli", "plan", "--model", args.model, "--topology", args.topology,
               "--resolution", args.resolution, "--frames", str(args.frames), "--top-k", str(args.top_k),
               "--out", str(out), *extra]
        t0 = time.perf_counter()
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode:
            return {"wall_s": wall, "error": p.stderr.strip().splitlines()[-1:]}
        plan = json.loads(out.read_text())
        warm = None
        if args.warm_top_k is not None:
            again = [*cmd[:cmd.index("--top-k") + 1], str(args.warm_top_k), *cmd[cmd.index("--top-k") + 2:]]
            t1 = time.perf_counter()
            w = subprocess.run(again, env=env, capture_output=True, text=True)
            warm = time.perf_counter() - t1 if w.returncode == 0 else None
    return {
        "wall_s": wall,
        "timings": {k: plan["timings"].get(k) for k in TIMINGS},
        "strategy": plan["strategy"]["key"],
        "placement": plan["placement"]["name"],
        "libtpu_args": plan["compiler"]["libtpu_args"],
        "step_seconds": plan["prediction"]["step_seconds"],
        "video_time": plan.get("video_time"),
        "compiles": plan["stage2"]["compiles"],
        "verify_recompiles": plan["stage2"].get("verify_recompiles", []),
        "load_average": os.getloadavg()[0],
        **({"warm_replan_s": warm, "warm_top_k": args.warm_top_k} if args.warm_top_k is not None else {}),
    }


def same_plan(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """The same strategy (tile and limit are in its key), placement and flags, and a step within 1 %."""
    if "error" in a or "error" in b:
        return False
    return (a["strategy"] == b["strategy"] and a["placement"] == b["placement"]
            and a["libtpu_args"] == b["libtpu_args"]
            and abs(a["step_seconds"] - b["step_seconds"]) <= 0.01 * b["step_seconds"])


def tree_commit(tree: Path) -> str:
    """The commit a tree is at (with "+changes" when its files differ from it): what a reader can
    check out, where the tree's path would only name this machine."""
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"],
                          capture_output=True, text=True, check=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, check=True).stdout.strip()
    return head + ("+changes" if dirty else "")


def add_tree_and_request_options(ap: argparse.ArgumentParser, runs: int) -> None:
    """The trees to compare, the runs of each, and the request (the demo's by default)."""
    ap.add_argument("--tree", action="append", required=True, help="NAME=PATH of an aoizora checkout")
    ap.add_argument("--runs", type=int, default=runs)
    ap.add_argument("--model", default="wan2.1-t2v-14b")
    ap.add_argument("--topology", default="v5e:2x4")
    ap.add_argument("--resolution", default="720p")
    ap.add_argument("--frames", type=int, default=81)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_tree_and_request_options(ap, runs=1)
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--warm-top-k", type=int, default=None, help="after each cold plan, time a re-plan "
                    "with this Top-K in the same cache")
    ap.add_argument("--tree-args", action="append", default=[], help='NAME="OPTIONS" for one tree\'s plan')
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    trees = dict(t.split("=", 1) for t in args.tree)
    extra = {name: shlex.split(opts) for name, opts in (t.split("=", 1) for t in args.tree_args)}
    if set(extra) - set(trees):
        ap.error(f"--tree-args names no --tree: {sorted(set(extra) - set(trees))}")
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in trees}
    for _ in range(args.runs):
        for name, path in trees.items():
            rec = plan_once(Path(path).resolve(), args, extra.get(name, []))
            runs[name].append(rec)
            print(name, json.dumps(rec), file=sys.stderr, flush=True)
    first = next(iter(trees))
    print(f"{'tree':<10}{'wall_s':>10}" + "".join(f"{k:>14}" for k in TIMINGS) + "  same plan as " + first)
    for name, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        if not ok:
            print(f"{name:<10} error: {rs[0]['error']}")
            continue
        med = {k: statistics.median(r["timings"][k] or 0.0 for r in ok) for k in TIMINGS}
        same = [same_plan(r, runs[first][i]) for i, r in enumerate(rs)]
        print(f"{name:<10}{statistics.median(r['wall_s'] for r in ok):>10.1f}"
              + "".join(f"{med[k]:>14.1f}" for k in TIMINGS) + f"  {sum(same)}/{len(same)}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"request": {k: getattr(args, k) for k in
                                                     ("model", "topology", "resolution", "frames", "top_k")},
                                         "trees": {name: tree_commit(Path(path)) for name, path in trees.items()},
                                         "tree_args": {name: " ".join(opts) for name, opts in extra.items()},
                                         "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
