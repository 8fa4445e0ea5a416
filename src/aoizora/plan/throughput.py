"""Planning for throughput: the slice split into replicas, each with its own plan and batch, for the
most videos per hour (`--objective throughput`; the default objective is one video's time).

For every split of the slice into equal sub-slices (`aoizora.plan.replicas`) whose blocks libtpu
accepts and whose replicas share no link (a split whose blocks are another's turned, 2x1 against
1x2, is planned once), and every batch per replica from 1 video up (until nothing
fits HBM or the cap), the sub-slice is planned as any slice is (`plan_space`, whose caches are keyed
on the slice, so every replica of every split shares them). Videos per hour = replicas x videos per
run x 3600 / video seconds (`aoizora.slice_costs`, `aoizora.plan_video`: the arithmetic and video
time `aoizora compare` uses). The choice is the most videos per hour, ties going to fewer replicas,
then to the smaller batch; the plan is the chosen replica's, with a `replicas` block recording the
split, each replica's chips, and every split and batch tried.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aoizora.defaults import DEFAULT_MAX_VIDEOS_PER_REPLICA
from aoizora.errors import ArgumentError, PlanningError
from aoizora.plan.plan import Plan
from aoizora.plan.planner import PlanResult, plan_space
from aoizora.plan.replicas import (
    Split,
    block_splits,
    contention_reason,
    refused_sub_slice,
    replica_devices,
)
from aoizora.plan_video import video_seconds, video_time_includes
from aoizora.slice_costs import videos_per_hour
from aoizora.store import one_line
from aoizora.topology import Topology
from aoizora.topology.slice import slice_name
from aoizora.workload import StrategySpace

#: A strategy space for a sub-slice and a batch per replica (videos per run).
SpaceFor = Callable[[Topology, int], StrategySpace]


@dataclass(frozen=True)
class Tried:
    """One (split, batch per replica) planned: its plan and videos per hour."""

    split: Split
    videos: int
    result: PlanResult
    video_seconds: float
    videos_per_hour: float


def choose(tried: list[Tried]) -> Tried:
    """The most videos per hour; ties (within a part in 10^9) to fewer replicas, then the smaller batch."""
    if not tried:
        raise PlanningError("no split of the slice could be planned")
    top = max(t.videos_per_hour for t in tried)
    near = [t for t in tried if math.isclose(t.videos_per_hour, top, rel_tol=1e-9)]
    return min(near, key=lambda t: (t.split.count, t.videos))


def turned_reason(split: Split, planned: dict[tuple[int, ...], Split], generation: str) -> str | None:
    """Why `split` is not planned when a split of as many blocks of the same shape turned (1x2
    against 2x1) was: a generation's ICI links are alike in every dimension and its wraparound rule is
    per axis (`HardwareProfile.wraps`), so turned blocks have the same strategies, links and plans;
    None otherwise."""
    same = planned.get(tuple(sorted(split.shape)))
    if same is None or same.shape == split.shape or same.count != split.count:
        return None
    return (f"the blocks of {same.label(generation)} turned: the same plan on the same links, "
            "planned once as that split")


def _row(split: Split, generation: str, **fields: Any) -> dict[str, Any]:
    return {"split": split.label(generation), "count": split.count, "shape": list(split.shape), **fields}


def plan_throughput(space_for: SpaceFor, topology: Topology, *, max_videos: int = DEFAULT_MAX_VIDEOS_PER_REPLICA,
                    console: Any = None, **plan_options: Any) -> PlanResult:
    """The plan with the most videos per hour on `topology`, split into replicas (see the module).

    `space_for(sub_slice, videos)`: the strategy space for one replica's sub-slice at `videos` per run.
    `plan_options` go to `plan_space` for every replica's plan. Raises PlanningError when no split
    and batch could be planned (the message lists why each was not)."""
    if isinstance(max_videos, bool) or not isinstance(max_videos, int) or max_videos < 1:
        raise ArgumentError(f"max_videos_per_replica must be a whole number >= 1, not {max_videos!r}")
    from aoizora.topology import get_topology

    generation, rows, tried = topology.generation, [], []
    planned: dict[tuple[int, ...], Split] = {}  # the blocks planned, by their sorted side lengths
    for split in block_splits(topology.shape):
        reason = (refused_sub_slice(generation, split) or contention_reason(topology, split)
                  or turned_reason(split, planned, generation))
        if reason is not None:
            rows.append(_row(split, generation, not_planned=reason))
            continue
        planned.setdefault(tuple(sorted(split.shape)), split)
        sub = topology if split.count == 1 else get_topology(slice_name(generation, split.shape))
        for videos in range(1, max_videos + 1):
            if console is not None:
                console.print(f"throughput: {split.label(generation)}, {videos} video(s) per replica")
            try:
                result = plan_space(space_for(sub, videos), sub, console=console, **plan_options)
            except PlanningError as exc:  # nothing fits HBM (or nothing compiled): a larger batch fits less
                rows.append(_row(split, generation, videos_per_replica=videos, not_planned=one_line(str(exc), 300)))
                break
            seconds = video_seconds(result.plan.data)
            vph = videos_per_hour(seconds, split.count * videos)
            tried.append(Tried(split, videos, result, seconds, vph))
            rows.append(_row(split, generation, videos_per_replica=videos, videos_per_hour=round(vph, 6),
                             video_seconds=round(seconds, 6), strategy=result.plan.data["strategy"].get("key", "")))
    if not tried:
        reasons = "; ".join(f"{r['split']}: {r['not_planned']}" for r in rows)
        raise PlanningError(f"no split of {topology.name} could be planned for throughput ({one_line(reasons, 600)})")
    best = choose(tried)
    data = dict(best.result.plan.data)
    data["replicas"] = {
        "objective": "throughput", "slice": topology.name, "count": best.split.count,
        "devices": replica_devices(best.split), "videos_per_replica": best.videos,
        "video_seconds": round(best.video_seconds, 6), "video_time_includes": video_time_includes(data),
        "videos_per_hour": round(best.videos_per_hour, 6), "max_videos_per_replica": max_videos,
        "contention": {"checked": True, "shared_links": 0,
                       "basis": "every route between two devices of a replica, in the full slice's dimension-order "
                                "routing: no link is on two replicas' routes"},
        "splits": rows,
    }
    data["notes"] = [*data.get("notes", []), _note(best, tried, topology)]
    cached = all(t.result.from_cache for t in tried)
    return PlanResult(Plan(data), from_cache=cached, stage1=best.result.stage1, outcomes=best.result.outcomes,
                      stage2=best.result.stage2)


def _note(best: Tried, tried: list[Tried], topology: Topology) -> str:
    """The choice in a sentence: against one replica on the whole slice at the same videos per run."""
    gen = topology.generation
    text = (f"throughput: {best.split.label(gen)} at {best.videos} video(s) per replica, "
            f"{best.videos_per_hour:.2f} videos/h")
    in_flight = best.split.count * best.videos
    whole = [t for t in tried if t.split.count == 1 and t.videos == in_flight]
    if best.split.count > 1 and whole:
        ratio = best.videos_per_hour / whole[0].videos_per_hour
        text += (f"; one replica on {topology.name} at {in_flight} video(s) per run makes "
                 f"{whole[0].videos_per_hour:.2f} videos/h ({ratio:.3f}x)")
    return text
