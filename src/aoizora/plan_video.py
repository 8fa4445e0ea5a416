"""A plan's video time, as the comparison reads it: the one place that says what a video's time is.

A plan's `video_time` (`aoizora.models.wan.video.video_time`) holds one generation end to end: the text
encoding, the denoising steps, an expert swap and the VAE decode. Where its total is known the
comparison reads it. A plan without one (written before plans carried it, or whose decode was not
costed: `--no-vae-decode`, a time budget) is read as its denoising steps alone, and every number
drawn from it says so (`video_time_includes`): a comparison never mixes the two bases unseen.
"""

from __future__ import annotations

from typing import Any

from aoizora.errors import PlanFormatError

END_TO_END = "end to end: text encoding, denoising steps, expert swap and VAE decode (the plan's video_time)"
DENOISING_ONLY = "denoising only: steps x predicted step (no text encoder, expert swap or VAE decode)"
#: What a comparison's video time includes when its slices differ in what their plans cost.
MIXED = "differs by slice (see each slice's video_time_includes)"


def denoising_steps(plan: dict[str, Any]) -> int:
    """The video's denoising steps, from the plan's sampler (`workload.scheduler.steps`)."""
    steps = plan.get("workload", {}).get("scheduler", {}).get("steps")
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise PlanFormatError(f"plan workload.scheduler.steps is {steps!r}, not a number of denoising steps; "
                              "re-run `aoizora plan`")
    return steps


def _end_to_end_seconds(plan: dict[str, Any]) -> float | None:
    """The plan's `video_time.total_seconds`, None where the plan has no known total."""
    total = (plan.get("video_time") or {}).get("total_seconds")
    if total is None:
        return None
    if isinstance(total, bool) or not isinstance(total, int | float) or not total > 0:
        raise PlanFormatError(f"plan video_time.total_seconds is {total!r}, not a positive number of seconds; "
                              "re-run `aoizora plan`")
    return float(total)


def video_time_includes(plan: dict[str, Any]) -> str:
    """What `video_seconds(plan)` includes: END_TO_END or DENOISING_ONLY."""
    return END_TO_END if _end_to_end_seconds(plan) is not None else DENOISING_ONLY


def video_seconds(plan: dict[str, Any]) -> float:
    """The seconds one generation takes on the plan's slice: the plan's end-to-end video time where
    it has one, else its denoising steps times its step (`video_time_includes` says which)."""
    total = _end_to_end_seconds(plan)
    if total is not None:
        return total
    return denoising_steps(plan) * float(plan["prediction"]["step_seconds"])


def videos_per_run(plan: dict[str, Any]) -> int:
    """Videos one generation makes: one per CFG batch of 2 (`workload.shapes.cfg_batch`)."""
    cfg_batch = plan.get("workload", {}).get("shapes", {}).get("cfg_batch", 2)
    if isinstance(cfg_batch, bool) or not isinstance(cfg_batch, int) or cfg_batch < 2:
        raise PlanFormatError(f"plan workload.shapes.cfg_batch is {cfg_batch!r}, not a CFG batch of 2 per video; "
                              "re-run `aoizora plan`")
    return cfg_batch // 2


def common_basis(bases: list[str]) -> str:
    """What a comparison's video times include: their one basis, or MIXED (none planned: END_TO_END)."""
    distinct = set(bases)
    if len(distinct) > 1:
        return MIXED
    return distinct.pop() if distinct else END_TO_END
