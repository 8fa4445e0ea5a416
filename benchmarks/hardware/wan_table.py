"""The "Wan on TPU: predicted vs published" table: every Wan entry of the hardware suite, one row per figure.

    PYTHONPATH=src python benchmarks/hardware/wan_table.py SUITE.json [SUITE.json ...]

reads the runner's JSON (`run.py --json`; later files replace earlier entries of the same key)
and prints a Markdown table: for each comparison of configurations the measured and predicted
ratio of step times (slower over faster; a pipeline's measured ratio is taken with Q2's step of
its fastest configuration, see `run.run_pipeline`), for each per-step figure the measured and
predicted seconds; the kernel profile that costed the attention calls; and whether the figure
was used to fit anything (in-sample) or not (held out). The table in docs/results.md is this
script's output on the committed data, checked by tests/benchmarks/test_hardware_suite.py.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

WAN_SOURCES = ("maxdiffusion/", "gpu-tpu-pedia/")
HEADER = ("| entry | figure | measured | Q2 | sim | Q2 error | kernel profile | basis |\n"
          "|---|---|---:|---:|---:|---:|---|---|")


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


def rows(entry: dict[str, Any]) -> list[str]:
    key, basis = entry["key"], entry.get("basis", "held out")
    if not entry["runnable"]:
        return [f"| `{key}` | not runnable: {entry['reason']} | | | | | | {basis} |"]
    if entry["kind"] == "timed":
        return [_seconds_row(key, "step", entry["measured_seconds"], entry["q2_seconds"], entry["sim_seconds"],
                             entry.get("kernel_profile") or "jax-splash", basis)]
    configs = entry["configs"]
    if entry["kind"] == "pipeline":
        best = entry["measured_fastest"]
        return [_ratio_row(key, f"step {c['name']} / {best}", c["measured_step_ratio_to_fastest_given_q2"],
                           c["q2_step_ratio_to_fastest"], c["sim_step_ratio_to_fastest"], c.get("kernel_profile")
                           or "jax-splash", basis) for c in configs if c["name"] != best]
    out = []
    first = configs[0]
    for rel, c in zip(entry["speed_vs_first"][1:], configs[1:], strict=True):
        out.append(_ratio_row(key, f"step {c['name']} / {first['name']}", 1 / rel["measured"], 1 / rel["q2"],
                              1 / rel["sim"], _profiles([first, c]), basis))
    if entry["unit"] == "s":
        out += [_seconds_row(key, f"step, {c['name']}", c["measured"], c["q2_seconds"], c["sim_seconds"],
                             _profiles([c]), basis) for c in configs]
    return out


def table(entries: list[dict[str, Any]]) -> str:
    return "\n".join([HEADER, *(r for e in entries for r in rows(e))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suites", nargs="+", type=Path, help="JSON written by run.py --json")
    args = parser.parse_args(argv)
    print(table(load(args.suites)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
