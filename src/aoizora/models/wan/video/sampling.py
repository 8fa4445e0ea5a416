"""The unit the planner plans — `denoise_step` (CFG batch of 2 + guidance + scheduler update) —
and a sampling loop over it; plus the jitted, mesh-aware transformer forward."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from aoizora.errors import ShapeError, StrategyError
from aoizora.models.wan.transformer import attention as attn
from aoizora.models.wan.transformer.config import VideoShape, WanConfig
from aoizora.models.wan.transformer.model import forward
from aoizora.models.wan.transformer.sharding import (
    abstract_forward_inputs,
    abstract_params,
    abstract_step_inputs,
    batch_sharding,
    param_shardings,
    replicated,
)
from aoizora.models.wan.transformer.strategy import Strategy, check_mesh, validate_strategy


def make_forward(config: WanConfig, strategy: Strategy | None = None, mesh: Mesh | None = None) -> Callable:
    """Jitted forward(params, latents, timestep, text, image=None) for a strategy on a mesh
    (single device when both are None)."""
    if strategy is None:
        return jax.jit(lambda p, x, t, c, i=None: forward(p, x, t, c, i, config=config))
    if mesh is None:
        raise StrategyError("a strategy runs on a mesh: pass the mesh with the strategy")
    check_mesh(strategy, mesh)
    validate_strategy(strategy, config)
    bs = [batch_sharding(strategy, mesh, n) for n in (5, 1, 3, 3)]
    fn = lambda p, x, t, c, i: forward(p, x, t, c, i, config=config, strategy=strategy, mesh=mesh)  # noqa: E731
    jitted = jax.jit(fn, in_shardings=(param_shardings(config, strategy, mesh), *bs), out_shardings=bs[0])
    return JitWithDefaults(jitted, 5)


class JitWithDefaults:
    """A jitted function of `nargs` positional arguments whose trailing ones default to None (jit's
    in_shardings need every positional argument); `.lower` likewise, `.jitted` is the jitted one."""

    def __init__(self, jitted: Any, nargs: int) -> None:
        self.jitted = jitted
        self.nargs = nargs

    def __call__(self, *args: Any) -> Any:
        return self.jitted(*args, *([None] * (self.nargs - len(args))))

    def lower(self, *args: Any) -> Any:
        return self.jitted.lower(*args, *([None] * (self.nargs - len(args))))


def denoise_step(
    params: dict,
    latents: jnp.ndarray,
    state: dict,
    text_cond: jnp.ndarray,
    text_uncond: jnp.ndarray,
    image: jnp.ndarray | None = None,
    condition: jnp.ndarray | None = None,
    *,
    config: WanConfig,
    scheduler: Any,
    guidance_scale: float = 5.0,
    strategy: Strategy | None = None,
    mesh: Mesh | None = None,
    expand_timesteps: bool = False,
) -> tuple[jnp.ndarray, dict]:
    """One denoising step: the transformer on the CFG batch (cond, uncond), guidance, scheduler.

    latents (B, C_out, T, H, W) float32 for B videos; text_* (B, 512, text_dim); Wan 2.1 I2V also
    takes the image embedding (B, 257, image_dim); I2V models take the conditioning latent
    (B, C_in − C_out, T, H, W), concatenated on channels. The transformer runs on 2B samples:
    the B conditional ones, then the B unconditional ones. With `expand_timesteps` (Wan 2.2
    TI2V-5B) the transformer gets one timestep per token, and `condition` (1, C_out, T, H, W), if
    given, is the image latent that replaces the first latent frame, whose tokens get timestep 0
    (diffusers' `WanImageToVideoPipeline` with `expand_timesteps`). Returns the next latents and
    scheduler state.
    """
    x = latents
    t = scheduler.timestep(state).astype(jnp.float32)
    if expand_timesteps:
        x, t = _expanded_inputs(config, latents, condition, t)
    elif condition is not None:
        x = jnp.concatenate([x, condition.astype(x.dtype)], axis=1)
    videos = latents.shape[0]
    x = jnp.concatenate([x, x], axis=0).astype(config.dtype)
    t = jnp.broadcast_to(t, (2 * videos, *t.shape))
    text = jnp.concatenate([text_cond, text_uncond], axis=0).astype(config.dtype)
    img = None if image is None else jnp.concatenate([image, image], axis=0).astype(config.dtype)
    out = forward(params, x, t, text, img, config=config, strategy=strategy, mesh=mesh).astype(jnp.float32)
    cond, uncond = out[:videos], out[videos:]
    guided = uncond + guidance_scale * (cond - uncond)
    return scheduler.step(state, guided, latents)


def _expanded_inputs(config: WanConfig, latents: jnp.ndarray, condition: jnp.ndarray | None,
                     t: jnp.ndarray) -> tuple[jnp.ndarray, jnp.ndarray]:
    """TI2V's transformer input and per-token timesteps (tokens in (t, h, w) patch order)."""
    _, c, nt, nh, nw = latents.shape
    keep = jnp.ones((nt, nh, nw), jnp.float32)
    x = latents
    if condition is not None:
        want = (latents.shape[:2], latents.shape[3:])
        if (condition.shape[:2], condition.shape[3:]) != want or condition.shape[2] not in (1, nt):
            raise ShapeError(f"the TI2V condition is an image latent (1, {c}, 1 or {nt}, {nh}, {nw}), "
                             f"got {condition.shape}")
        keep = keep.at[0].set(0.0)
        x = (1 - keep) * condition.astype(latents.dtype) + keep * latents
    pt, ph, pw = config.patch_size
    return x, (keep[::pt, ::ph, ::pw] * t).reshape(-1)


def make_denoise_step(config: WanConfig, scheduler: Any, strategy: Strategy | None = None, mesh: Mesh | None = None,
                      guidance_scale: float = 5.0, expand_timesteps: bool = False,
                      compiler_options: dict[str, str] | None = None, videos: int = 1) -> Callable:
    """Jitted denoise_step(params, latents, state, text_cond, text_uncond, image=None, condition=None)
    for a strategy on a mesh, for `videos` videos a step (a CFG batch of 2 × videos). Latents/state/
    conditions are replicated; params use the strategy's shardings; activations are sharded inside.
    `compiler_options`: libtpu/XLA flags of the compile (a plan's `compiler_options()`, so the
    program run is the program planned)."""
    def fn(params, latents, state, text_cond, text_uncond, image=None, condition=None):
        return denoise_step(params, latents, state, text_cond, text_uncond, image, condition, config=config,
                            scheduler=scheduler, guidance_scale=guidance_scale, strategy=strategy, mesh=mesh,
                            expand_timesteps=expand_timesteps)

    options = dict(compiler_options) if compiler_options else None
    if strategy is None:
        return jax.jit(fn, compiler_options=options)
    if mesh is None:
        raise StrategyError("a strategy runs on a mesh: pass the mesh with the strategy")
    check_mesh(strategy, mesh)
    validate_strategy(strategy, config, batch=2 * videos)
    rep = replicated(mesh)
    ps = param_shardings(config, strategy, mesh)
    return JitWithDefaults(jax.jit(fn, in_shardings=(ps, rep, rep, rep, rep, rep, rep), out_shardings=(rep, rep),
                                   compiler_options=options), 7)


def sample(step_fn: Callable, params: dict, latents: jnp.ndarray, scheduler: Any, text_cond, text_uncond,
           image=None, condition=None) -> jnp.ndarray:
    """Run all the scheduler's steps with a (jitted) step function from `make_denoise_step`."""
    state = scheduler.init_state(latents)
    for _ in range(scheduler.num_steps):
        latents, state = step_fn(params, latents, state, text_cond, text_uncond, image, condition)
    return latents


def lower_denoise_step(config: WanConfig, video: VideoShape, strategy: Strategy, mesh: Mesh, scheduler: Any,
                       guidance_scale: float = 5.0):
    """`jax.jit(denoise_step).lower(...)` from abstract, sharded inputs — no weights materialised."""
    validate_strategy(strategy, config, video, batch=2, num_devices=mesh.devices.size)
    fn: Any = make_denoise_step(config, scheduler, strategy, mesh, guidance_scale)  # a jitted function
    a = abstract_step_inputs(config, video, mesh, scheduler)
    return fn.lower(abstract_params(config, strategy, mesh), a["latents"], a["state"], a["text_cond"],
                    a["text_uncond"], a["image"], a["condition"])


def lower_forward(config: WanConfig, video: VideoShape, strategy: Strategy, mesh: Mesh, batch: int = 2):
    """`jax.jit(forward).lower(...)` from abstract, sharded inputs (the transformer alone)."""
    validate_strategy(strategy, config, video, batch=batch, num_devices=mesh.devices.size)
    fn: Any = make_forward(config, strategy, mesh)  # a jitted function
    a = abstract_forward_inputs(config, video, strategy, mesh, batch)
    return fn.lower(abstract_params(config, strategy, mesh), a["latents"], a["timestep"], a["text"], a["image"])


def opaque_kernel_costs(config: WanConfig, video: VideoShape, strategy: Strategy, mesh: Mesh,
                        batch: int = 2) -> list[attn.KernelCost]:
    """Per-device FLOPs/bytes of every opaque kernel (Pallas splash call) one transformer forward
    emits for this strategy on this mesh (empty when the mesh is not TPU: the XLA kernel is
    visible to the compiler's own cost analysis). `calls` counts layers × uses per forward;
    a `denoise_step` runs one forward."""
    a = abstract_forward_inputs(config, video, strategy, mesh, batch)
    p = abstract_params(config, strategy, mesh)
    log = attn.KernelLog()
    jax.eval_shape(lambda *args: forward(*args, config=config, strategy=strategy, mesh=mesh, kernels=log),
                   p, a["latents"], a["timestep"], a["text"], a["image"])
    return log.kernels
