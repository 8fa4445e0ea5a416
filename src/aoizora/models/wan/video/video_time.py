"""One Wan video's time end to end, as a plan predicts it: the parts and their sum (`VideoTime`).

The parts, in the order MaxDiffusion runs them (`data/maxdiffusion_pipeline.json`):

* text encoding — on the host CPU in MaxDiffusion, estimated (`text_encode_cost`), not compiled;
* the denoising steps — the plan's step (Q2 of the chosen pair) times the sampler's steps. The step
  program denoises the CFG batch (conditional and unconditional halves of every video) in one
  call, as MaxDiffusion's does, so the step's time already holds both halves;
* the expert swap of a two-expert model (Wan 2.2 A14B) — 0 when both experts stay in HBM (what
  MaxDiffusion does), else the host-to-HBM copies of `space.pipeline_space`;
* the VAE decode — its program compiled for the slice and costed by Q2 (`aoizora.stage2.companions`).

`maxdiffusion_generation_seconds` is the same sum as MaxDiffusion's printed `generation_time` counts
it: without the text encoding, which its timed run reads from the cache its warmup filled.
A part that is unknown (the decode not compiled, a swap over an unpublished link) leaves the sums
unknown (None) and says why in its basis.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from aoizora.errors import ShapeError
from aoizora.models.wan.text_encoder.cost import TextEncodeCost


@dataclasses.dataclass(frozen=True)
class VideoTime:
    """A generation of `videos` videos, its parts in seconds (None: unknown, see the basis)."""

    videos: int
    text_encode: TextEncodeCost
    steps: int
    step_seconds: float
    expert_swap_seconds: float | None
    expert_swap_basis: str
    vae_decode_seconds: float | None
    vae_decode_basis: str

    def __post_init__(self) -> None:
        if self.videos < 1 or self.steps < 1 or self.step_seconds < 0:
            raise ShapeError(f"a video time needs videos >= 1, steps >= 1 and a step time >= 0; got {self.videos}, "
                             f"{self.steps}, {self.step_seconds}")

    @property
    def denoise_seconds(self) -> float:
        return self.steps * self.step_seconds

    @property
    def total_seconds(self) -> float | None:
        """Text encoding, steps, swap and decode: the generation end to end (None if a part is unknown)."""
        rest = self.maxdiffusion_generation_seconds
        if rest is None:
            return None
        return rest + (0.0 if self.text_encode.in_generation_time else self.text_encode.seconds)

    @property
    def maxdiffusion_generation_seconds(self) -> float | None:
        """The generation as MaxDiffusion's `generation_time` times it (None if a part is unknown)."""
        if self.expert_swap_seconds is None or self.vae_decode_seconds is None:
            return None
        text = self.text_encode.seconds if self.text_encode.in_generation_time else 0.0
        return text + self.denoise_seconds + self.expert_swap_seconds + self.vae_decode_seconds

    @property
    def seconds_per_video(self) -> float | None:
        total = self.total_seconds
        return None if total is None else total / self.videos

    def to_json(self) -> dict[str, Any]:
        return {
            "videos": self.videos,
            "total_seconds": self.total_seconds,
            "seconds_per_video": self.seconds_per_video,
            "maxdiffusion_generation_seconds": self.maxdiffusion_generation_seconds,
            "text_encode": self.text_encode.to_json(),
            "denoise": {"steps": self.steps, "step_seconds": self.step_seconds, "seconds": self.denoise_seconds},
            "expert_swap": {"seconds": self.expert_swap_seconds, "basis": self.expert_swap_basis},
            "vae_decode": {"seconds": self.vae_decode_seconds, "basis": self.vae_decode_basis},
        }


def decode_part(cost: dict[str, Any] | None) -> tuple[float | None, str]:
    """(seconds, basis) of the VAE decode from its companion cost's JSON (None: not asked for)."""
    if cost is None:
        return None, "not costed: planned without the VAE decode (`aoizora plan --no-vae-decode`)"
    if "dropped" in cost:
        return None, f"not costed: {cost['label']}: {cost['dropped']}"
    cached = ", compile read from the cache" if cost.get("cached") else ""
    sim = cost.get("sim_seconds")
    return float(cost["seconds"]), (f"compiled for the slice and costed by Q2 ({cost['label']}, mesh "
                                    f"{'x'.join(map(str, cost['mesh']))}{cached}"
                                    + (f"; simulator {sim:.3f} s" if sim is not None else "") + ")")
