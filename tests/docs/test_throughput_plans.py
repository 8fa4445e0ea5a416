"""The committed throughput plans (docs/data/plans/throughput/): each split's videos per hour is
its arithmetic, the choice is the rule's, the chosen replica's plan is the block's, and the
README's and results' figures are the data's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aoizora.slice_costs import videos_per_hour
from tests.results_pages import page

ROOT = Path(__file__).parents[2]
DIR = ROOT / "docs" / "data" / "plans" / "throughput"
PLANS = sorted(DIR.glob("*.json"))


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_the_choice_is_the_most_videos_per_hour_by_the_rule(path):
    plan = json.loads(path.read_text())
    block = plan["replicas"]
    planned = [r for r in block["splits"] if "not_planned" not in r]
    for row in planned:
        assert row["videos_per_hour"] == pytest.approx(
            row["count"] * videos_per_hour(row["video_seconds"], row["videos_per_replica"]), rel=1e-6)
    best = min(planned, key=lambda r: (-round(r["videos_per_hour"], 6), r["count"], r["videos_per_replica"]))
    assert (block["count"], block["videos_per_replica"]) == (best["count"], best["videos_per_replica"])
    assert block["videos_per_hour"] == pytest.approx(best["videos_per_hour"])
    assert plan["video_time"]["total_seconds"] == pytest.approx(block["video_seconds"])
    assert block["contention"]["checked"] and block["contention"]["shared_links"] == 0


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.stem)
def test_the_published_figures_are_the_datas(path):
    plan = json.loads(path.read_text())
    readme = " ".join((DIR / "README.md").read_text().split())
    results = " ".join(page("slices-and-throughput.md").split())
    rows = {(r["count"], r["videos_per_replica"]): r for r in plan["replicas"]["splits"] if "not_planned" not in r}
    for key, row in rows.items():
        assert f"| {row['videos_per_hour']:.2f} |" in readme or f"| **{row['videos_per_hour']:.2f}** |" in readme
        if key != (1, 1):  # results compares the splits against one replica at two videos
            assert f"{row['videos_per_hour']:.2f} videos/h" in results
    split_gain = rows[(2, 1)]["videos_per_hour"] / rows[(1, 2)]["videos_per_hour"]
    assert f"({split_gain:.2f}x)" in results or f"({split_gain:.3f}x)" in results
