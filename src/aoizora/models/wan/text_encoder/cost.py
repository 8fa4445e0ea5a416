"""The time of a Wan video's text encoding, where MaxDiffusion runs it: on the host CPU.

MaxDiffusion (7cfb8801) runs UMT5-XXL in PyTorch, float32, on the host (`data/maxdiffusion_pipeline.json`,
`text_encoder`), not on the TPU slice, so there is no TPU program to compile and cost. The time is
estimated from MaxDiffusion's own published figure for that encoder (about 10 s per call of one
prompt), two calls per generation (prompts and negative prompts) each over the video's prompts.
Nothing here is fitted to a measurement of aoizora's. MaxDiffusion's printed `generation_time` does
not include it: the warmup encodes the same prompts first and the timed run reads them from its
cache (`cached_in_generation_time`).
"""

from __future__ import annotations

import dataclasses
import json
from functools import cache
from importlib import resources
from typing import Any

from aoizora.errors import ShapeError


@cache
def pipeline_facts() -> dict[str, Any]:
    """`data/maxdiffusion_pipeline.json`: what MaxDiffusion runs around the denoising steps."""
    return json.loads(resources.files("aoizora").joinpath("data/maxdiffusion_pipeline.json").read_text())


@dataclasses.dataclass(frozen=True)
class TextEncodeCost:
    """One generation's text encoding: where it runs, how it is estimated, and the estimate."""

    device: str
    framework: str
    prompts: int  # prompts per call (the videos of one generation)
    calls: int
    seconds: float
    basis: str
    in_generation_time: bool  # whether MaxDiffusion's printed generation_time includes it

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def text_encode_cost(videos: int) -> TextEncodeCost:
    """The text encoding of a generation of `videos` videos, as MaxDiffusion runs it."""
    if videos < 1:
        raise ShapeError(f"a generation has at least one video; got {videos}")
    facts = pipeline_facts()
    enc = facts["text_encoder"]
    per_call = float(enc["seconds_per_call"])
    calls = int(enc["calls_per_generation"])
    basis = (f"estimated, not compiled: {enc['device']}, {enc['framework']}, {enc['dtype']}; {calls} calls of "
             f"{videos} prompt(s) at {per_call:g} s per prompt, MaxDiffusion's own figure "
             f"({facts['repository']} {enc['source'].split(' ')[0]} @ {facts['commit'][:8]})")
    return TextEncodeCost(device=enc["device"], framework=enc["framework"], prompts=videos, calls=calls,
                          seconds=calls * videos * per_call, basis=basis,
                          in_generation_time=not enc["cached_in_generation_time"])
