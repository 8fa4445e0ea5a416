"""The arithmetic of serving on a slice: videos per hour, chip-hours and cost per video, the latency
target, and the cheapest slice that meets it.

Pure functions of numbers, so that each is checked by hand in the tests and the comparison's table
is only their composition. A slice serves `videos_per_run` videos in one run of `video_seconds`
(one video per CFG batch of 2), and is billed for all its chips for the whole run.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

SECONDS_PER_HOUR = 3600.0


def _positive(value: float, name: str) -> float:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number, not {value!r}")
    return float(value)


def videos_per_hour(video_seconds: float, videos_per_run: int = 1) -> float:
    """Videos one slice finishes per hour, running one generation after another."""
    return _positive(videos_per_run, "videos_per_run") * SECONDS_PER_HOUR / _positive(video_seconds, "video_seconds")


def chip_hours_per_video(chips: int, video_seconds: float, videos_per_run: int = 1) -> float:
    """Chip-hours billed for one video: every chip of the slice for the run, shared by its videos."""
    return _positive(chips, "chips") * _positive(video_seconds, "video_seconds") / SECONDS_PER_HOUR \
        / _positive(videos_per_run, "videos_per_run")


def cost_per_video(chip_hours: float, price_per_chip_hour: float | None) -> float | None:
    """What one video costs at a price per chip-hour (None: no price, no cost)."""
    if price_per_chip_hour is None:
        return None
    return _positive(chip_hours, "chip_hours") * _positive(price_per_chip_hour, "price_per_chip_hour")


def meets_target(video_seconds: float, max_video_seconds: float | None) -> bool | None:
    """Whether a video is done within the latency target (None: no target given)."""
    if max_video_seconds is None:
        return None
    return _positive(video_seconds, "video_seconds") <= _positive(max_video_seconds, "max_video_seconds")


@dataclass(frozen=True)
class SliceCandidate:
    """What the pick reads of one slice: its name, video time and cost per video (None: no price)."""

    name: str
    video_seconds: float
    cost_per_video: float | None


@dataclass(frozen=True)
class Pick:
    """The slice chosen (None: none could be) and a sentence saying why."""

    name: str | None
    reason: str


def pick_cheapest(candidates: Sequence[SliceCandidate], max_video_seconds: float | None = None) -> Pick:
    """The cheapest slice per video among those meeting the latency target (all, without one).

    Slices without a price cannot be ranked by cost and are left out, and said so; ties on cost go
    to the faster slice, then to the first listed. When no slice meets the target the pick is None
    and the reason names the fastest slice and its time.
    """
    if not candidates:
        return Pick(None, "no slice was planned")
    meeting = [c for c in candidates if meets_target(c.video_seconds, max_video_seconds) is not False]
    target = "" if max_video_seconds is None else f" within {max_video_seconds:g} s"
    if not meeting:
        fastest = min(candidates, key=lambda c: c.video_seconds)
        return Pick(None, f"no slice makes a video{target}; the fastest is {fastest.name} at "
                          f"{fastest.video_seconds:.1f} s")
    priced = [c for c in meeting if c.cost_per_video is not None]
    unpriced = [c.name for c in meeting if c.cost_per_video is None]
    left_out = f" ({', '.join(unpriced)} not compared: no price)" if unpriced else ""
    if not priced:
        return Pick(None, f"no slice that makes a video{target} has a price{left_out}; pass --prices FILE")
    best = min(priced, key=lambda c: (c.cost_per_video, c.video_seconds))  # min keeps the first of equals
    return Pick(best.name, f"cheapest per video{target}{left_out}")
