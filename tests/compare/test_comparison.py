"""A planned slice's row (from the committed plans), the video time it reads, and the slice list."""

from __future__ import annotations

import copy
import json

import pytest

from aoizora.compare import parse_slices, slice_row, video_seconds, video_time_includes
from aoizora.compare.comparison import Comparison, failed_row, pick_of
from aoizora.compare.prices import ChipPrice, default_prices
from aoizora.errors import ArgumentError, PlanFormatError, TopologyError
from aoizora.plan_video import DENOISING_ONLY, END_TO_END, MIXED
from aoizora.topology import get_topology
from tests.plan.test_plan_consistency import PLANS

V5E = json.loads((PLANS / "v5e-2x4_wan2.1-t2v-14b_720p_81f_top3.json").read_text())
V6E = json.loads((PLANS / "v6e-2x4_wan2.1-t2v-14b_720p_81f.json").read_text())
PRICE = ChipPrice("v6e", 2.0, source="test")


def test_a_plan_without_a_video_time_is_read_as_its_steps_and_says_so():
    assert "video_time" not in V6E
    assert video_seconds(V6E) == pytest.approx(V6E["workload"]["scheduler"]["steps"]
                                               * V6E["prediction"]["step_seconds"])
    assert video_time_includes(V6E) == DENOISING_ONLY


def _with_video_time(plan, total):
    plan = copy.deepcopy(plan)
    plan["video_time"] = {"videos": 1, "total_seconds": total}
    return plan


def test_a_plan_with_an_end_to_end_video_time_is_read_as_it():
    plan = _with_video_time(V6E, 512.5)
    assert video_seconds(plan) == 512.5 and video_time_includes(plan) == END_TO_END
    unknown = _with_video_time(V6E, None)  # e.g. its decode was cut by a time budget
    assert video_seconds(unknown) == pytest.approx(video_seconds(V6E))
    assert video_time_includes(unknown) == DENOISING_ONLY
    with pytest.raises(PlanFormatError, match="video_time.total_seconds"):
        video_seconds(_with_video_time(V6E, "fast"))


def test_a_comparison_says_when_its_slices_video_times_include_different_parts():
    prices = default_prices()
    both = (slice_row(_with_video_time(V5E, 600.0), 8, prices.price("v5e"), None),
            slice_row(_with_video_time(V6E, 300.0), 8, prices.price("v6e"), None))
    mixed = (both[0], slice_row(V6E, 8, prices.price("v6e"), None))
    workload = {"model": "wan2.1-t2v-14b", "resolution": "1280x720", "frames": 81}
    assert Comparison(workload, both, prices, None, pick_of(both, None)).to_json()["video_time_includes"] == END_TO_END
    doc = Comparison(workload, mixed, prices, None, pick_of(mixed, None)).to_json()
    assert doc["video_time_includes"] == MIXED
    assert [r["video_time_includes"] for r in doc["slices"]] == [END_TO_END, DENOISING_ONLY]


def test_a_plan_without_its_steps_is_refused():
    plan = copy.deepcopy(V6E)
    del plan["workload"]["scheduler"]
    with pytest.raises(PlanFormatError, match="scheduler.steps"):
        video_seconds(plan)


def test_a_slice_row_composes_the_arithmetic():
    row = slice_row(V6E, 8, PRICE, max_video_seconds=1000.0)
    seconds = 50 * V6E["prediction"]["step_seconds"]
    assert (row.topology, row.generation, row.chips, row.steps) == ("v6e:2x4", "v6e", 8, 50)
    assert row.strategy == V6E["strategy"]["key"] and row.placement == V6E["placement"]["name"]
    assert row.video_seconds == pytest.approx(seconds)
    assert row.videos_per_hour == pytest.approx(3600 / seconds)
    assert row.chip_hours_per_video == pytest.approx(8 * seconds / 3600)
    assert row.cost_per_video == pytest.approx(2.0 * 8 * seconds / 3600)
    assert row.meets_target is (seconds <= 1000.0)


def test_a_batch_of_videos_shares_the_run():
    plan = copy.deepcopy(V6E)
    plan["workload"]["shapes"]["cfg_batch"] = 4
    one, two = slice_row(V6E, 8, PRICE, None), slice_row(plan, 8, PRICE, None)
    assert two.videos_per_run == 2 and two.cost_per_video == pytest.approx(one.cost_per_video / 2)


def test_the_comparison_is_strict_json_and_picks_among_the_planned():
    prices = default_prices()
    rows = (slice_row(V5E, 8, ChipPrice("v5e", 1.0, source="t"), 600.0),
            slice_row(V6E, 8, ChipPrice("v6e", 9.0, source="t"), 600.0),
            failed_row(get_topology("v5e:2x2"), prices.price("v5e"), "no strategy fits"))
    comparison = Comparison({"model": "wan2.1-t2v-14b", "resolution": "1280x720", "frames": 81}, rows, prices,
                            600.0, pick_of(rows, 600.0))
    doc = json.loads(json.dumps(comparison.to_json(), allow_nan=False))
    assert [s["topology"] for s in doc["slices"]] == ["v5e:2x4", "v6e:2x4", "v5e:2x2"]
    assert doc["slices"][2]["error"] == "no strategy fits" and doc["slices"][2]["video_seconds"] is None
    # v5e:2x4 takes 524 s, v6e:2x4 275 s: both meet 600 s, and v5e's chip-hours are the cheaper at these prices
    assert doc["pick"]["topology"] == "v5e:2x4"
    assert doc["video_time_includes"] == DENOISING_ONLY


@pytest.mark.parametrize("given, error, fragment", [
    ("v5e:2x4,,v6e:2x4", ArgumentError, "empty entry"),
    ("v5e:2x4, v5e:2x4", ArgumentError, "twice"),
    ("v5e:2x4,v9z:2x2", TopologyError, "v9z"),
])
def test_the_slice_list_is_checked_whole(given, error, fragment):
    with pytest.raises(error, match=fragment):
        parse_slices(given)


def test_the_slice_list():
    assert [t.name for t in parse_slices(" v5e:2x4,v6e:2x2 ")] == ["v5e:2x4", "v6e:2x2"]
    assert [t.name for t in parse_slices(["v5e:2x4"])] == ["v5e:2x4"]


def test_every_slice_compiles_on_one_executor_started_once(monkeypatch):
    """Without an executor given, one pool of compile processes serves every slice (not one per slice)."""
    import aoizora.plan
    import aoizora.stage2
    from aoizora.compare import compare_wan

    started, used = [], []

    class Pool:
        def __init__(self, size):
            started.append(size)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    def plan_space(space, topology, **options):
        used.append((topology.name, options["executor"]))
        plan = V5E if topology.name == "v5e:2x4" else V6E
        return type("Result", (), {"plan": type("P", (), {"data": plan}), "from_cache": True})

    monkeypatch.setattr(aoizora.stage2, "CompileWorkers", Pool)
    monkeypatch.setattr(aoizora.plan, "plan_space", plan_space)
    comparison = compare_wan("wan2.1-t2v-14b", "v5e:2x4,v6e:2x4", "720p", 81, top_k=1)
    assert len(started) == 1 and [n for n, _ in used] == ["v5e:2x4", "v6e:2x4"]
    assert used[0][1] is used[1][1] and isinstance(used[0][1], Pool)
    assert [r.from_cache for r in comparison.rows] == [True, True]
    assert comparison.workload == {"model": "wan2.1-t2v-14b", "resolution": "720p", "frames": 81}
