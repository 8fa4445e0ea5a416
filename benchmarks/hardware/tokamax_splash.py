"""The splash-attention kernel's time against aoizora's roofline, on tokamax's published measurements.

    .venv/bin/python benchmarks/hardware/tokamax_splash.py [--json]

openxla/tokamax publishes the forward time of its Pallas splash kernel on TPU7x, v6e and v5p for
many (batch, length, heads, head_dim) shapes (`data/tokamax_splash.json` holds the full-mask,
equal-heads rows with their source commits, and the block sizes of each row's fastest
configuration). aoizora costs a splash call with `HardwareProfile.roofline_seconds`: the MXU at
peak, derated when the head dim is narrower than the MXU; HBM; and the per-score-element vector
work at `attention_score_elements_per_s`; plus a fixed cost per iteration of the kernel's grid
(`pallas_grid_step_s`, from the Pallas matmul guide's v5e measurements, not from these rows). The
rate is read off one row per generation (the longest sequence at head_dim 64, the least MXU work
per element); every other row is held out. Printed beside it: the same model without the
grid-step cost, and the plain roofline (FLOPs at peak, bytes at bandwidth).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
from pathlib import Path

from rich.console import Console
from rich.table import Table

from aoizora.models.wan.transformer.attention import splash_cost, splash_grid_steps
from aoizora.topology import KernelWork, hardware_profile

DATA = Path(__file__).parent / "data" / "tokamax_splash.json"
#: what one device of tokamax's measurements is, in chips' devices: a TPU7x TensorCore is half a chip
DEVICES_PER_CHIP = {"tpu7x": 2, "v6e": 1, "v5p": 1}


def derivation_row(rows: list[dict], generation: str) -> dict:
    """The row the generation's rate is read from: head_dim 64 at the longest sequence measured."""
    mine = [r for r in rows if r["generation"] == generation and r["head_dim"] == 64]
    return max(mine, key=lambda r: r["q_len"] * r["kv_len"])


def predict(row: dict) -> dict:
    """Measured, roofline-predicted and plain-roofline seconds of one measurement."""
    hw = hardware_profile(row["generation"]).per_device(DEVICES_PER_CHIP[row["generation"]])
    bh, lq, lk, d = row["batch"] * row["heads"], row["q_len"], row["kv_len"], row["head_dim"]
    block_q, block_kv = min(row["config"]["block_q"], lq), min(row["config"]["block_kv"], lk)
    flops, hbm = splash_cost(bh, lq, lk, d, 2, False, block_q)
    work = KernelWork(matmul_dim=d, score_elements=bh * lq * lk,
                      grid_steps=splash_grid_steps(bh, lq, lk, block_q, block_kv))
    return {
        "measured_s": row["best_ms"] * 1e-3,
        "grid_steps": work.grid_steps,
        "predicted_s": hw.roofline_seconds(flops, hbm, work),
        "no_step_cost_s": hw.roofline_seconds(flops, hbm, dataclasses.replace(work, grid_steps=None)),
        "plain_roofline_s": max(flops / hw.peak_bf16_flops, hbm / hw.hbm_bandwidth_Bps),
    }


def evaluate() -> list[dict]:
    rows = json.loads(DATA.read_text())["measurements"]
    derived = {id(derivation_row(rows, g)) for g in DEVICES_PER_CHIP}
    out = []
    for r in rows:
        p = predict(r)
        out.append({**{k: r[k] for k in ("generation", "batch", "q_len", "kv_len", "heads", "head_dim")}, **p,
                    "ratio": p["predicted_s"] / p["measured_s"],
                    "no_step_cost_ratio": p["no_step_cost_s"] / p["measured_s"],
                    "plain_ratio": p["plain_roofline_s"] / p["measured_s"],
                    "role": "derivation" if id(r) in derived else "held-out", "source": r["source"]})
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    rows = evaluate()
    if args.json:
        print(json.dumps(rows, indent=1, allow_nan=False))
        return
    table = Table(title="splash forward: measured (tokamax) vs aoizora's roofline")
    for col in ("gen", "B", "L", "H", "D", "grid steps", "measured ms", "predicted ms", "pred/meas",
                "no step cost/meas", "plain/meas", "role"):
        table.add_column(col, justify="right")
    for r in rows:
        table.add_row(r["generation"], str(r["batch"]), str(r["q_len"]), str(r["heads"]), str(r["head_dim"]),
                      str(r["grid_steps"]), f"{r['measured_s'] * 1e3:.3f}", f"{r['predicted_s'] * 1e3:.3f}",
                      f"{r['ratio']:.2f}", f"{r['no_step_cost_ratio']:.2f}", f"{r['plain_ratio']:.2f}", r["role"])
    console = Console()
    console.print(table)
    for gen in DEVICES_PER_CHIP:
        for label, keep in (("L >= 4096", lambda r: r["q_len"] >= 4096), ("L <= 2048", lambda r: r["q_len"] <= 2048)):
            mine = [r for r in rows if r["generation"] == gen and r["role"] == "held-out" and keep(r)]
            console.print(f"{gen}: held-out rows with {label}: {len(mine)}, median predicted/measured "
                          f"{statistics.median(r['ratio'] for r in mine):.2f} "
                          f"({min(r['ratio'] for r in mine):.2f}-{max(r['ratio'] for r in mine):.2f}); without the "
                          f"grid-step cost {statistics.median(r['no_step_cost_ratio'] for r in mine):.2f}; "
                          "plain roofline "
                          f"{statistics.median(r['plain_ratio'] for r in mine):.2f}")


if __name__ == "__main__":
    main()
