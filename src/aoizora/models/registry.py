"""Models the CLI can plan by name, and the resolutions it understands."""

from __future__ import annotations

import dataclasses
import re
from typing import TYPE_CHECKING, Any

from aoizora.errors import ShapeError
from aoizora.models.wan.transformer.config import VideoShape, WanConfig
from aoizora.models.wan.video.pipeline import (
    WAN21_I2V_14B_PIPELINE,
    WAN21_T2V_1_3B_PIPELINE,
    WAN21_T2V_14B_PIPELINE,
    WAN22_I2V_A14B_PIPELINE,
    WAN22_T2V_A14B_PIPELINE,
    WAN22_TI2V_5B_PIPELINE,
    WanPipelineConfig,
)
from aoizora.workload import StrategySpace, register_plan_reader

if TYPE_CHECKING:
    from aoizora.models.wan.vae.config import WanVAEConfig

PIPELINES: dict[str, WanPipelineConfig] = {
    "wan2.1-t2v-1.3b": WAN21_T2V_1_3B_PIPELINE,
    "wan2.1-t2v-14b": WAN21_T2V_14B_PIPELINE,
    "wan2.1-i2v-14b": WAN21_I2V_14B_PIPELINE,
    "wan2.2-t2v-a14b": WAN22_T2V_A14B_PIPELINE,
    "wan2.2-i2v-a14b": WAN22_I2V_A14B_PIPELINE,
    "wan2.2-ti2v-5b": WAN22_TI2V_5B_PIPELINE,
}


def _wan_space_type() -> type[StrategySpace[Any]]:
    from aoizora.models.wan.space.space import WanSpace

    return WanSpace


register_plan_reader(PIPELINES, _wan_space_type)  # a plan of any of them is checked as a Wan plan

#: The transformer of each model (the high-noise expert of the two-expert ones).
MODELS: dict[str, WanConfig] = {name: p.transformer for name, p in PIPELINES.items()}

# Wan's standard sizes (width x height): 480p is 832x480, 720p is 1280x720 — or 1280x704 on the
# Wan 2.2 VAE, whose 16x spatial stride with the 2x2 patch needs multiples of 32
# (Wan-Video/Wan2.2 wan/configs/__init__.py, SUPPORTED_SIZES of ti2v-5B).
RESOLUTIONS: dict[str, tuple[int, int]] = {"480p": (832, 480), "720p": (1280, 720)}
RESOLUTIONS_32: dict[str, tuple[int, int]] = {"480p": (832, 480), "720p": (1280, 704)}


def model_key(name: str) -> str:
    """The canonical name of a model (case and spaces ignored); ShapeError for an unknown one."""
    key = name.strip().lower()
    if key not in PIPELINES:
        raise ShapeError(f"unknown model {name!r}; choose one of: {', '.join(PIPELINES)}")
    return key


def model_config(name: str) -> WanConfig:
    return MODELS[model_key(name)]


def pipeline_config(name: str) -> WanPipelineConfig:
    return PIPELINES[model_key(name)]


def parse_resolution(text: str, config: WanConfig | None = None) -> tuple[int, int]:
    """`480p`, `720p` or `WIDTHxHEIGHT` -> (width, height); named sizes follow the model's VAE."""
    key = text.strip().lower()
    named = RESOLUTIONS
    if config is not None and config.vae_stride[1] * config.patch_size[1] == 32:
        named = RESOLUTIONS_32
    if key in named:
        return named[key]
    m = re.fullmatch(r"([0-9]{1,6})x([0-9]{1,6})", key)
    if not m:
        raise ShapeError(f"malformed resolution {text!r}; use 480p, 720p or WIDTHxHEIGHT such as 1280x720")
    return int(m.group(1)), int(m.group(2))


def video_shape(config: WanConfig, resolution: str, frames: int) -> VideoShape:
    """The video geometry, validated against the model (frames 4n+1, sizes multiples of 16 or 32)."""
    width, height = parse_resolution(resolution, config)
    video = VideoShape(frames=frames, height=height, width=width)
    video.validate(config)
    return video


def model_vae(key: str) -> WanVAEConfig:
    """The VAE a Wan model decodes with, in MaxDiffusion's compute dtype (float32): Wan 2.2's for
    TI2V-5B, Wan 2.1's for the others (the models' `vae/config.json` on the Hugging Face Hub)."""
    from aoizora.models.wan.vae.config import WAN21_VAE, WAN22_VAE
    from aoizora.models.wan.vae.sharding import COMPUTE_DTYPE

    return (WAN22_VAE if key == "wan2.2-ti2v-5b" else WAN21_VAE).replace(dtype=COMPUTE_DTYPE)


def wan_space(model: str, resolution: str, frames: int, *, generation: str | None, expert_residency: str = "both",
              rope_partner: str | None = None, ulysses_exchange: str | None = None, steps: int | None = None,
              splash_cost_estimate: bool | None = None, **kwargs):
    """The Stage 1 strategy space of a named Wan model at a video shape. Wan 2.1 models plan
    their single transformer; Wan 2.2 ones their pipeline (one expert's step, both experts' HBM,
    per-token timesteps) with `expert_residency` "both" or "swap". `generation` is the slice's
    (``topology.generation``): every strategy runs splash blocks fitted to its lengths and to that
    generation's VMEM, as `aoizora plan` and `aoizora bench` search; None leaves each call the
    kernel's own pick (a space `aoizora plan` does not search, hence no default). `rope_partner`
    replaces every transformer's `WanConfig.rope_partner` (None: the model's own form), and
    `ulysses_exchange` its `WanConfig.ulysses_exchange`, `splash_cost_estimate` its
    `WanConfig.splash_cost_estimate`. `steps` replaces the sampler's step count (None:
    the model's default sampler). Other keywords go to the space (`WanSpace`), among them `vae`: the VAE
    whose decode the space's plans compile and cost for their video time (`model_vae(model)`, as
    `aoizora plan` and `plan_wan` pass it); without it a plan says its decode was not costed."""
    from aoizora.models.wan.space.pipeline_space import WanPipelineSpace
    from aoizora.models.wan.space.space import WanSpace

    key = model_key(model)
    pipeline = PIPELINES[key]
    forms = {k: v for k, v in (("rope_partner", rope_partner), ("ulysses_exchange", ulysses_exchange),
                               ("splash_cost_estimate", splash_cost_estimate)) if v is not None}
    if forms:
        pipeline = dataclasses.replace(
            pipeline, transformer=pipeline.transformer.replace(**forms),
            transformer_2=pipeline.transformer_2 and pipeline.transformer_2.replace(**forms))
    video = video_shape(pipeline.transformer, resolution, frames)
    if key.startswith("wan2.1-"):
        space = WanSpace(pipeline.transformer, video, model_name=key, generation=generation, **kwargs)
    else:
        space = WanPipelineSpace(pipeline, video, residency=expert_residency, model_name=key, generation=generation,
                                 **kwargs)
    if steps is not None and steps != space.scheduler.num_steps:
        space.scheduler = dataclasses.replace(space.scheduler, num_steps=steps)
    return space
