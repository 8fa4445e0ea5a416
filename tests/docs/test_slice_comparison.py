"""The committed worked example of `aoizora compare` (docs/data/compare/): each row follows from
its slice's committed plan and the arithmetic of `aoizora.slice_costs`, the run with a latency
target repeats the cold run's plans, its pick is the one the rule makes, and the guide's and
results' figures are the data's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aoizora.slice_costs import (
    SliceCandidate,
    chip_hours_per_video,
    cost_per_video,
    meets_target,
    pick_cheapest,
    videos_per_hour,
)
from tests.results_pages import page

ROOT = Path(__file__).parents[2]
DATA = ROOT / "docs" / "data" / "compare" / "wan2.1-t2v-14b_720p_81f"
COLD = json.loads((DATA / "cold-run" / "compare.json").read_text())
TARGET = json.loads((DATA / "latency-300s" / "compare.json").read_text())
SAME = ("topology", "chips", "strategy", "placement", "step_seconds", "steps", "videos_per_run", "video_seconds",
        "videos_per_hour", "chip_hours_per_video", "cost_per_video")


def _plan(topology: str) -> dict:
    return json.loads((DATA / "plans" / f"{topology.replace(':', '-')}_wan2.1-t2v-14b_720p_81f_top3.json").read_text())


@pytest.mark.parametrize("row", COLD["slices"], ids=lambda r: r["topology"])
def test_each_row_is_its_plan_and_the_cost_arithmetic(row):
    from aoizora.plan.schema import validate_plan_json

    plan = _plan(row["topology"])
    validate_plan_json(plan, row["topology"])
    assert plan["topology"]["name"] == row["topology"] and plan["strategy"]["key"] == row["strategy"]
    assert plan["placement"]["name"] == row["placement"]
    assert plan["prediction"]["step_seconds"] == row["step_seconds"]
    assert plan["video_time"]["seconds_per_video"] == row["video_seconds"]
    assert plan["request"]["source"] == "e2ea60a7581b71d7"  # the source of the commit the README names
    price = COLD["prices"]["generations"][row["generation"]]["price_per_chip_hour"]
    assert row["videos_per_hour"] == pytest.approx(videos_per_hour(row["video_seconds"], row["videos_per_run"]))
    hours = chip_hours_per_video(row["chips"], row["video_seconds"], row["videos_per_run"])
    assert row["chip_hours_per_video"] == pytest.approx(hours)
    assert row["cost_per_video"] == (None if price is None else pytest.approx(cost_per_video(hours, price)))


def test_the_run_with_a_target_repeats_the_cold_runs_plans_and_picks_by_the_rule():
    assert [{k: r[k] for k in SAME} for r in TARGET["slices"]] == [{k: r[k] for k in SAME} for r in COLD["slices"]]
    assert TARGET["max_video_seconds"] == 300
    for row in TARGET["slices"]:
        assert row["meets_target"] == meets_target(row["video_seconds"], 300)
    pick = pick_cheapest([SliceCandidate(r["topology"], r["video_seconds"], r["cost_per_video"])
                          for r in TARGET["slices"]], 300)
    assert TARGET["pick"] == {"topology": pick.name, "reason": pick.reason}


def test_the_published_figures_are_the_datas():
    readme = (DATA / "README.md").read_text()
    results = page("slices-and-throughput.md")
    guide = (ROOT / "docs" / "guide.md").read_text()
    for row in COLD["slices"]:
        line = next(x for x in readme.splitlines() if x.startswith(f"| {row['topology']} |"))
        assert f"{row['step_seconds'] * 1000:,.1f} ms" in line and f"{row['video_seconds']:.1f} s" in line
        assert f"| {row['videos_per_hour']:.2f} |" in line and f"| {row['chip_hours_per_video']:.3f} |" in line
        for text in (results, guide):
            assert f"{row['video_seconds']:.1f}" in text and f"{row['chip_hours_per_video']:.3f}" in text


def test_the_break_even_prices_stated_follow_from_the_data():
    """The guide and results state, per unpriced slice, the price per chip-hour below which it is
    cheaper per video than the pick: the pick's cost per video over the slice's chip-hours."""
    pick = next(r for r in TARGET["slices"] if r["topology"] == TARGET["pick"]["topology"])
    texts = [(ROOT / "docs" / "guide.md").read_text(), page("slices-and-throughput.md")]
    for row in TARGET["slices"]:
        if row["cost_per_video"] is None:
            break_even = f"below {pick['cost_per_video'] / row['chip_hours_per_video']:.3f}"
            assert all(break_even in " ".join(t.split()) for t in texts), break_even
