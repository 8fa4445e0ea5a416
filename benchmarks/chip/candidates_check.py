"""Stage 1's Top-8 of three v5e cells measured on a TPU v5e chip, each strategy at its compiled form
(the blocks fitted to libtpu's default scoped-VMEM limit, at that limit: what Stage 2 compiles) and
at its planned tile and limit, against Q2's compute.

    python benchmarks/chip/candidates_check.py [--json docs/data/chip/v5e_candidates_check.json]

Reads the `aoizora measure --per-device` documents of `CELLS` (their commands are in the files; the
demo request, and the held-out grid's two v5e cells). Per program: the measured median; Q2's
compute of the module the chip's compiler produced (libtpu's cycle estimates of the fusions, split
by what bounds each on its roofline, plus the splash calls, re-traced on this host with the current
profile: the files were measured with a hook that missed the calls of a program compiled at its
own tile); and the measured time less the splash calls' predicted time, the chip's time for the
rest of the program, beside libtpu's estimate of it. Per cell: the Spearman rank correlation of
predicted against measured, the fastest program, each strategy at its best measured tile, the
program Q2's compute picks, and per strategy what the planned tile and limit gained on the chip
against what the splash model predicts. None of these programs is in a fit.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from per_device_check import kernel_seconds
from scipy.stats import spearmanr

from aoizora.api import wan_request_space
from aoizora.measure.per_device import with_layers
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.topology import get_topology

DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "chip"
#: each cell's measurements, in the order they were taken (a cell measured over several chip calls
#: has a file per call)
CELLS: tuple[tuple[str, ...], ...] = (
    ("v5e_per_device_demo_top8_both_limits.json",),
    ("v5e_per_device_held_out_13b_v5e2x4.json", "v5e_per_device_held_out_13b_v5e2x4_ranks5to8.json"),
    ("v5e_per_device_held_out_13b_v5e4x4.json", "v5e_per_device_held_out_13b_v5e4x4_ranks5to8.json"))
#: the demo plan's choice at the commits of `docs/data/planning/planning_speed_compile_once.json`
DEMO_PLAN = "fsdp=2,context=4 | weights=gathered | attn=allgather | blocks=4736/2048/1024 | vmem=65536"
#: the held-out cells' Top-8 plans (`aoizora plan ... --top-k 8 --no-vae-decode`, at `14df235`), by cell
HELD_OUT_PLANS = {1: "held_out_plans/v5e-2x4_wan2.1-t2v-1.3b_480p_81f_top8.json",
                  2: "held_out_plans/v5e-4x4_wan2.1-t2v-1.3b_480p_81f_top8.json"}


def plan_check(cell: dict, plan: dict) -> dict:
    """A plan's choice against the cell's measured programs: its per-device time over the fastest,
    and, for the fastest program's strategy, what the chip's compute would gain on a whole step (the
    measured difference scaled to the step by the plan's compute over this check's prediction) beside
    the exposed communication Q2 adds to it (one chip cannot measure collectives)."""
    rows = {r["key"]: r for r in cell["rows"]}
    chosen = plan["strategy"]["key"]
    alternatives = {a["strategy"]: a for a in plan["alternatives"]}
    out: dict = {"plan": chosen, "measured": chosen in rows}
    if chosen not in rows:
        return out
    mine, fastest = rows[chosen], rows[cell["fastest"]]
    out["over_fastest_pct"] = round(100 * (mine["measured_s"] / fastest["measured_s"] - 1), 2)
    plan_alt = alternatives[chosen]
    scale = plan_alt["compute_seconds"] / mine["predicted_s"]  # per-device program -> the plan's whole step
    rival = next((a for k, a in alternatives.items() if untiled(Strategy.from_key(k)) == fastest["strategy"]), None)
    if rival is not None and cell["fastest"] != chosen:
        out["fastest_strategy_on_a_step"] = {
            "compute_gain_measured_s": (mine["measured_s"] - fastest["measured_s"]) * scale,
            "compute_gain_predicted_s": plan_alt["compute_seconds"] - rival["compute_seconds"],
            "exposed_comm_added_predicted_s": rival["exposed_comm_seconds"] - plan_alt["exposed_comm_seconds"]}
    return out


def untiled(strategy: Strategy) -> str:
    """The strategy without its tile and limit (the same per-device program at any tile)."""
    return dataclasses.replace(strategy, splash_blocks=None, scoped_vmem_kib=None).key()


def merged_cell(names: tuple[str, ...]) -> dict:
    """One cell's measurement documents as one: the first's request, every file's rows in order;
    complete when the last file is (a later file measures what an earlier one left)."""
    docs = [json.loads((DATA / name).read_text()) for name in names]
    for d in docs[1:]:
        if (d["topology"], d["workload"]) != (docs[0]["topology"], docs[0]["workload"]):
            raise ValueError(f"{names}: the files measure different requests")
    return {**docs[0], "rows": [r for d in docs for r in d["rows"]], "complete": docs[-1].get("complete", True),
            "_files": list(names)}


def check_cell(doc: dict) -> dict:
    topo = get_topology(doc["topology"])
    w = doc["workload"]
    space = wan_request_space({"model": w["name"], "resolution": f"{w['shapes']['width']}x{w['shapes']['height']}",
                               "frames": w["shapes"]["frames"], "kernel_profile": "jax-splash", "program": "aoizora"},
                              topo, vae_decode=False)
    rows = []
    for r in doc["rows"]:
        if r["median_seconds"] is None:
            continue
        st = Strategy.from_key(r["key"])
        kernels = kernel_seconds(with_layers(space, r["layers"]), st, topo, topo.hardware)
        p = r["predicted"]
        rest_estimate = p["fusions_seconds"] + p["other_seconds"]
        rows.append({"key": r["key"], "strategy": untiled(st), "limit_kib": st.scoped_vmem_kib,
                     "measured_s": r["median_seconds"], "predicted_s": rest_estimate + kernels, "kernels_s": kernels,
                     "rest_measured_s": r["median_seconds"] - kernels, "rest_estimate_s": rest_estimate,
                     "fusions_mxu_s": p["fusions_by_bound"]["mxu"]["seconds"],
                     "fusions_hbm_s": p["fusions_by_bound"]["hbm"]["seconds"]})
    measured = [r["measured_s"] for r in rows]
    fastest = min(rows, key=lambda r: r["measured_s"])
    picked = min(rows, key=lambda r: r["predicted_s"])
    best_by_strategy: dict[str, dict] = {}
    for r in rows:
        if r["strategy"] not in best_by_strategy or r["measured_s"] < best_by_strategy[r["strategy"]]["measured_s"]:
            best_by_strategy[r["strategy"]] = r
    tile_gains = []
    for strategy in best_by_strategy:
        pair = [r for r in rows if r["strategy"] == strategy]
        default = [r for r in pair if r["limit_kib"] is None]
        raised = [r for r in pair if r["limit_kib"] is not None]
        if default and raised:
            d, s = default[0], raised[0]
            tile_gains.append({"strategy": strategy, "default_tile": d["key"], "planned_tile": s["key"],
                               "measured_gain_pct": round(100 * (1 - s["measured_s"] / d["measured_s"]), 2),
                               "kernels_predicted_gain_pct": round(100 * (d["kernels_s"] - s["kernels_s"])
                                                                   / d["measured_s"], 2),
                               "rest_measured_change_pct": round(100 * (s["rest_measured_s"] / d["rest_measured_s"]
                                                                        - 1), 2)})
    ratios = [r["rest_measured_s"] / r["rest_estimate_s"] for r in rows]
    return {"files": doc["_files"], "topology": topo.name, "model": w["name"],
            "video": f"{w['shapes']['width']}x{w['shapes']['height']}/{w['shapes']['frames']}",
            "complete": doc.get("complete", True), "rows": rows,
            "spearman": spearmanr([r["predicted_s"] for r in rows], measured).statistic,
            "fastest": fastest["key"], "fastest_s": fastest["measured_s"],
            "q2_pick": picked["key"], "q2_pick_over_fastest_pct": round(100 * (picked["measured_s"]
                                                                          / fastest["measured_s"] - 1), 2),
            "best_tile_by_strategy": {k: {"key": v["key"], "measured_s": v["measured_s"]}
                                      for k, v in best_by_strategy.items()},
            "planned_tile_against_default": tile_gains,
            "rest_measured_over_estimate": {"min": min(ratios), "max": max(ratios)}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=None, help="write every row and each cell's summary here")
    args = ap.parse_args(argv)
    cells = []
    for i, names in enumerate(CELLS):
        cells.append(check_cell(merged_cell(names)))
        if i in HELD_OUT_PLANS:
            cells[-1]["plan_check"] = plan_check(cells[-1], json.loads((DATA / HELD_OUT_PLANS[i]).read_text()))
    demo = cells[0]
    demo_row = next(r for r in demo["rows"] if r["key"] == DEMO_PLAN)
    out = {"cells": cells, "demo_plan": DEMO_PLAN,
           "demo_plan_over_fastest_pct": round(100 * (demo_row["measured_s"] / demo["fastest_s"] - 1), 2)}
    for c in cells:
        print(f"## {c['model']} {c['video']} on {c['topology']} ({', '.join(c['files'])}"
              f"{'' if c['complete'] else ', partial'})")
        print(f"{'program':100s} {'measured':>9s} {'predicted':>9s} {'ratio':>6s} {'rest meas/est':>13s}")
        for r in c["rows"]:
            print(f"{r['key']:100s} {r['measured_s'] * 1e3:9.2f} {r['predicted_s'] * 1e3:9.2f} "
                  f"{r['predicted_s'] / r['measured_s']:6.3f} {r['rest_measured_s'] / r['rest_estimate_s']:13.3f}")
        print(f"Spearman {c['spearman']:.2f}; fastest {c['fastest']} ({c['fastest_s'] * 1e3:.2f} ms); Q2's compute "
              f"picks {c['q2_pick']} (+{c['q2_pick_over_fastest_pct']}%)")
        for g in c["planned_tile_against_default"]:
            print(f"   {g['strategy']}: planned tile gains {g['measured_gain_pct']}% measured, the splash model "
                  f"{g['kernels_predicted_gain_pct']}%; the rest of the program {g['rest_measured_change_pct']:+}%")
        if "plan_check" in c:
            pc = c["plan_check"]
            print(f"   its Top-8 plan chooses {pc['plan']}: +{pc.get('over_fastest_pct')}% over the fastest measured")
            if "fastest_strategy_on_a_step" in pc:
                f = pc["fastest_strategy_on_a_step"]
                print(f"   the fastest's strategy on a step: {f['compute_gain_measured_s'] * 1e3:.1f} ms less compute "
                      f"measured ({f['compute_gain_predicted_s'] * 1e3:.1f} ms predicted), "
                      f"{f['exposed_comm_added_predicted_s'] * 1e3:.1f} ms more exposed communication predicted")
    print(f"the demo plan's {DEMO_PLAN}: +{out['demo_plan_over_fastest_pct']}% over the fastest measured")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
