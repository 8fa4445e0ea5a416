"""The Wan VAE decode sharded as MaxDiffusion shards it, over its own mesh of the slice's devices.

What MaxDiffusion does, read from its source at commit 7cfb8801 (github.com/AI-Hypercomputer/maxdiffusion;
no code of it is copied):

- Its own mesh (`src/maxdiffusion/pipelines/wan/wan_pipeline.py`, `_create_common_components`): the
  transformer's device array (`max_utils.create_device_mesh(config)`) flattened and reshaped to
  (devices / vae_spatial, vae_spatial), axes `("redundant", "vae_spatial")`. Every Wan config
  (`src/maxdiffusion/configs/base_wan_*.yml`) sets `vae_spatial: -1`, which means all devices, so the
  mesh is (1, devices): one spatial axis over the whole slice.
- Activations (`src/maxdiffusion/models/wan/autoencoder_kl_wan.py`): channels last, (batch, frames,
  height, width, channels), constrained to `P("redundant", None, None, "vae_spatial", None)`, the
  width split over `vae_spatial`, at the input of every causal 3D convolution (`WanCausalConv3d`), at
  each decode chunk's input and output and on the scan's carried caches (`AutoencoderKLWan._decode`).
- Weights: each causal 3D convolution's kernel is split on its output channels over `vae_spatial`
  when they divide by its size, else replicated; the resamplers' 2D convolutions and the attention's
  `to_qkv` are annotated `conv_out`, its `proj` `conv_in`, which the configs' `vae_logical_axis_rules`
  map to `vae_spatial` (output channels, and the proj's input channels); biases and norm gains carry no
  annotation and are replicated. `replicate_vae: False` in every Wan config keeps these annotations.
- Dtypes: `vae_dtype: 'float32'` (the convolutions compute in float32), while `load_vae` casts the
  loaded weights to `weights_dtype` (`'bfloat16'` in the Wan configs), not to `vae_weights_dtype`:
  the weights sit in HBM in bfloat16 and are promoted to float32 per convolution. `_decode` casts the
  latents to the convolution dtype (float32).
- Frame by frame: `vae_decode_chunk: 1` decodes one latent frame per scan step, as
  `aoizora.models.wan.vae.decoder` does; `vae_decode_pass` then maps [−1, 1] to uint8 in the same executable.

`aoizora.stage2.vae_decode` compiles this for a slice and costs it with Q2.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.models.wan.transformer.params import _set
from aoizora.models.wan.vae.config import WAN21_VAE, WanVAEConfig, decode_shapes
from aoizora.models.wan.vae.decoder import decode_latents
from aoizora.models.wan.vae.params import vae_param_table
from aoizora.placement import MeshSpec

#: MaxDiffusion's VAE mesh axes (wan_pipeline.py at 7cfb8801).
REDUNDANT, SPATIAL = "redundant", "vae_spatial"
#: The activations' spec, channels last: width over `vae_spatial`, batch over `redundant`.
ACTIVATION_SPEC = P(REDUNDANT, None, None, SPATIAL, None)
#: `vae_dtype` and `weights_dtype` of MaxDiffusion's Wan configs: compute float32, weights bfloat16.
COMPUTE_DTYPE = jnp.float32
WEIGHTS_DTYPE = jnp.bfloat16


def vae_mesh_spec(num_devices: int, vae_spatial: int = -1) -> MeshSpec:
    """MaxDiffusion's VAE mesh of `num_devices`: (devices / vae_spatial, vae_spatial), −1 = all devices."""
    spatial = num_devices if vae_spatial == -1 else vae_spatial
    if spatial < 1 or num_devices % spatial:
        raise ValueError(f"total devices ({num_devices}) must be a multiple of vae_spatial ({spatial})")
    return MeshSpec((REDUNDANT, SPATIAL), (num_devices // spatial, spatial))


def param_spec(path: tuple[str, ...], shape: tuple[int, ...], spatial: int) -> P:
    """The partition spec MaxDiffusion gives the decoder parameter at `path` (aoizora's pytree path) of
    `shape` on a `vae_spatial` axis of `spatial` devices: convolution kernels split on their output
    channels when they divide (the attention's proj on its input channels), everything else replicated."""
    if path[-1] != "w":
        return P()
    if path[-2:] == ("proj", "w") and "attn" in path:
        dim = len(shape) - 2
    else:
        dim = len(shape) - 1
    if shape[dim] % spatial:
        return P()
    return P(*([None] * dim), SPATIAL, *([None] * (len(shape) - dim - 1)))


def param_specs(config: WanVAEConfig, spatial: int) -> dict:
    """The pytree of every decoder parameter's `PartitionSpec` (the shape of `vae_param_shapes`)."""
    tree: dict = {}
    for spec in vae_param_table(config):
        _set(tree, spec.path, param_spec(spec.path, spec.shape, spatial))
    return tree


def latent_shape(height: int, width: int, frames: int, batch: int = 1,
                 config: WanVAEConfig = WAN21_VAE) -> tuple[int, ...]:
    """The latent (batch, z_dim, T, h, w) the transformer hands the VAE for a video of `frames` frames
    at height × width (MaxDiffusion's `prepare_latents`: T = (frames − 1) // 4 + 1, h = height // 8)."""
    s = config.scale_factor_spatial
    return (batch, config.z_dim, (frames - 1) // config.scale_factor_temporal + 1, height // s, width // s)


@dataclasses.dataclass(frozen=True)
class ShardedDecode:
    """The decode as one jitted function of (params, latents) over `mesh`, and its abstract inputs with
    their shardings (for `.lower(*inputs)`)."""

    fn: Any  # a jitted function (`jax.jit`'s wrapper: call it, or `.lower(*inputs)`)
    inputs: tuple[Any, Any]
    mesh: Mesh
    config: WanVAEConfig


def sharded_decode(config: WanVAEConfig, latent: tuple[int, ...], mesh: Mesh, *,
                   weights_dtype: Any = WEIGHTS_DTYPE, to_uint8: bool = True) -> ShardedDecode:
    """The decode of a latent of shape `latent` on `mesh` (axes `redundant`, `vae_spatial`) as
    MaxDiffusion runs it: activations in `config.dtype` constrained to `ACTIVATION_SPEC`, weights of
    `weights_dtype` sharded by `param_specs`, the latents replicated; with `to_uint8`, the output
    mapped to uint8 frames as `vae_decode_pass` does."""
    spatial = mesh.shape[SPATIAL]
    act = NamedSharding(mesh, ACTIVATION_SPEC)
    shapes = decode_shapes(config, latent)

    def constrain(x: jnp.ndarray) -> jnp.ndarray:
        return jax.lax.with_sharding_constraint(x, act)

    def fn(params: dict, latents: jnp.ndarray) -> jnp.ndarray:
        video = decode_latents(params, latents, config=config, constrain=constrain)
        if not to_uint8:
            return video
        return (jnp.clip(video / 2.0 + 0.5, 0.0, 1.0) * 255.0).astype(jnp.uint8)

    specs = param_specs(config, spatial)
    table = {spec.path: spec.shape for spec in vae_param_table(config)}
    leaves, treedef = jax.tree_util.tree_flatten_with_path(specs, is_leaf=lambda x: isinstance(x, P))
    abstract = [jax.ShapeDtypeStruct(table[tuple(k.key for k in path)], weights_dtype,
                                     sharding=NamedSharding(mesh, spec)) for path, spec in leaves]
    params = jax.tree_util.tree_unflatten(treedef, abstract)
    latents = jax.ShapeDtypeStruct(shapes.latent, config.dtype, sharding=NamedSharding(mesh, P()))
    return ShardedDecode(jax.jit(fn), (params, latents), mesh, config)
