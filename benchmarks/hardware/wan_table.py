"""The "Wan on TPU: predicted vs published" table: every Wan entry of the hardware suite, one row per figure.

    PYTHONPATH=src python benchmarks/hardware/wan_table.py SUITE.json [SUITE.json ...] [--totals TOTALS.json]
        [--maxdiffusion-programs PROGRAMS.json]

reads the runner's JSON (`run.py --json`; later files replace earlier entries of the same key)
and prints a Markdown table: for each comparison of configurations the measured and predicted
ratio of step times (slower over faster; a pipeline's measured ratio is taken with Q2's step of
its fastest configuration, see `run.run_pipeline`), for each per-step figure the measured and
predicted seconds; the kernel profile that costed the attention calls; and whether the figure
was used to fit anything (in-sample) or not (held out). With `--totals` (`wan_totals.py --json`),
every configuration with a published end-to-end total gets a "total" row, its measured total and,
in the column "predicted total (Q2)", the predicted total and its error, or why it is not predicted;
an entry that publishes no total says so in that column. With `--maxdiffusion-programs`
(`maxdiffusion_programs.py --json`), a last column gives each figure as Q2 predicts it on
MaxDiffusion's own program at the commit the run ran, with its error (a pipeline's measured ratio
taken with that program's step of the fastest); blank where the commit's program was not compiled.
The table in docs/results/fidelity.md is this script's output on the committed data, checked by
tests/benchmarks/test_hardware_suite.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

WAN_SOURCES = ("maxdiffusion/", "gpu-tpu-pedia/")
HEADER = ("| entry | figure | measured | Q2 | sim | Q2 error | kernel profile | basis | predicted total (Q2) |\n"
          "|---|---|---:|---:|---:|---:|---|---|---|")


def load_totals(path: Path) -> dict[str, dict[str, Any]]:
    """`wan_totals.py --json`'s entries by key."""
    return {e["key"]: e for e in json.loads(path.read_text())["entries"]}


def load(paths: list[Path]) -> list[dict[str, Any]]:
    """Wan entries of the suite files, in first-seen order, the last file's version of each."""
    found: dict[str, dict[str, Any]] = {}
    for path in paths:
        for entry in json.loads(path.read_text())["entries"]:
            if entry["key"].startswith(WAN_SOURCES):
                found[entry["key"]] = entry
    return list(found.values())


def _profiles(configs: list[dict[str, Any]]) -> str:
    return ", ".join(sorted({c.get("kernel_profile") or "jax-splash" for c in configs}))


def _ratio_row(key: str, figure: str, measured: float, q2: float, sim: float, kernel: str, basis: str) -> str:
    return (f"| `{key}` | {figure} | {measured:.3f} | {q2:.3f} | {sim:.3f} | {100 * (q2 - measured):+.1f} pt "
            f"| {kernel} | {basis} |")


def _seconds_row(key: str, figure: str, measured: float, q2: float, sim: float, kernel: str, basis: str) -> str:
    return (f"| `{key}` | {figure} | {measured:.2f} s | {q2:.2f} s | {sim:.2f} s | {100 * (q2 / measured - 1):+.1f} % "
            f"| {kernel} | {basis} |")


def _total_cell(config: dict[str, Any]) -> str:
    predicted = config["predicted_total_seconds"]
    if predicted is None:
        return config["reason"]
    return f"{predicted:.1f} s ({100 * config['error']:+.1f} %)"


def total_rows(entry: dict[str, Any], total: dict[str, Any]) -> list[str]:
    """One row per configuration with a published total: the measured total, the predicted one or the reason."""
    key, basis = entry["key"], entry.get("basis", "held out")
    profiles = {c["name"]: c.get("kernel_profile") or "jax-splash" for c in entry.get("configs", [])}
    if "configs" in total:
        return [f"| `{key}` | total, {c['config']} | {c['measured_total_seconds']:.1f} s | | | "
                f"| {profiles[c['config']]} | {basis} | {_total_cell(c)} |" for c in total["configs"]]
    return [f"| `{key}` | total, {c['name']} | {c['measured_total_seconds']:.1f} s | | | | {profiles[c['name']]} "
            f"| {basis} | {total['reason']} |" for c in entry.get("configs", []) if "measured_total_seconds" in c]


#: the column of MaxDiffusion's own program (`maxdiffusion_programs.py`), added when its records are given
PROGRAM_COLUMN = ("Q2 on MaxDiffusion's program at that commit", "---:")


def load_programs(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """`maxdiffusion_programs.py --json`'s records by (entry key, configuration name)."""
    return {(r["entry"], r["config"]): r for r in json.loads(path.read_text())["records"]}


def rows(entry: dict[str, Any], total: dict[str, Any] | None = None,
         programs: dict[tuple[str, str], dict[str, Any]] | None = None) -> list[str]:
    """The entry's rows; with `total` (its `wan_totals.py` entry), its total rows too, and where it publishes
    no total, the reason in every row's last column; with `programs`, the column of MaxDiffusion's program."""
    cell = total.get("reason", "") if total is not None and not total["total_published"] else ""
    out = []
    for row, program_cell in _step_rows(entry, programs or {}):
        row = f"{row} {cell} |" if cell else f"{row} |"
        if programs is not None:
            row = f"{row} {program_cell} |" if program_cell else f"{row} |"
        out.append(row)
    if total is not None and total["total_published"]:
        out += [f"{r} |" if programs is not None else r for r in total_rows(entry, total)]
    return out


def _q2(programs: dict[tuple[str, str], dict[str, Any]], key: str, *names: str) -> list[float] | None:
    """Q2 of MaxDiffusion's program for each of the entry's `names`; None unless all were compiled."""
    found = [programs.get((key, n)) for n in names]
    if not all(r and r.get("compiled") for r in found):
        return None
    return [r["q2_seconds"] for r in found if r]


def _not_compiled(programs: dict[tuple[str, str], dict[str, Any]], key: str, *names: str) -> str:
    """The cell of a figure whose programs are not all compiled: why, or blank where none was tried."""
    tried = [programs[(key, n)] for n in names if (key, n) in programs]
    failed = [r for r in tried if not r.get("compiled")]
    return f"not compiled at {failed[0]['commit'][:8]}" if failed else ""


def _ratio_cell(predicted: float, measured: float) -> str:
    return f"{predicted:.3f} ({100 * (predicted - measured):+.1f} pt)"


def _seconds_cell(predicted: float, measured: float) -> str:
    return f"{predicted:.2f} s ({100 * (predicted / measured - 1):+.1f} %)"


def _pipeline_cell(entry: dict[str, Any], c: dict[str, Any], programs: dict[tuple[str, str], dict[str, Any]]) -> str:
    """The configuration's step ratio to the fastest on MaxDiffusion's programs, against the measured
    ratio taken with that program's step of the fastest (as `run.run_pipeline` takes Q2's)."""
    key, best = entry["key"], entry["measured_fastest"]
    q2 = _q2(programs, key, c["name"], best)
    if q2 is None:
        return _not_compiled(programs, key, c["name"], best)
    totals = {x["name"]: x["measured_total_seconds"] for x in entry["configs"]}
    measured = 1 + (totals[c["name"]] - totals[best]) / (entry["steps"] * q2[1])
    return _ratio_cell(q2[0] / q2[1], measured)


def _step_rows(entry: dict[str, Any], programs: dict[tuple[str, str], dict[str, Any]]) -> list[tuple[str, str]]:
    """(row, the cell of MaxDiffusion's program) per figure of the entry."""
    key, basis = entry["key"], entry.get("basis", "held out")
    if not entry["runnable"]:
        return [(f"| `{key}` | not runnable: {entry['reason']} | | | | | | {basis} |", "")]
    if entry["kind"] == "timed":
        names = [n for k, n in programs if k == key]  # a timed entry has one configuration
        q2 = _q2(programs, key, *names) if names else None
        cell = _seconds_cell(q2[0], entry["measured_seconds"]) if q2 else ""
        return [(_seconds_row(key, "step", entry["measured_seconds"], entry["q2_seconds"], entry["sim_seconds"],
                              entry.get("kernel_profile") or "jax-splash", basis), cell)]
    configs = entry["configs"]
    if entry["kind"] == "pipeline":
        best = entry["measured_fastest"]
        return [(_ratio_row(key, f"step {c['name']} / {best}", c["measured_step_ratio_to_fastest_given_q2"],
                            c["q2_step_ratio_to_fastest"], c["sim_step_ratio_to_fastest"], c.get("kernel_profile")
                            or "jax-splash", basis), _pipeline_cell(entry, c, programs))
                for c in configs if c["name"] != best]
    out = []
    first = configs[0]
    for rel, c in zip(entry["speed_vs_first"][1:], configs[1:], strict=True):
        q2 = _q2(programs, key, c["name"], first["name"])
        cell = (_ratio_cell(q2[0] / q2[1], 1 / rel["measured"]) if q2
                else _not_compiled(programs, key, c["name"], first["name"]))
        out.append((_ratio_row(key, f"step {c['name']} / {first['name']}", 1 / rel["measured"], 1 / rel["q2"],
                               1 / rel["sim"], _profiles([first, c]), basis), cell))
    if entry["unit"] == "s":
        for c in configs:
            q2 = _q2(programs, key, c["name"])
            cell = _seconds_cell(q2[0], c["measured"]) if q2 else _not_compiled(programs, key, c["name"])
            out.append((_seconds_row(key, f"step, {c['name']}", c["measured"], c["q2_seconds"], c["sim_seconds"],
                                     _profiles([c]), basis), cell))
    return out


def table(entries: list[dict[str, Any]], totals: dict[str, dict[str, Any]] | None = None,
          programs: dict[tuple[str, str], dict[str, Any]] | None = None) -> str:
    """The Markdown table of `entries`, with each entry's totals from `totals` (by key) where given and,
    with `programs`, the column of MaxDiffusion's own program."""
    header = HEADER
    if programs is not None:
        top, rule = HEADER.split("\n")
        header = f"{top} {PROGRAM_COLUMN[0]} |\n{rule}{PROGRAM_COLUMN[1]}|"
    return "\n".join([header, *(r for e in entries for r in rows(e, (totals or {}).get(e["key"]), programs))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="+", type=Path, help="JSON written by run.py --json")
    parser.add_argument("--totals", type=Path, default=None, help="JSON written by wan_totals.py --json")
    parser.add_argument("--maxdiffusion-programs", type=Path, default=None,
                        help="JSON written by maxdiffusion_programs.py --json: adds its column")
    args = parser.parse_args(argv)
    programs = load_programs(args.maxdiffusion_programs) if args.maxdiffusion_programs else None
    print(table(load(args.suites), load_totals(args.totals) if args.totals else None, programs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
