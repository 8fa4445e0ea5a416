"""libtpu's cycle estimates checked kind by kind against each operation's time on a TPU v5e chip.

    python benchmarks/chip/fusion_calibration.py [--json docs/data/chip/v5e_fusion_calibration.json]

Reads `docs/data/chip/v5e_op_profile_*.json` (`aoizora measure --per-device --op-profile` on the
chip): per-device programs of Wan strategies, one transformer block each, every operation timed
under JAX's profiler beside the compiler's cycle estimate of the same node.

Q2 costs an operation the compiler estimated at its cycles over the clock. The chip says how far
that holds, by kind of operation (`aoizora.hlo.program.estimate_kind`): for each kind, the
scale is the chip's summed time of the fit set's operations of that kind over their summed
estimate (so a kind's long operations weigh most, as they do in a program's time). A program's
prediction is then its splash calls by the calibrated splash model (as recorded) plus each
kind's estimate times its scale; operations the compiler left unestimated are left out, as Q2
leaves them.

The split, by cell, fixed before any scale was computed: the fit set is `FIT_DATA`, Wan 2.1 1.3B
480p/81 on v5e:2x4 (16 programs: the cell's Top-8 strategies, each at its default and raised
tile); the test set is `TEST_DATA`, Wan 2.1 14B 720p/81 on v5e:2x4 (the demo request: its first
three strategies at both tiles) and Wan 2.1 1.3B 480p/81 on v5e:4x4 (its first four at both
tiles): another model size and another slice. Each program is reported with Q2's compute before
(the estimates as the compiler gives them) and after; each cell with the rank correlation of
predicted and measured, and whether the program predicted fastest measures within 1 % of the
fastest. The script also lists what the raised scoped-VMEM limit does to each kind, estimated
and measured, for each strategy measured at both limits.

The demo file was recorded before `aoizora measure` read the profile's event names as
instruction names (libtpu names each event by the instruction's text); `joined` reads both. Rows
without `estimated_cycles` were recorded before the field existed, when Q2 costed every
estimated operation at its estimate as is: their `estimated_s` is that estimate.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from scipy.stats import spearmanr

from aoizora.measure.op_profile import by_kind, instruction_name
from aoizora.topology import hardware_profile

DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "chip"
FIT_DATA: tuple[str, ...] = ("v5e_op_profile_held_out_13b_v5e2x4.json",
                             "v5e_op_profile_held_out_13b_v5e2x4_ranks5to8.json")
TEST_DATA: tuple[str, ...] = ("v5e_op_profile_demo_top8.json", "v5e_op_profile_held_out_13b_v5e4x4.json")
#: the cell of each file (the two halves of the fit cell are one cell)
CELLS = {"v5e_op_profile_held_out_13b_v5e2x4.json": "1.3B 480p/81 v5e:2x4",
         "v5e_op_profile_held_out_13b_v5e2x4_ranks5to8.json": "1.3B 480p/81 v5e:2x4",
         "v5e_op_profile_demo_top8.json": "14B 720p/81 v5e:2x4",
         "v5e_op_profile_held_out_13b_v5e4x4.json": "1.3B 480p/81 v5e:4x4"}


def joined(ops: list[dict]) -> list[dict]:
    """The rows of one program, each event counted on its node (see the module docstring)."""
    nodes = {o["name"]: dict(o) for o in ops if o["kind"] != "unnamed"}
    out = []
    for o in ops:
        if o["kind"] != "unnamed":
            continue
        name = instruction_name(o["name"])
        if name in nodes and nodes[name]["events"] == 0:
            nodes[name]["measured_s"] += o["measured_s"]
            nodes[name]["events"] += o["events"]
        else:
            out.append({**o, "name": name})
    return [*nodes.values(), *out]


def raw_estimate(op: dict, clock_hz: float) -> float | None:
    """The compiler's estimate of the op, in seconds over its trips; None where it has none."""
    if op["kind"] != "compute" or op["estimated_s"] is None:
        return None
    if "estimated_cycles" in op:
        return None if op["estimated_cycles"] is None else op["estimated_cycles"] * op["trips"] / clock_hz
    return op["estimated_s"]


def load(names: tuple[str, ...], data: Path = DATA) -> list[dict[str, Any]]:
    """One record per program: its cell, key, chip median and, per kind, [prediction, chip time]
    in seconds: the compiler's estimate per kind of operation, the splash model's recorded cost
    of its calls (`kernel`), nothing for operations the compiler left unestimated."""
    clock = hardware_profile("v5e").clock_hz
    programs = []
    for name in names:
        doc = json.loads((data / name).read_text())
        for d in doc.get("documents", [doc]):
            for row in d["rows"]:
                kinds = {kind: list(part) for kind, part in
                         by_kind(joined(row["ops"]), estimate=lambda op: raw_estimate(op, clock)).items()}
                kinds["kernel"][0] = row["predicted"]["kernels_seconds"]
                programs.append({"source": name, "cell": CELLS[name], "key": row["key"],
                                 "measured_s": row["median_seconds"], "kinds": dict(kinds)})
    return programs


def fit(programs: list[dict]) -> dict[str, float]:
    """Per kind, the chip's summed time over the compiler's summed estimate (the splash calls,
    costed by their own calibrated model, aside)."""
    sums: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0.0])
    for p in programs:
        for kind, (estimate, measured) in p["kinds"].items():
            if estimate > 0 and kind != "kernel":
                sums[kind][0] += estimate
                sums[kind][1] += measured
    return {kind: round(m / e, 3) for kind, (e, m) in sorted(sums.items())}


def predicted(program: dict, scale: dict[str, float]) -> float:
    """Q2's compute of the program: its splash calls by the splash model, each kind's estimate
    times its scale."""
    return sum(e * scale.get(kind, 1.0) for kind, (e, _) in program["kinds"].items())


def report(programs: list[dict], scale: dict[str, float]) -> dict[str, Any]:
    """Per program, Q2's compute before and after the scales against the chip; per cell, ranks."""
    table, before_err, after_err = [], [], []
    for p in programs:
        before, after = predicted(p, {}), predicted(p, scale)
        before_err.append(100 * (before / p["measured_s"] - 1))
        after_err.append(100 * (after / p["measured_s"] - 1))
        table.append([p["cell"], p["key"], round(p["measured_s"] * 1e3, 2), round(before * 1e3, 2),
                      round(after * 1e3, 2), round(before_err[-1], 1), round(after_err[-1], 1)])
    cells = {}
    for cell in dict.fromkeys(p["cell"] for p in programs):
        ps = [p for p in programs if p["cell"] == cell]
        cells[cell] = {"programs": len(ps)}
        for name, sc in (("before", {}), ("after", scale)):
            cells[cell].update({f"{name}_{field}": value for field, value in ranks(ps, sc).items()})
    return {"table": table, "cells": cells, "summary": {
        "programs": len(programs),
        "before": {"median_abs_error_pct": round(statistics.median(abs(e) for e in before_err), 2),
                   "max_abs_error_pct": round(max(abs(e) for e in before_err), 2),
                   "within_7pct": sum(abs(e) <= 7 for e in before_err)},
        "after": {"median_abs_error_pct": round(statistics.median(abs(e) for e in after_err), 2),
                  "max_abs_error_pct": round(max(abs(e) for e in after_err), 2),
                  "within_7pct": sum(abs(e) <= 7 for e in after_err)}}}


def ranks(programs: list[dict], scale: dict[str, float]) -> dict[str, Any]:
    """Spearman of predicted against measured, and how far the predicted-fastest program measures
    over the fastest."""
    measured = [p["measured_s"] for p in programs]
    pred = [predicted(p, scale) for p in programs]
    pick = measured[pred.index(min(pred))]
    return {"spearman": round(float(spearmanr(pred, measured)[0]), 2),
            "pick_over_fastest_pct": round(100 * (pick / min(measured) - 1), 2)}


def kind_table(programs: list[dict]) -> list[list]:
    """Per cell and kind: the mean per program of the estimate (for `kernel`, the splash model's)
    and of the chip's time, in ms, and their ratio."""
    sums: dict[tuple[str, str], list[float]] = collections.defaultdict(lambda: [0.0, 0.0, 0])
    for p in programs:
        for kind, (e, m) in p["kinds"].items():
            s = sums[(p["cell"], kind)]
            s[0] += e
            s[1] += m
            s[2] += 1
    return [[cell, kind, round(e / n * 1e3, 3), round(m / n * 1e3, 3), round(m / e, 3) if e else None]
            for (cell, kind), (e, m, n) in sorted(sums.items())]


def raised_limit(programs: list[dict]) -> list[list]:
    """Per strategy measured at its default and its raised tile: per kind, the raised program's
    estimate and chip time over the default's."""
    pairs: dict[tuple[str, str], dict[str, dict]] = collections.defaultdict(dict)
    for p in programs:
        base = re.sub(r"\s*\|\s*(blocks|vmem)=[^|]*", "", p["key"])
        pairs[(p["cell"], base)]["raised" if "vmem=" in p["key"] else "default"] = p
    out = []
    for (cell, base), pair in pairs.items():
        if len(pair) < 2:
            continue
        d, r = pair["default"]["kinds"], pair["raised"]["kinds"]
        for kind in ("output", "loop", "copy", "other", "kernel"):
            if kind in d and kind in r and d[kind][1] > 0:
                est = round(r[kind][0] / d[kind][0], 3) if d[kind][0] else None
                out.append([cell, base, kind, est, round(r[kind][1] / d[kind][1], 3)])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, help="write the calibration and both sets' tables here")
    args = ap.parse_args(argv)
    fit_set, test_set = load(FIT_DATA), load(TEST_DATA)
    scale = fit(fit_set)
    result = {"fit_data": list(FIT_DATA), "test_data": list(TEST_DATA), "estimate_scale": scale,
              "fit": report(fit_set, scale), "test": report(test_set, scale),
              "kinds": kind_table(fit_set + test_set), "raised_limit": raised_limit(fit_set + test_set)}
    committed = hardware_profile("v5e").estimate_scale
    for kind, value in scale.items():
        if abs(committed.get(kind, 1.0) / value - 1) > 0.01:
            print(f"data/hardware.json's v5e estimate_scale[{kind!r}] is {committed.get(kind)}, the fit {value}",
                  file=sys.stderr)
    print(f"scales (chip over estimate, fit set): {scale}")
    for name in ("fit", "test"):
        s = result[name]["summary"]
        print(f"{name}: {s['programs']} programs, before {s['before']}, after {s['after']}")
        for cell, c in result[name]["cells"].items():
            print(f"  {cell}: {c}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
