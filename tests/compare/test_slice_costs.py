"""The arithmetic of choosing a slice, checked by hand."""

from __future__ import annotations

import math

import pytest

from aoizora.slice_costs import (
    SliceCandidate,
    chip_hours_per_video,
    cost_per_video,
    meets_target,
    pick_cheapest,
    videos_per_hour,
)


def test_videos_per_hour():
    assert videos_per_hour(600.0) == pytest.approx(6.0)
    assert videos_per_hour(600.0, videos_per_run=2) == pytest.approx(12.0)
    assert videos_per_hour(7200.0) == pytest.approx(0.5)


def test_chip_hours_per_video_bills_every_chip_for_the_run():
    assert chip_hours_per_video(8, 1800.0) == pytest.approx(4.0)  # 8 chips for half an hour
    assert chip_hours_per_video(8, 1800.0, videos_per_run=2) == pytest.approx(2.0)
    assert chip_hours_per_video(4, 900.0) == pytest.approx(1.0)


def test_cost_per_video_needs_a_price():
    assert cost_per_video(4.0, 2.5) == pytest.approx(10.0)
    assert cost_per_video(4.0, None) is None


@pytest.mark.parametrize("bad", [0, -1.0, math.nan, math.inf])
def test_the_arithmetic_refuses_what_is_not_a_positive_number(bad):
    for call in (lambda: videos_per_hour(bad), lambda: chip_hours_per_video(8, bad),
                 lambda: cost_per_video(1.0, bad), lambda: meets_target(bad, 10.0)):
        with pytest.raises(ValueError, match="positive finite"):
            call()


def test_meets_target_is_inclusive_and_absent_without_one():
    assert meets_target(10.0, 10.0) is True
    assert meets_target(10.5, 10.0) is False
    assert meets_target(10.5, None) is None


A = SliceCandidate("a", video_seconds=100.0, cost_per_video=3.0)
B = SliceCandidate("b", video_seconds=300.0, cost_per_video=1.0)
C = SliceCandidate("c", video_seconds=50.0, cost_per_video=None)  # no price


def test_without_a_target_the_cheapest_priced_slice_is_picked_and_the_unpriced_named():
    pick = pick_cheapest([A, B, C])
    assert pick.name == "b"
    assert "c not compared: no price" in pick.reason


def test_the_target_leaves_out_the_slow_slices():
    pick = pick_cheapest([A, B, C], max_video_seconds=200.0)
    assert pick.name == "a" and "within 200 s" in pick.reason


def test_when_no_slice_meets_the_target_none_is_picked_and_the_fastest_named():
    pick = pick_cheapest([A, B], max_video_seconds=20.0)
    assert pick.name is None
    assert "no slice makes a video within 20 s" in pick.reason and "fastest is a at 100.0 s" in pick.reason


def test_when_only_unpriced_slices_meet_the_target_none_is_picked():
    pick = pick_cheapest([A, B, C], max_video_seconds=60.0)
    assert pick.name is None and "has a price" in pick.reason and "--prices" in pick.reason


def test_a_tie_on_cost_goes_to_the_faster_slice_then_the_first():
    slow, fast = SliceCandidate("slow", 200.0, 1.0), SliceCandidate("fast", 100.0, 1.0)
    assert pick_cheapest([slow, fast]).name == "fast"
    assert pick_cheapest([fast, SliceCandidate("again", 100.0, 1.0)]).name == "fast"


def test_nothing_to_pick_from():
    assert pick_cheapest([]).name is None
