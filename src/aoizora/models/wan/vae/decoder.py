"""The Wan VAE's decode (Wan 2.1's, and Wan 2.2's of TI2V-5B) in pure JAX over a params pytree
(`aoizora.models.wan.vae.params`), computing what diffusers' `AutoencoderKLWan.decode` computes.

Activations are channels last, (batch, frames, height, width, channels); the public functions take
and return diffusers' channels-first layout.

Frame-by-frame causal decoding. Like diffusers, the decoder runs once per latent frame (a
"chunk"), and every causal 3D convolution with a temporal kernel of 3 keeps the last two frames
of its input as a cache for the next chunk. Here each cache always holds two frames, zeros where
the history is shorter: a zero frame in the cache is exactly the causal zero padding, so the first
chunk's padding and diffusers' shorter early caches give the same numbers. With that, every chunk
after the first has the same shapes (1 latent frame in, `temporal_factor` video frames out, the
same caches in and out), and they run as one `jax.lax.scan` whose carry is the caches. The first
chunk differs (the temporal upsamplers pass its single frame through instead of doubling it, and
Wan 2.2's shortcuts drop their extra leading frame), so it runs once before the scan; it starts
from zero caches and leaves the upsamplers' caches at zero, as diffusers' "Rep" marker does.

A scan and not a Python loop over frames: the chunk is traced and compiled once whatever the
frame count (21 latent frames for an 81-frame video), the program stays small for the TPU
compiler, and memory holds one chunk's activations plus the caches, as diffusers' loop does;
all shapes are static, so the decode can be jitted, lowered from abstract inputs and sharded.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from aoizora.models.wan.vae.config import UpBlock, WanVAEConfig, decode_shapes
from aoizora.models.wan.vae.params import vae_param_shapes

F32 = jnp.float32
#: A sharding constraint on a 5-D activation (batch, frames, h, w, c); identity when unsharded.
Constrain = Callable[[jnp.ndarray], jnp.ndarray]
#: Frames a causal convolution carries to the next chunk (its temporal kernel minus one).
CACHE_FRAMES = 2
#: diffusers normalises with `F.normalize`, which divides by the norm clamped below at this.
NORM_EPS = 1e-12


# --------------------------------------------------------------------------------------------
# layers (channels last)
# --------------------------------------------------------------------------------------------
def _conv(x: jnp.ndarray, p: dict, spatial_pad: int) -> jnp.ndarray:
    """A 3D convolution over (batch, frames, h, w, c), no temporal padding, zero spatial padding."""
    y = jax.lax.conv_general_dilated(
        x, p["w"].astype(x.dtype), window_strides=(1, 1, 1),
        padding=((0, 0), (spatial_pad, spatial_pad), (spatial_pad, spatial_pad)),
        dimension_numbers=("NDHWC", "DHWIO", "NDHWC"),
    )
    return y + p["b"].astype(x.dtype)


def _dense(x: jnp.ndarray, p: dict) -> jnp.ndarray:
    """A 1×1 convolution: (..., in) @ (in, out) + bias."""
    return (jnp.dot(x, p["w"].astype(x.dtype)) + p["b"].astype(x.dtype)).astype(x.dtype)


def _rms(x: jnp.ndarray, gain: jnp.ndarray) -> jnp.ndarray:
    """diffusers' `WanRMS_norm`: the L2-normalised channel vector × √channels × gain, in float32."""
    xf = x.astype(F32)
    norm = jnp.sqrt(jnp.sum(jnp.square(xf), axis=-1, keepdims=True))
    y = xf / jnp.maximum(norm, NORM_EPS) * math.sqrt(x.shape[-1]) * gain.astype(F32)
    return y.astype(x.dtype)


def _upsample_space(x: jnp.ndarray, p: dict) -> jnp.ndarray:
    """Nearest ×2 in height and width (for an integer factor "nearest-exact" repeats each pixel),
    then the 3×3 convolution, frame by frame."""
    x = jnp.repeat(jnp.repeat(x, 2, axis=2), 2, axis=3)
    return _conv(x, {"w": p["w"][None], "b": p["b"]}, spatial_pad=1)


def _attention(x: jnp.ndarray, p: dict) -> jnp.ndarray:
    """The mid block's single-head self-attention over each frame's pixels, plus its input."""
    b, t, h, w, c = x.shape
    qkv = _dense(_rms(x, p["norm"]), p["qkv"]).reshape(b * t, h * w, 3 * c)
    q, k, v = jnp.split(qkv, 3, axis=-1)
    s = jnp.einsum("nqc,nkc->nqk", q.astype(F32), k.astype(F32)) / math.sqrt(c)
    o = jnp.einsum("nqk,nkc->nqc", jax.nn.softmax(s, axis=-1), v.astype(F32)).astype(x.dtype)
    return x + _dense(o, p["proj"]).reshape(b, t, h, w, c)


def _dup_up(x: jnp.ndarray, out_dim: int, factor_t: int, first: bool) -> jnp.ndarray:
    """Wan 2.2's parameter-free shortcut (diffusers' `DupUp3D`): channels repeated, then moved into
    time (×factor_t) and space (×2); the first chunk keeps only the last of its factor_t frames."""
    b, t, h, w, c = x.shape
    fs = 2
    x = jnp.repeat(x, out_dim * factor_t * fs * fs // c, axis=-1)
    x = x.reshape(b, t, h, w, out_dim, factor_t, fs, fs).transpose(0, 1, 5, 2, 6, 3, 7, 4)
    x = x.reshape(b, t * factor_t, h * fs, w * fs, out_dim)
    return x[:, factor_t - 1:] if first else x


# --------------------------------------------------------------------------------------------
# the causal caches of one chunk
# --------------------------------------------------------------------------------------------
class ChunkCaches:
    """The causal convolutions' frame caches around one decoder chunk: each is read from `previous`
    (None on the first chunk: all zeros, i.e. the causal zero padding) and written to `updated`,
    keyed by the convolution's name. `constrain` is applied to every convolution's input, where
    MaxDiffusion's causal convolution places its spatial sharding constraint."""

    def __init__(self, previous: dict[str, jnp.ndarray] | None, constrain: Constrain | None = None) -> None:
        self.previous = previous
        self.updated: dict[str, jnp.ndarray] = {}
        self.constrain: Constrain = constrain or (lambda x: x)

    def _read(self, name: str, x: jnp.ndarray) -> jnp.ndarray:
        if self.previous is None:
            return jnp.zeros((x.shape[0], CACHE_FRAMES, *x.shape[2:]), x.dtype)
        return self.previous[name]

    def conv(self, name: str, x: jnp.ndarray, p: dict) -> jnp.ndarray:
        """The causal convolution `name` of `x` after the frames it has cached; caches the last two."""
        frames = self.constrain(jnp.concatenate([self._read(name, x), self.constrain(x)], axis=1))
        self.updated[name] = self.constrain(frames[:, -CACHE_FRAMES:])
        return _conv(frames, p, spatial_pad=p["w"].shape[1] // 2)

    def hold(self, name: str, x: jnp.ndarray) -> None:
        """Leave cache `name` as it is (zeros on the first chunk) without convolving."""
        self.updated[name] = self._read(name, x)


def _resnet(caches: ChunkCaches, name: str, x: jnp.ndarray, p: dict) -> jnp.ndarray:
    """diffusers' `WanResidualBlock`: (RMS norm, SiLU, causal conv) twice, plus the (1×1) shortcut."""
    skip = _dense(x, p["shortcut"]) if "shortcut" in p else x
    x = caches.conv(name + ".conv1", jax.nn.silu(_rms(x, p["norm1"])), p["conv1"])
    x = caches.conv(name + ".conv2", jax.nn.silu(_rms(x, p["norm2"])), p["conv2"])
    return x + skip


def _up_block(caches: ChunkCaches, name: str, blk: UpBlock, x: jnp.ndarray, p: dict, first: bool) -> jnp.ndarray:
    """One up block: its residual blocks, then its upsampling (time ×2 by a causal convolution to
    twice the channels, interleaved into frames, except on the first chunk), then Wan 2.2's shortcut."""
    skip = x
    for j in range(blk.resnets):
        x = _resnet(caches, f"{name}.res{j}", x, p[f"res{j}"])
    if blk.upsample == "upsample3d":
        if first:
            caches.hold(name + ".time_conv", x)
        else:
            b, t, h, w, c = x.shape
            x = caches.conv(name + ".time_conv", x, p["time_conv"])
            # output channel k·c + i is channel i of sub-frame k: frames interleave (t0k0, t0k1, t1k0, ...)
            x = x.reshape(b, t, h, w, 2, c).transpose(0, 1, 4, 2, 3, 5).reshape(b, 2 * t, h, w, c)
    if blk.upsample is not None:
        x = _upsample_space(x, p["resample"])
    if blk.shortcut_t is not None:
        x = x + _dup_up(skip, blk.out_dim, blk.shortcut_t, first)
    return x


def decode_chunk(params: dict, x: jnp.ndarray, previous: dict[str, jnp.ndarray] | None, *, config: WanVAEConfig,
                 constrain: Constrain | None = None) -> tuple[jnp.ndarray, dict[str, jnp.ndarray]]:
    """The decoder on one latent frame `x` (batch, 1, h, w, z_dim), channels last, after
    `post_quant_conv`; `previous` are the caches the last chunk left (None: this is the first
    chunk). Returns its video frames (batch, frames, H, W, out_channels), before unpatchify, and
    the caches for the next chunk. `constrain` (default none) constrains the chunk's input and
    output and every convolution's input, as a sharded decode does."""
    first = previous is None
    caches = ChunkCaches(previous, constrain)
    x = caches.conv("conv_in", caches.constrain(x), params["conv_in"])
    mid = params["mid"]
    x = _resnet(caches, "mid.res0", x, mid["res0"])
    x = _attention(x, mid["attn"])
    x = _resnet(caches, "mid.res1", x, mid["res1"])
    for i, blk in enumerate(config.up_blocks()):
        x = _up_block(caches, f"up{i}", blk, x, params[f"up{i}"], first)
    x = caches.conv("conv_out", jax.nn.silu(_rms(x, params["norm_out"])), params["conv_out"])
    return caches.constrain(x), caches.updated


def _unpatchify(x: jnp.ndarray, patch: int) -> jnp.ndarray:
    """(b, t, h, w, c·p·p) → (b, t, h·p, w·p, c); channel c·p² + j·p + i is row offset i, column offset j
    (diffusers' `unpatchify`)."""
    if patch == 1:
        return x
    b, t, h, w, cp = x.shape
    c = cp // (patch * patch)
    x = x.reshape(b, t, h, w, c, patch, patch).transpose(0, 1, 2, 6, 3, 5, 4)
    return x.reshape(b, t, h * patch, w * patch, c)


# --------------------------------------------------------------------------------------------
# decode
# --------------------------------------------------------------------------------------------
def decode(params: dict, z: jnp.ndarray, *, config: WanVAEConfig, constrain: Constrain | None = None) -> jnp.ndarray:
    """diffusers' `AutoencoderKLWan.decode` (without tiling): a latent z (batch, z_dim, T, h, w) →
    the video (batch, channels, 1 + 4·(T − 1), h·s, w·s) in [−1, 1], s the spatial factor (8 for
    Wan 2.1, 16 for Wan 2.2), in `config.dtype`. Shapes as `decode_shapes` gives them. `constrain`
    (channels-last activations; default none) is applied around each chunk and each convolution."""
    shapes = decode_shapes(config, z.shape)
    x = _dense(jnp.moveaxis(z.astype(config.dtype), 1, -1), params["post_quant_conv"])
    out, caches = decode_chunk(params, x[:, :1], None, config=config, constrain=constrain)
    if shapes.chunks > 1:
        def body(carry: dict[str, jnp.ndarray], frame: jnp.ndarray) -> tuple[dict[str, jnp.ndarray], jnp.ndarray]:
            y, carry = decode_chunk(params, frame[:, None], carry, config=config, constrain=constrain)
            return carry, y

        _, rest = jax.lax.scan(body, caches, jnp.moveaxis(x[:, 1:], 1, 0))  # (T-1, b, frames, H, W, c)
        rest = jnp.moveaxis(rest, 0, 1)
        out = jnp.concatenate([out, rest.reshape(rest.shape[0], -1, *rest.shape[3:])], axis=1)
    out = jnp.clip(_unpatchify(out, config.patch), -1.0, 1.0)
    return jnp.moveaxis(out, -1, 1)


def denormalize_latents(latents: jnp.ndarray, config: WanVAEConfig) -> jnp.ndarray:
    """The transformer's normalised latents (batch, z_dim, T, h, w) back in the VAE's scale, as
    diffusers' Wan pipelines do before `vae.decode`: latents / (1 / latents_std) + latents_mean."""
    shape = (1, config.z_dim, 1, 1, 1)
    mean = jnp.asarray(config.latents_mean, F32).reshape(shape).astype(latents.dtype)
    inv_std = (1.0 / jnp.asarray(config.latents_std, F32)).reshape(shape).astype(latents.dtype)
    return latents / inv_std + mean


def decode_latents(params: dict, latents: jnp.ndarray, *, config: WanVAEConfig,
                   constrain: Constrain | None = None) -> jnp.ndarray:
    """The end of a Wan pipeline: the sampled latents, in the VAE's dtype, de-normalised with the VAE
    config's statistics, then decoded to the video (batch, channels, frames, height, width) in [−1, 1]
    (`constrain` as `decode` takes it)."""
    return decode(params, denormalize_latents(latents.astype(config.dtype), config), config=config, constrain=constrain)


def abstract_decode_inputs(config: WanVAEConfig, latent_shape: tuple[int, ...]) -> tuple[Any, jax.ShapeDtypeStruct]:
    """(params, latents) as `jax.ShapeDtypeStruct`s for `decode_latents` of a latent of `latent_shape`,
    to lower the decode without weights."""
    shapes = decode_shapes(config, latent_shape)
    return vae_param_shapes(config), jax.ShapeDtypeStruct(shapes.latent, config.dtype)
