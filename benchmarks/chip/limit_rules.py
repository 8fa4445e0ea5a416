"""Raise the scoped-VMEM limit or not: three rules judged by the programs a TPU v5e chip ran at both limits.

    python benchmarks/chip/limit_rules.py [--json docs/data/chip/v5e_limit_rules.json]

Reads `docs/data/chip/v5e_candidates_check.json` (`candidates_check.py`: the Top-8 of three v5e
cells, each strategy measured on the chip at its default-limit tile and at its raised tile and
limit). Per strategy measured both ways, each rule picks one of the two programs:

- `kernel_rule_four_terms`: the tile search's rule (raise only for a predicted gain on the call
  larger than the splash model's error) with the first calibration's four-term splash model
  (`calibrate_v5e.first_calibration`), what plans used before the K/V-streaming term;
- `kernel_rule`: the same rule with the profile's splash model (five terms);
- `compile_check`: the lower Q2 of the two compiled programs, libtpu's estimates for the rest of
  each at its own limit plus the splash calls at its tile (the check Stage 2 makes before a plan
  keeps a raised limit, `aoizora.stage2.limit_check`).

For each: how many picks measure within 1 % of the faster of the two, the mean excess over it, and
the sum of the picked programs' measured times. None of these programs is in a fit.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import calibrate_v5e

from aoizora.api import wan_request_space
from aoizora.models.wan.kernels.splash_tiles import searched_splash_tile
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.topology import HardwareProfile, get_topology, hardware_profile

DATA = Path(__file__).resolve().parents[2] / "docs" / "data" / "chip"


def cell_tokens(cell: dict) -> tuple[int, int]:
    """(tokens, batch) of a cell's request."""
    width, height = cell["video"].split("/")[0].split("x")
    space = wan_request_space({"model": cell["model"], "resolution": f"{width}x{height}",
                               "frames": int(cell["video"].split("/")[1]), "kernel_profile": "jax-splash",
                               "program": "aoizora"}, get_topology(cell["topology"]), vae_decode=False)
    return space.video.tokens(space.config), space.batch


def pairs(check: dict) -> list[dict]:
    """Per strategy measured at both limits: its two programs (the rows of the check)."""
    out = []
    for cell in check["cells"]:
        rows = {r["key"]: r for r in cell["rows"]}
        tokens, batch = cell_tokens(cell)
        for g in cell["planned_tile_against_default"]:
            out.append({"cell": f"{cell['model']} {cell['video']} {cell['topology']}", "strategy": g["strategy"],
                        "tokens": tokens, "batch": batch, "default": rows[g["default_tile"]],
                        "raised": rows[g["planned_tile"]]})
    return out


def kernel_rule(hw: HardwareProfile):
    def pick(p: dict) -> str:
        found = searched_splash_tile(Strategy.from_key(p["strategy"]), p["tokens"], p["batch"], "v5e", hw=hw)
        return "raised" if found is not None and found[1] is not None else "default"
    return pick


def compile_check(p: dict) -> str:
    return "raised" if p["raised"]["predicted_s"] < p["default"]["predicted_s"] else "default"


def judge(rows: list[dict], pick) -> dict:
    picks = []
    for p in rows:
        side = pick(p)
        best = min(p["default"]["measured_s"], p["raised"]["measured_s"])
        picks.append({"cell": p["cell"], "strategy": p["strategy"], "pick": side,
                      "over_faster_pct": round(100 * (p[side]["measured_s"] / best - 1), 2)})
    over = [x["over_faster_pct"] for x in picks]
    return {"within_1pct": sum(o <= 1.0 for o in over), "strategies": len(picks),
            "mean_over_faster_pct": round(statistics.mean(over), 2),
            "picked_measured_ms": round(sum(p[x["pick"]]["measured_s"] for p, x in zip(rows, picks, strict=True)) * 1e3,
                                        2),
            "picks": picks}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    check = json.loads((DATA / "v5e_candidates_check.json").read_text())
    rows = pairs(check)
    committed = hardware_profile("v5e")
    first = calibrate_v5e.first_calibration(calibrate_v5e.load_rows(), committed)["parameters"]
    four_terms = calibrate_v5e.with_fit(committed, [1 / first["attention_score_elements_per_s"],
                                                    first["splash_unoverlapped_element_s"],
                                                    first["splash_grid_step_s"], first["splash_call_s"]])
    rules = {"kernel_rule_four_terms": kernel_rule(four_terms), "kernel_rule": kernel_rule(committed),
             "compile_check": compile_check}
    out = {"source": "v5e_candidates_check.json",
           "faster_of_the_two_ms": round(sum(min(p["default"]["measured_s"], p["raised"]["measured_s"])
                                             for p in rows) * 1e3, 2),
           "rest_change_at_raised_limit_pct": sorted(
               round(100 * ((p["raised"]["measured_s"] - p["raised"]["kernels_s"])
                            / (p["default"]["measured_s"] - p["default"]["kernels_s"]) - 1), 2) for p in rows),
           "estimate_moves_with_the_rest": sum(
               ((p["raised"]["rest_estimate_s"] > p["default"]["rest_estimate_s"])
                == (p["raised"]["rest_measured_s"] > p["default"]["rest_measured_s"])) for p in rows),
           "rules": {name: judge(rows, rule) for name, rule in rules.items()}}
    print(f"{len(rows)} strategies measured at both limits; the faster of each pair sums to "
          f"{out['faster_of_the_two_ms']} ms")
    for name, r in out["rules"].items():
        print(f"{name:24s} within 1 % of the faster: {r['within_1pct']} of {r['strategies']}; mean excess "
              f"{r['mean_over_faster_pct']} %; picked programs sum to {r['picked_measured_ms']} ms")
    print(f"libtpu's estimate of the rest moves with the chip's in {out['estimate_moves_with_the_rest']} of "
          f"{len(rows)}")
    if args.json:
        args.json.write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
