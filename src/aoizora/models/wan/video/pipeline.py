"""The Wan pipeline around the transformer(s): which expert runs each step, with which guidance,
on which timesteps — as diffusers' `WanPipeline` / `WanImageToVideoPipeline` run Wan 2.1 and 2.2.

Wan 2.2 A14B carries two experts of Wan 2.1 14B's architecture: the high-noise `transformer`
runs every step whose timestep t >= boundary_ratio × num_train_timesteps, the low-noise
`transformer_2` every step after, each with its own guidance scale (`guidance_scale`,
`guidance_scale_2`). Wan 2.2 TI2V-5B (`expand_timesteps`) is one transformer that takes a timestep
per token: t everywhere, except 0 on the first latent frame's tokens when that frame is the
conditioning image, which is blended into the latent before every call and after the last step.

A diffusers pipeline folder holds `model_index.json` (boundary_ratio, expand_timesteps),
`transformer/` and `transformer_2/` (each a `WanTransformer3DModel`: config.json and safetensors,
possibly sharded), `vae/config.json` (the VAE's stride and latent channels) and
`scheduler/scheduler_config.json` (flow_shift). `load_pipeline_config` and `load_expert_params`
read them; every expert's tensors are validated by name and shape before any is read.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from aoizora.errors import CheckpointError, ShapeError
from aoizora.models.wan.transformer.checkpoint import load_params
from aoizora.models.wan.transformer.config import (
    VAE_STRIDE,
    WAN22_I2V_A14B,
    WAN22_T2V_A14B,
    WAN22_TI2V_5B,
    WAN_I2V_14B,
    WAN_T2V_1_3B,
    WAN_T2V_14B,
    WanConfig,
)
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.models.wan.video.sampling import make_denoise_step

#: diffusers' folder names of the two experts, high-noise first.
EXPERT_FOLDERS = ("transformer", "transformer_2")


@dataclasses.dataclass(frozen=True)
class WanPipelineConfig:
    """A Wan pipeline: its transformer(s), expert boundary, timestep layout and sampling defaults.

    `transformer` is the only expert, or the high-noise one; `transformer_2` the low-noise one.
    `shift`, `steps`, `guidance_scale` and `guidance_scale_2` are the model's published sampling
    settings (Wan-Video/Wan2.2 `wan/configs`: sample_shift, sample_steps, sample_guide_scale).
    """

    transformer: WanConfig
    transformer_2: WanConfig | None = None
    boundary_ratio: float | None = None
    expand_timesteps: bool = False
    shift: float = 5.0
    steps: int = 50
    guidance_scale: float = 5.0
    guidance_scale_2: float | None = None
    num_train_timesteps: int = 1000

    def __post_init__(self) -> None:
        if (self.transformer_2 is None) != (self.boundary_ratio is None):
            raise ShapeError("a two-expert pipeline needs both transformer_2 and boundary_ratio (and one, neither)")
        if self.transformer_2 is not None:
            a, b = self.transformer, self.transformer_2
            if (a.in_channels, a.out_channels, a.patch_size, a.vae_stride) != (
                    b.in_channels, b.out_channels, b.patch_size, b.vae_stride):
                raise ShapeError("the two experts must take the same latents (channels, patch, VAE stride)")

    @property
    def experts(self) -> tuple[WanConfig, ...]:
        return (self.transformer,) if self.transformer_2 is None else (self.transformer, self.transformer_2)

    @property
    def boundary_timestep(self) -> float | None:
        """Steps with timestep >= this run the high-noise expert (None: one expert)."""
        return None if self.boundary_ratio is None else self.boundary_ratio * self.num_train_timesteps

    def expert_of_timestep(self, t: float) -> int:
        """0 (high-noise `transformer`) or 1 (low-noise `transformer_2`), as diffusers chooses."""
        b = self.boundary_timestep
        return 0 if b is None or t >= b else 1

    def expert_per_step(self, scheduler: Any) -> list[int]:
        return [self.expert_of_timestep(float(t)) for t in scheduler.timesteps]

    def guidance(self, expert: int) -> float:
        if expert == 0 or self.guidance_scale_2 is None:
            return self.guidance_scale
        return self.guidance_scale_2

    def scheduler(self, steps: int | None = None, shift: float | None = None) -> Any:
        """The UniPC flow-matching scheduler both diffusers pipelines ship with."""
        from aoizora.models.wan.video.schedulers import UniPCScheduler

        return UniPCScheduler(num_steps=steps or self.steps, shift=self.shift if shift is None else shift,
                              num_train_timesteps=self.num_train_timesteps)

    def replace(self, **changes: Any) -> WanPipelineConfig:
        return dataclasses.replace(self, **changes)

    def with_dtype(self, dtype: Any) -> WanPipelineConfig:
        two = None if self.transformer_2 is None else self.transformer_2.replace(dtype=dtype)
        return self.replace(transformer=self.transformer.replace(dtype=dtype), transformer_2=two)


# Wan 2.1: one transformer, UniPC, 50 steps, guidance 5 (shift 5 at 720p, 3 at 480p: per request).
WAN21_T2V_1_3B_PIPELINE = WanPipelineConfig(WAN_T2V_1_3B)
WAN21_T2V_14B_PIPELINE = WanPipelineConfig(WAN_T2V_14B)
WAN21_I2V_14B_PIPELINE = WanPipelineConfig(WAN_I2V_14B)
# Wan 2.2 (Wan-Video/Wan2.2 wan/configs/wan_t2v_A14B.py, wan_i2v_A14B.py, wan_ti2v_5B.py; the official
# sample_guide_scale is (low noise, high noise), diffusers' guidance_scale is the high-noise one).
WAN22_T2V_A14B_PIPELINE = WanPipelineConfig(WAN22_T2V_A14B, WAN22_T2V_A14B, boundary_ratio=0.875, shift=12.0,
                                            steps=40, guidance_scale=4.0, guidance_scale_2=3.0)
WAN22_I2V_A14B_PIPELINE = WanPipelineConfig(WAN22_I2V_A14B, WAN22_I2V_A14B, boundary_ratio=0.900, shift=5.0,
                                            steps=40, guidance_scale=3.5, guidance_scale_2=3.5)
WAN22_TI2V_5B_PIPELINE = WanPipelineConfig(WAN22_TI2V_5B, expand_timesteps=True, shift=5.0, steps=50,
                                           guidance_scale=5.0)


# --------------------------------------------------------------------------------------------
# diffusers folders
# --------------------------------------------------------------------------------------------
def _read_json(path: Path, required: bool = True) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as exc:
        if not required:
            return {}
        raise CheckpointError(f"pipeline folder is missing {path.name} ({path})") from exc
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {path}: {exc}") from exc


def _component_present(index: dict[str, Any], name: str) -> bool:
    """model_index.json lists a component as [library, class], or [null, null] when absent."""
    entry = index.get(name)
    return isinstance(entry, (list, tuple)) and len(entry) == 2 and entry[1] is not None


def load_pipeline_config(path: str | os.PathLike, dtype: Any = jnp.bfloat16,
                         defaults: WanPipelineConfig | None = None) -> WanPipelineConfig:
    """The pipeline of a diffusers Wan folder: experts from `transformer*/config.json`, the VAE's
    stride from `vae/config.json`, boundary and timestep layout from `model_index.json`, the
    shift from the scheduler's config. Steps and guidance are call arguments in diffusers, not
    stored: they come from `defaults` (or the built-in defaults)."""
    root = Path(path)
    index = _read_json(root / "model_index.json")
    vae = _read_json(root / "vae" / "config.json", required=False)
    stride = (int(vae.get("scale_factor_temporal", VAE_STRIDE[0])),
              int(vae.get("scale_factor_spatial", VAE_STRIDE[1])), int(vae.get("scale_factor_spatial", VAE_STRIDE[2])))
    if not _component_present(index, "transformer"):
        raise CheckpointError(f"pipeline folder {root} has no transformer (the high-noise or only expert)")
    names = ["transformer"] + (["transformer_2"] if _component_present(index, "transformer_2") else [])
    experts = [WanConfig.from_diffusers(_read_json(root / n / "config.json"), dtype=dtype, vae_stride=stride)
               for n in names]
    if vae and experts[0].out_channels != int(vae.get("z_dim", experts[0].out_channels)):
        raise CheckpointError(
            f"transformer predicts {experts[0].out_channels} channels, the VAE's z_dim is {vae['z_dim']}")
    sched = _read_json(root / "scheduler" / "scheduler_config.json", required=False)
    base = defaults or WanPipelineConfig(experts[0])
    boundary = index.get("boundary_ratio")
    if (boundary is None) != (len(experts) == 1):
        raise CheckpointError(
            f"pipeline folder {root}: {len(experts)} transformer(s) but boundary_ratio {boundary!r} "
            "(two experts need a boundary, one expert none)"
        )
    return base.replace(
        transformer=experts[0], transformer_2=experts[1] if len(experts) > 1 else None,
        boundary_ratio=None if boundary is None else float(boundary),
        expand_timesteps=bool(index.get("expand_timesteps", False)),
        shift=float(sched.get("flow_shift", base.shift)),
        num_train_timesteps=int(sched.get("num_train_timesteps", base.num_train_timesteps)),
        guidance_scale_2=base.guidance_scale_2 if boundary is not None else None,
    )


def load_expert_params(path: str | os.PathLike, pipeline: WanPipelineConfig, shardings: Any | None = None,
                       strict: bool = True) -> list[dict]:
    """Every expert's parameters from the pipeline folder (`transformer/`, `transformer_2/`), each
    streamed tensor by tensor like `load_params`. `shardings`: one pytree per expert, or None.
    Both experts are validated from their headers before either is read."""
    from aoizora.models.wan.transformer.checkpoint import validate_checkpoint

    root = Path(path)
    folders = [root / name for name in EXPERT_FOLDERS[: len(pipeline.experts)]]
    for folder, cfg in zip(folders, pipeline.experts, strict=True):
        try:
            validate_checkpoint(folder, cfg, strict=strict)
        except CheckpointError as exc:
            role = "only" if len(folders) == 1 else ("high-noise", "low-noise")[folders.index(folder)]
            raise CheckpointError(f"{role} expert {folder.name}/: {exc}") from exc
    shardings = shardings or [None] * len(folders)
    return [load_params(folder, cfg, shardings=sh, strict=strict)
            for folder, cfg, sh in zip(folders, pipeline.experts, shardings, strict=True)]


# --------------------------------------------------------------------------------------------
# sampling
# --------------------------------------------------------------------------------------------
def first_frame_mask(latent_shape: tuple[int, ...], conditioned: bool) -> np.ndarray:
    """diffusers' TI2V mask (1, 1, T, H, W): 0 on the first latent frame when it is the
    conditioning image, 1 elsewhere."""
    _, _, t, h, w = latent_shape
    mask = np.ones((1, 1, t, h, w), np.float32)
    if conditioned:
        mask[:, :, 0] = 0.0
    return mask


def make_pipeline_steps(pipeline: WanPipelineConfig, scheduler: Any, strategy: Strategy | None = None,
                        mesh: Mesh | None = None) -> list[Callable]:
    """One jitted `denoise_step` per expert, each with that expert's guidance scale."""
    return [make_denoise_step(cfg, scheduler, strategy, mesh, pipeline.guidance(i),
                              expand_timesteps=pipeline.expand_timesteps)
            for i, cfg in enumerate(pipeline.experts)]


def sample_pipeline(pipeline: WanPipelineConfig, steps: list[Callable], expert_params: list[dict],
                    latents: jnp.ndarray, scheduler: Any, text_cond, text_uncond, image=None, condition=None,
                    on_step: Callable[[int, int], None] | None = None) -> jnp.ndarray:
    """All denoising steps, each by the expert diffusers would choose for its timestep.

    `steps` from `make_pipeline_steps`; `expert_params` one pytree per expert. For TI2V
    (`expand_timesteps`) `condition` is the image's latent (1, C, T, H, W), blended into the first
    latent frame; for I2V-A14B it is the mask + image latent concatenated on channels.
    `on_step(step, expert)` is called before each step (tests and progress)."""
    if len(steps) != len(pipeline.experts) or len(expert_params) != len(pipeline.experts):
        raise ShapeError(f"the pipeline has {len(pipeline.experts)} expert(s): pass one step and params per expert")
    state = scheduler.init_state(latents)
    for i, expert in enumerate(pipeline.expert_per_step(scheduler)):
        if on_step is not None:
            on_step(i, expert)
        latents, state = steps[expert](expert_params[expert], latents, state, text_cond, text_uncond, image, condition)
    if pipeline.expand_timesteps and condition is not None:
        mask = jnp.asarray(first_frame_mask(latents.shape, True))
        latents = (1 - mask) * condition.astype(latents.dtype) + mask * latents
    return latents
