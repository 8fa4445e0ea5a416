"""How well Stage 2's bounded sweep keeps its compile workers busy while compiled strategies are
scored, on a synthetic sweep: each compile sleeps `--compile-seconds` (libtpu compiles in child
processes; here a sleeping thread), each scoring sleeps `--score-seconds` in the sweep's thread
(the bench simulates every placement there: about a minute per strategy on v5e:4x4).

    .venv/bin/python benchmarks/sweep_overlap.py --strategies 12 --workers 2 \\
        --compile-seconds 1.0 --score-seconds 0.5 [--other-src DIR]

Prints the wall time of the sweep beside the two lower bounds no schedule beats (all compiles on
`workers` workers; all scoring one after the other). `--other-src DIR` runs the same sweep, in the
same run and in turns with this source's, with the `aoizora` package found in DIR (e.g. the `src/` of
a worktree of another commit), and prints the median of each and their ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def sweep_seconds(strategies: int, workers: int, compile_s: float, score_s: float) -> float:
    """Wall seconds of one sweep of `strategies` unbounded strategies (none can be pruned)."""
    from aoizora.stage2.sweep import BoundedSweep

    def compile_one(key: str, _strategy: object) -> str:
        time.sleep(compile_s)
        return key

    def finish(_i: int, _outcome: object) -> None:
        time.sleep(score_s)

    entries = [(f"s{i}", None) for i in range(strategies)]
    t0 = time.perf_counter()
    BoundedSweep(entries, {}, (), workers, compile_one, finish, None).run(abort=lambda: None)
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--strategies", type=int, default=12)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--compile-seconds", type=float, default=1.0)
    ap.add_argument("--score-seconds", type=float, default=0.5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--other-src", help="a source tree whose aoizora package runs the same sweep, in turns")
    ap.add_argument("--once", action="store_true", help=argparse.SUPPRESS)  # one sweep, JSON (for --other-src)
    a = ap.parse_args()
    args = (a.strategies, a.workers, a.compile_seconds, a.score_seconds)
    if a.once:
        print(json.dumps(sweep_seconds(*args)))
        return
    runs: dict[str, list[float]] = {"this source": []}
    if a.other_src:
        runs["other source"] = []
        # the same sweep in a child that imports aoizora from the other tree
        cmd = [sys.executable, __file__, "--once", "--strategies", str(a.strategies), "--workers", str(a.workers),
               "--compile-seconds", str(a.compile_seconds), "--score-seconds", str(a.score_seconds)]
        env = dict(os.environ, PYTHONPATH=a.other_src)
    for _ in range(a.repeat):
        runs["this source"].append(sweep_seconds(*args))
        if a.other_src:
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            runs["other source"].append(json.loads(out.strip().splitlines()[-1]))
    compile_bound = -(-a.strategies // a.workers) * a.compile_seconds
    score_bound = a.strategies * a.score_seconds
    print(f"{a.strategies} strategies, {a.workers} workers, compile {a.compile_seconds} s, score {a.score_seconds} s; "
          f"lower bounds: compiles {compile_bound:.2f} s, scoring {score_bound:.2f} s")
    medians = {name: statistics.median(t) for name, t in runs.items()}
    for name, m in medians.items():
        print(f"  {name}: median {m:.2f} s over {a.repeat}")
    if a.other_src:
        print(f"  ratio (other / this): {medians['other source'] / medians['this source']:.2f}")


if __name__ == "__main__":
    main()
