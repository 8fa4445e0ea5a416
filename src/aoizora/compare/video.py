"""A plan's video time, as the comparison reads it: the one place that says what a video's time is.

Today it is the denoising steps times the plan's predicted step, the part of a video the planner
predicts; the text encoder, an expert swap and the VAE decode are not in it, and the label says so.
When plans carry the end-to-end video time this function reads that instead, and every number of
`aoizora compare` (videos per hour, chip-hours and cost per video, the latency target) follows.
"""

from __future__ import annotations

from typing import Any

from aoizora.errors import PlanFormatError

#: What `video_seconds` includes, shown beside every video time the comparison prints or writes.
VIDEO_TIME_INCLUDES = "denoising only: steps x predicted step (no text encoder, expert swap or VAE decode)"


def denoising_steps(plan: dict[str, Any]) -> int:
    """The video's denoising steps, from the plan's sampler (`workload.scheduler.steps`)."""
    steps = plan.get("workload", {}).get("scheduler", {}).get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise PlanFormatError(f"plan workload.scheduler.steps is {steps!r}, not a number of denoising steps; "
                              "re-run `aoizora plan`")
    return steps


def video_seconds(plan: dict[str, Any]) -> float:
    """The seconds one generation takes on the plan's slice (what it includes: `VIDEO_TIME_INCLUDES`)."""
    return denoising_steps(plan) * float(plan["prediction"]["step_seconds"])


def videos_per_run(plan: dict[str, Any]) -> int:
    """Videos one generation makes: one per CFG batch of 2 (`workload.shapes.cfg_batch`)."""
    cfg_batch = plan.get("workload", {}).get("shapes", {}).get("cfg_batch", 2)
    if isinstance(cfg_batch, bool) or not isinstance(cfg_batch, int) or cfg_batch < 2:
        raise PlanFormatError(f"plan workload.shapes.cfg_batch is {cfg_batch!r}, not a CFG batch of 2 per video; "
                              "re-run `aoizora plan`")
    return cfg_batch // 2
