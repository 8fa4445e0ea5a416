"""docs/results/maxdiffusion.md's TPU7x table of aoizora's and MaxDiffusion's programs side by side is the
committed run's (docs/data/program-form/), so are its relayout figures, and its table of the two
plans is the plans' own."""

from __future__ import annotations

import json
from pathlib import Path

from tests.results_pages import page

ROOT = Path(__file__).resolve().parents[2]
RESULTS = page("maxdiffusion.md")
NAMES = {"allgather": "all-gather", "ulysses": "Ulysses", "ring": "ring",
         "ulysses_ring": "2D context (ring 2 × Ulysses 2)"}


def _row(rec: dict) -> str:
    blocks = rec["strategy"].split("blocks=")[1].split(" ")[0]
    program = "aoizora" if rec["program"] == "aoizora" else "MaxDiffusion"
    return (f"| {NAMES[rec['variant']]}, blocks {blocks} | {program} | {rec['step_seconds']:.3f} | "
            f"{rec['sim_step_seconds']:.3f} | {rec['compute_seconds']:.3f} | {rec['exposed_comm_seconds']:.3f} | "
            f"{rec['collective_bytes_total'] / 1e9:.2f} | {rec['sparsecore_relayout_bytes'] / 1e9:.1f} | "
            f"{rec['fusions']:,} | {rec['memory_bytes'] / 2**30:.1f} |")


def test_the_tpu7x_table_is_the_committed_run():
    doc = json.loads((ROOT / "docs/data/program-form/tpu7x-2x2x1_wan2.1-t2v-14b_720p_81f.json").read_text())
    assert len(doc["runs"]) == 8
    for rec in doc["runs"]:
        assert _row(rec) in RESULTS, rec["variant"] + " " + rec["program"]


def _steps(path: str) -> dict[str, float]:
    plan = json.loads((ROOT / path).read_text())
    return {alt["strategy"]: alt["step_seconds"] for alt in plan["alternatives"]}


def test_the_two_plans_table_is_the_plans_steps():
    default = _steps("docs/data/compare/wan2.1-t2v-14b_720p_81f/plans/tpu7x-2x2x1_wan2.1-t2v-14b_720p_81f_top3.json")
    maxdiffusion = _steps("docs/data/plans/maxdiffusion-program/tpu7x-2x2x1_wan2.1-t2v-14b_720p_81f_top3.json")
    assert set(default) == set(maxdiffusion) and len(default) == 5
    for key in default:
        a, m = 1e3 * default[key], 1e3 * maxdiffusion[key]
        assert f"| {a:,.1f} ms | {m:,.1f} ms | {m / a:.3f} |" in RESULTS, key


def test_the_relayout_figures_in_the_text_are_the_committed_runs():
    doc = json.loads((ROOT / "docs/data/program-form/tpu7x-2x2x1_wan2.1-t2v-14b_720p_81f.json").read_text())
    runs = {(r["variant"], r["program"]): r for r in doc["runs"]}
    variants = ("allgather", "ulysses", "ring", "ulysses_ring")
    for program in ("maxdiffusion", "aoizora"):
        ms = ", ".join(f"{1e3 * runs[v, program]['sparsecore_relayout_q2_seconds']:.1f}" for v in variants[:3])
        assert ms in " ".join(RESULTS.split()), program
    once = {p: {round(runs[v, p]["sparsecore_relayout_bytes_once_per_step"] / 1e9, 1) for v in variants}
            for p in ("maxdiffusion", "aoizora")}
    assert once == {"maxdiffusion": {29.0}, "aoizora": {0.3}}
    text = " ".join(RESULTS.split())
    assert "29.0 GB once a step" in text and "aoizora's 0.3 GB" in text
