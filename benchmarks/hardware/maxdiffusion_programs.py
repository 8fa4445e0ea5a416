"""The hardware suite's MaxDiffusion entries on MaxDiffusion's own program, at the commit each run ran.

    MAXDIFFUSION_DIR=<MaxDiffusion checkout at COMMIT> PYTHONPATH=src \\
        python benchmarks/hardware/maxdiffusion_programs.py --json docs/data/hardware/maxdiffusion_programs.json

Every configuration of the suite that names the source's program it ran (`Config.program`: the
repository, the commit, the run's own settings such as its attention name) is compiled here as
MaxDiffusion's own Wan step (`aoizora.models.maxdiffusion.program.MaxDiffusionStep`, the program
`aoizora plan --program maxdiffusion` compiles) when the checkout `MAXDIFFUSION_DIR` names is at
that commit; configurations of other commits are listed as needing their checkout. One checkout
serves one commit (MaxDiffusion is imported once per process), so the column is filled by one run
per commit; `--json` merges each run's records into the file, replacing those of the same
configuration. Each configuration is compiled for its slice and device order with its run's flags
(through the compile cache) and costed by Q2 and the simulator, its attention calls by the
configuration's kernel profile. `wan_table.py --maxdiffusion-programs FILE` puts the results in the
"Wan on TPU" table.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path
from typing import Any

from common import Config, NotRunnable, entry_configs, predict

REPOSITORY = "AI-Hypercomputer/maxdiffusion"


class _Lowers:
    """`Config.build`'s function for a step that lowers itself (`MaxDiffusionStep`)."""

    def __init__(self, step: Any) -> None:
        self.step = step

    def lower(self) -> Any:
        return self.step.lower()


def maxdiffusion_config(config: Config, kernel_calls: dict[str, int], steps: list[Any]) -> Config:
    """`config` built as MaxDiffusion's own step of its strategy, with its run's settings; each
    custom call costed is counted in `kernel_calls` (by the kernel profile, or from its I/O), each
    step built appended to `steps`."""
    from aoizora.models.maxdiffusion import program

    assert config.workload is not None and config.program is not None
    space, strategy = config.workload
    settings = config.program[2]

    def build(mesh: Any) -> tuple[Any, tuple[Any, ...]]:
        steps.append(program.MaxDiffusionStep(space, strategy, mesh, settings))
        return _Lowers(steps[-1]), ()

    def cost(op: Any) -> Any:
        found = program.kernel_cost(strategy, op)
        kind = "by_profile" if found is not None else "from_io"
        kernel_calls[kind] = kernel_calls.get(kind, 0) + 1
        return found

    return dataclasses.replace(config, build=build, opaque_cost=cost)


def configs_to_compile(commit: str) -> tuple[list[tuple[str, Config]], list[tuple[str, Config]]]:
    """(entry key, config) pairs of the suite's MaxDiffusion programs: those at `commit`, and the others."""
    import run

    here, elsewhere = [], []
    for entry in run.all_entries():
        for config in entry_configs(entry):
            if config.program is None or config.program[0] != REPOSITORY:
                continue
            (here if config.program[1] == commit else elsewhere).append((entry.key, config))
    return here, elsewhere


def record(key: str, config: Config, cache: Any) -> dict[str, Any]:
    """One configuration compiled as MaxDiffusion's program and predicted (or why it was not)."""
    from aoizora.errors import MaxDiffusionUnavailable

    assert config.program is not None
    head = {"entry": key, "config": config.name, "commit": config.program[1],
            "settings": dict(config.program[2]), "topology": config.topology, "flags": bool(config.flags),
            "kernel_profile": config.kernel_profile}
    calls: dict[str, int] = {}
    steps: list[Any] = []
    try:
        p = predict(maxdiffusion_config(config, calls, steps), cache)
    except (NotRunnable, MaxDiffusionUnavailable) as exc:
        return {**head, "compiled": False, "reason": str(exc).splitlines()[0][:300]}
    return {**head, "compiled": True, "adjustments": steps[-1].adjustments, "q2_seconds": p.q2_s,
            "sim_seconds": p.sim_s, "compute_seconds": p.compute_s,
            "q2_comm_seconds": p.q2_comm_s, "collectives": p.collectives, "kernel_calls": calls,
            "compile_seconds": p.compile_seconds, "from_cache": p.from_cache}


def merge(path: Path, records: list[dict[str, Any]], head: dict[str, Any]) -> dict[str, Any]:
    """The file's records with `records` in place of those of the same (entry, config)."""
    old = json.loads(path.read_text()) if path.exists() else {"records": [], "runs": []}
    mine = {(r["entry"], r["config"]) for r in records}
    kept = [r for r in old["records"] if (r["entry"], r["config"]) not in mine]
    runs = [r for r in old["runs"] if r["maxdiffusion_commit"] != head["maxdiffusion_commit"]] + [head]
    return {"runs": sorted(runs, key=lambda r: r["maxdiffusion_commit"]),
            "records": sorted(kept + records, key=lambda r: (r["entry"], r["config"]))}


def main(argv: list[str] | None = None) -> int:
    from aoizora.errors import AoizoraError
    from aoizora.models.maxdiffusion.program import maxdiffusion_source
    from aoizora.stage2.compile_cache import default_compile_cache
    from aoizora.toolchain import toolchain_versions

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", type=Path, default=None, help="merge the records into this file")
    parser.add_argument("--only", nargs="*", default=(), help="entry keys or config names containing these")
    args = parser.parse_args(argv)
    try:
        source = maxdiffusion_source()
    except AoizoraError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if source.commit is None:
        print("error: MAXDIFFUSION_DIR is not a git checkout, so its commit is unknown: check out the entry's "
              "commit with git", file=sys.stderr)
        return 2
    here, elsewhere = configs_to_compile(source.commit)
    if args.only:
        here = [(k, c) for k, c in here if any(o in k or o == c.name for o in args.only)]
    commits = sorted({c.program[1][:8] for _, c in elsewhere if c.program})
    print(f"MaxDiffusion at {source.commit[:8]}: {len(here)} configurations; other commits: {', '.join(commits)}",
          file=sys.stderr)
    cache = default_compile_cache()
    records = []
    for key, config in here:
        records.append(record(key, config, cache))
        r = records[-1]
        print(f"{key} {config.name}: " + (f"Q2 {r['q2_seconds']:.3f} s" if r["compiled"] else r["reason"]),
              file=sys.stderr)
    head = {"maxdiffusion_commit": source.commit, "aoizora_commit": _aoizora_commit(),
            "toolchain": toolchain_versions()}
    if args.json:
        doc = merge(args.json, records, head)
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=1, allow_nan=False) + "\n")
    else:
        print(json.dumps({"runs": [head], "records": records}, indent=1, allow_nan=False))
    return 0


def _aoizora_commit() -> str:
    from run import _commit

    return _commit()


if __name__ == "__main__":
    sys.exit(main())
