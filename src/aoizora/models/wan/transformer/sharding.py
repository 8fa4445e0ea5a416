"""Shardings of parameters and inputs for a strategy on a mesh, and abstract (weightless)
`ShapeDtypeStruct` inputs for lowering/compiling at full size.

A parameter is handed to the program with its sharding, and, when the strategy has a
`weight_tile`, the replicated stacked 16-bit layer matrices also in that tile (a `Format`): libtpu
lays an argument out as the runtime hands it over, and where its matmuls want another tile (TPU7x's
(16,128) against the runtime's (8,128)) it copies each whole stack before the layer loop, a second
HBM buffer of every stacked weight (`HardwareProfile.tile_16bit`). A sharded stack cannot be
handed over so (libtpu overrides its tile) and keeps its copy. `device_put`, `jax.jit`'s
`in_shardings` and `ShapeDtypeStruct` all take the `Format`, so the plan runs in the standard stack.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax.experimental.layout import Format, Layout
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.models.wan.transformer.config import VideoShape, WanConfig
from aoizora.models.wan.transformer.params import ParamSpec, _set, param_dtype, param_table
from aoizora.models.wan.transformer.strategy import Strategy, check_mesh, logical_rules, logical_to_spec


def param_specs(config: WanConfig, strategy: Strategy) -> dict:
    """Pytree of PartitionSpecs (the stored layout of every parameter)."""
    rules = logical_rules(strategy)
    tree: dict = {}
    for s in param_table(config):
        _set(tree, s.path, logical_to_spec(s.axes, rules))
    return tree


def param_shardings(config: WanConfig, strategy: Strategy, mesh: Mesh) -> dict:
    """Pytree of how each parameter is handed to the program: a NamedSharding, or a `Format` (that
    sharding in the strategy's weight tile) for a stacked 16-bit layer matrix. Pass it to
    `load_params(shardings=...)` or `jax.device_put`."""
    check_mesh(strategy, mesh)
    tree: dict = {}
    for s, handed in _handovers(config, strategy, mesh):
        _set(tree, s.path, handed)
    return tree


def abstract_params(config: WanConfig, strategy: Strategy, mesh: Mesh) -> dict:
    """Pytree of sharded `jax.ShapeDtypeStruct`s: the parameters without materialising them."""
    tree: dict = {}
    for s, handed in _handovers(config, strategy, mesh):
        _set(tree, s.path, jax.ShapeDtypeStruct(s.shape, param_dtype(s, config), sharding=handed))
    return tree


def _handovers(config: WanConfig, strategy: Strategy, mesh: Mesh) -> list[tuple[ParamSpec, Any]]:
    rules = logical_rules(strategy)
    return [(s, _handover(s, config, strategy, NamedSharding(mesh, logical_to_spec(s.axes, rules))))
            for s in param_table(config)]


def _handover(spec: ParamSpec, config: WanConfig, strategy: Strategy, sharding: NamedSharding) -> Any:
    """The parameter's sharding, in the strategy's weight tile when it is a replicated stacked
    16-bit matrix (the layer loop's matmul weights, which libtpu would otherwise copy into its
    tile). libtpu 0.0.42.1 lays a sharded parameter out in (8,128) tiles whatever tile it is handed
    in (jax then refuses the program), so a sharded stack keeps the runtime's tile and its copy."""
    tile = strategy.weight_tile
    if tile is None or not (spec.stacked and spec.kind == "linear" and len(spec.shape) == 3):
        return sharding
    if jnp.dtype(param_dtype(spec, config)).itemsize != 2 or not sharding.is_fully_replicated:
        return sharding
    # (2, 1): two 16-bit values packed per 32-bit word, as libtpu tiles every 16-bit array
    return Format(Layout(major_to_minor=(0, 1, 2), tiling=(tuple(tile), (2, 1))), sharding)


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


def abstract_step_inputs(config: WanConfig, video: VideoShape, mesh: Mesh, scheduler: Any,
                         videos: int = 1) -> dict[str, Any]:
    """Abstract arguments of `denoise_step` (`videos` samples; CFG doubles them inside), replicated."""
    _, t, h, w = video.latent_shape(config)
    rep = replicated(mesh)
    sd = jax.ShapeDtypeStruct
    lat = sd((videos, config.out_channels, t, h, w), jnp.float32, sharding=rep)
    state = jax.eval_shape(scheduler.init_state, lat)
    state = jax.tree.map(lambda a: sd(a.shape, a.dtype, sharding=rep), state)
    text = sd((videos, config.text_len, config.text_dim), config.dtype, sharding=rep)
    out = {"latents": lat, "state": state, "text_cond": text, "text_uncond": text, "image": None, "condition": None}
    if config.is_i2v:
        out["image"] = sd((videos, config.image_len, config.image_dim), config.dtype, sharding=rep)
    if config.condition_channels:  # I2V's mask + image latent, concatenated on channels
        out["condition"] = sd((videos, config.condition_channels, t, h, w), jnp.float32, sharding=rep)
    return out
