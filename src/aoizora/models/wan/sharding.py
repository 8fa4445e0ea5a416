"""Shardings of parameters and inputs for a strategy on a mesh, and abstract (weightless)
`ShapeDtypeStruct` inputs for lowering/compiling at full size."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from aoizora.models.wan.config import VideoShape, WanConfig
from aoizora.models.wan.params import param_dtype, param_table, _set
from aoizora.models.wan.strategy import Strategy, check_mesh, logical_rules, logical_to_spec


def param_specs(config: WanConfig, strategy: Strategy) -> dict:
    """Pytree of PartitionSpecs (the stored layout of every parameter)."""
    rules = logical_rules(strategy)
    tree: dict = {}
    for s in param_table(config):
        _set(tree, s.path, logical_to_spec(s.axes, rules))
    return tree


def param_shardings(config: WanConfig, strategy: Strategy, mesh: Mesh) -> dict:
    """Pytree of NamedShardings for the parameters (pass to `load_params(shardings=...)`)."""
    check_mesh(strategy, mesh)
    return jax.tree.map(lambda spec: NamedSharding(mesh, spec), param_specs(config, strategy),
                        is_leaf=lambda x: isinstance(x, P))


def abstract_params(config: WanConfig, strategy: Strategy, mesh: Mesh) -> dict:
    """Pytree of sharded `jax.ShapeDtypeStruct`s: the parameters without materialising them."""
    rules = logical_rules(strategy)
    tree: dict = {}
    for s in param_table(config):
        sh = NamedSharding(mesh, logical_to_spec(s.axes, rules))
        _set(tree, s.path, jax.ShapeDtypeStruct(s.shape, param_dtype(s, config), sharding=sh))
    return tree


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def batch_sharding(strategy: Strategy, mesh: Mesh, ndim: int) -> NamedSharding:
    rules = logical_rules(strategy)
    return NamedSharding(mesh, logical_to_spec(("batch",) + (None,) * (ndim - 1), rules))


def abstract_forward_inputs(config: WanConfig, video: VideoShape, strategy: Strategy, mesh: Mesh,
                            batch: int = 2) -> dict[str, Any]:
    """Abstract arguments of the transformer forward: latents, timestep, text (, image)."""
    c, t, h, w = video.latent_shape(config)
    sd = jax.ShapeDtypeStruct
    out = {
        "latents": sd((batch, c, t, h, w), config.dtype, sharding=batch_sharding(strategy, mesh, 5)),
        "timestep": sd((batch,), jnp.float32, sharding=batch_sharding(strategy, mesh, 1)),
        "text": sd((batch, config.text_len, config.text_dim), config.dtype, sharding=batch_sharding(strategy, mesh, 3)),
        "image": None,
    }
    if config.is_i2v:
        out["image"] = sd((batch, config.image_len, config.image_dim), config.dtype,
                          sharding=batch_sharding(strategy, mesh, 3))
    return out


def abstract_step_inputs(config: WanConfig, video: VideoShape, mesh: Mesh, scheduler: Any) -> dict[str, Any]:
    """Abstract arguments of `denoise_step` (one sample; CFG doubles it inside), replicated."""
    _, t, h, w = video.latent_shape(config)
    rep = replicated(mesh)
    sd = jax.ShapeDtypeStruct
    lat = sd((1, config.out_channels, t, h, w), jnp.float32, sharding=rep)
    state = jax.eval_shape(scheduler.init_state, lat)
    state = jax.tree.map(lambda a: sd(a.shape, a.dtype, sharding=rep), state)
    text = sd((1, config.text_len, config.text_dim), config.dtype, sharding=rep)
    out = {"latents": lat, "state": state, "text_cond": text, "text_uncond": text, "image": None, "condition": None}
    if config.is_i2v:
        out["image"] = sd((1, config.image_len, config.image_dim), config.dtype, sharding=rep)
    if config.condition_channels:  # I2V's mask + image latent, concatenated on channels
        out["condition"] = sd((1, config.condition_channels, t, h, w), jnp.float32, sharding=rep)
    return out
