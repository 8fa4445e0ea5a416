"""Whole denoising steps measured on one chip against the step their one-chip plans predict.

    python benchmarks/chip/one_chip_steps.py [--data docs/data/chip/one_chip] [--json OUT]

Each `step_*.json` under `--data` is `aoizora measure --plan PLAN --steps N --json` run on the chip
(aoizora's own step with random weights, at the plan's strategy, tile and compiler flags), beside
the plan it ran (`v5e-1x1_*.json`, made on a CPU host by `aoizora plan --topology v5e:1x1`). Prints,
per plan, Q2's step (`prediction.step_seconds`: its compute alone, one chip having no collectives),
the measured median step, and predicted over measured.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data" / "chip" / "one_chip"


def rows(data: Path = DATA) -> list[dict]:
    """One row per measured step file whose plan is beside it, in file order."""
    out = []
    for measured_path in sorted(data.glob("step_*.json")):
        measured = json.loads(measured_path.read_text())
        plan = json.loads((data / measured["plan_file"]).read_text())
        shapes = plan["workload"]["shapes"]
        predicted = plan["prediction"]["step_seconds"]
        out.append({
            "plan_file": measured["plan_file"], "model": plan["workload"]["name"],
            "video": [shapes["height"], shapes["width"], shapes["frames"]], "tokens": shapes["tokens"],
            "strategy": plan["strategy"]["key"], "predicted_step_seconds": predicted,
            "measured_step_seconds": measured["measured"]["median_step_seconds"],
            "ratio": predicted / measured["measured"]["median_step_seconds"],
        })
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    table = rows(args.data)
    for r in table:
        h, w, f = r["video"]
        print(f"{r['model']} {h}x{w}x{f} ({r['tokens']} tokens) {r['strategy']}: predicted "
              f"{r['predicted_step_seconds'] * 1e3:9.1f} ms, measured {r['measured_step_seconds'] * 1e3:9.1f} ms, "
              f"predicted/measured {r['ratio']:.3f}")
    if args.json:
        command = "python benchmarks/chip/one_chip_steps.py --json docs/data/chip/one_chip/one_chip_steps.json"
        args.json.write_text(json.dumps({"command": command, "rows": table}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
