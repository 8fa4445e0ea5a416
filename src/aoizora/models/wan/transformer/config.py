"""Model configuration of the Wan 2.1 / 2.2 video DiT and the video-shape arithmetic around it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp

from aoizora.errors import ShapeError

#: Temporal and spatial stride of the Wan 2.1 VAE (also Wan 2.2 A14B's), and its latent channel count.
VAE_STRIDE = (4, 8, 8)
VAE_Z_DIM = 16
#: The Wan 2.2 VAE of TI2V-5B: 4x16x16 compression into 48 latent channels.
VAE22_STRIDE = (4, 16, 16)
VAE22_Z_DIM = 48


#: How the rotary embedding forms a channel's pair partner (`aoizora.models.wan.transformer.rope`).
ROPE_PARTNERS = ("matmul", "reshape")


#: How Ulysses attention moves heads and sequence between devices (`aoizora.models.wan.transformer.attention`):
#: ``all_to_all`` inside the attention's shard_map, or ``sharding_constraint``: the sequence-sharded
#: [batch, sequence, heads, head_dim] arrays resharded to head-sharded ones by
#: `jax.lax.with_sharding_constraint` outside it, the partitioner's own all-to-all.
ULYSSES_EXCHANGES = ("all_to_all", "sharding_constraint")


def check_rope_partner(partner: str) -> None:
    """Raise ShapeError unless `partner` is one of `ROPE_PARTNERS`."""
    if partner not in ROPE_PARTNERS:
        raise ShapeError(f"unknown RoPE partner form {partner!r}; choose one of: {', '.join(ROPE_PARTNERS)}")


def check_ulysses_exchange(exchange: str) -> None:
    """Raise ShapeError unless `exchange` is one of `ULYSSES_EXCHANGES`."""
    if exchange not in ULYSSES_EXCHANGES:
        raise ShapeError(f"unknown Ulysses exchange {exchange!r}; choose one of: {', '.join(ULYSSES_EXCHANGES)}")


@dataclasses.dataclass(frozen=True)
class WanConfig:
    """Hyper-parameters of a Wan transformer, named as in diffusers' `WanTransformer3DModel`.

    `dtype` is the dtype of weights and activations (bfloat16 for deployment, float32 for parity
    tests); norms, modulation, RoPE and softmax are computed in float32 regardless, as the
    reference does. `vae_stride` is the (time, height, width) compression of the VAE whose
    latents the transformer takes (not a transformer argument: diffusers keeps it in the VAE's
    config as `scale_factor_temporal` / `scale_factor_spatial`). `rope_partner` is how the
    rotary embedding forms each channel's pair partner (`aoizora.models.wan.transformer.rope`): the same
    rotation, a different compiled program. `ulysses_exchange` is likewise the form of Ulysses
    attention's head/sequence exchange (`ULYSSES_EXCHANGES`), and `splash_cost_estimate` whether
    each splash call carries its cost for the compiler's scheduler, as MaxDiffusion's tokamax
    kernels do (`aoizora.models.wan.transformer.kernel_estimate`): the same attention, scheduled otherwise. On
    by default: with it libtpu overlaps a ring's K/V rotations with the kernels (without it, it
    issues them all before the first kernel and leaves them exposed).
    """

    num_layers: int = 40
    num_attention_heads: int = 40
    attention_head_dim: int = 128
    in_channels: int = 16
    out_channels: int = 16
    text_dim: int = 4096
    freq_dim: int = 256
    ffn_dim: int = 13824
    patch_size: tuple[int, int, int] = (1, 2, 2)
    cross_attn_norm: bool = True
    eps: float = 1e-6
    image_dim: int | None = None
    added_kv_proj_dim: int | None = None
    rope_theta: float = 10000.0
    rope_max_seq_len: int = 1024
    rope_partner: str = "matmul"
    ulysses_exchange: str = "all_to_all"
    splash_cost_estimate: bool = True
    text_len: int = 512
    image_len: int = 257
    vae_stride: tuple[int, int, int] = VAE_STRIDE
    dtype: Any = jnp.bfloat16

    def __post_init__(self) -> None:
        check_rope_partner(self.rope_partner)
        check_ulysses_exchange(self.ulysses_exchange)

    @property
    def dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def is_i2v(self) -> bool:
        """Cross-attends to CLIP image tokens (Wan 2.1 I2V); Wan 2.2 I2V-A14B does not."""
        return self.added_kv_proj_dim is not None

    @property
    def condition_channels(self) -> int:
        """Channels of the conditioning latent concatenated to the noisy latent (I2V: mask + image
        latent, 4 + 16 = 20); 0 when the model takes the noisy latent alone."""
        return self.in_channels - self.out_channels

    @property
    def patch_volume(self) -> int:
        return math.prod(self.patch_size)

    @property
    def context_len(self) -> int:
        """Length of the cross-attention context (text, plus image tokens for I2V)."""
        return self.text_len + (self.image_len if self.is_i2v else 0)

    def replace(self, **changes: Any) -> WanConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_diffusers(cls, cfg: dict[str, Any], dtype: Any = jnp.bfloat16,
                       vae_stride: tuple[int, int, int] = VAE_STRIDE) -> WanConfig:
        """Build from a diffusers `config.json` dict of a `WanTransformer3DModel` (and the VAE's
        stride, which lives in the VAE's config)."""
        if cfg.get("pos_embed_seq_len") is not None:
            raise ShapeError("pos_embed_seq_len (Wan FLF2V) is not supported by aoizora's Wan model")
        keys = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in cfg.items() if k in keys}
        if "patch_size" in kw:
            kw["patch_size"] = tuple(kw["patch_size"])
        if kw.get("out_channels") is None:  # diffusers: out_channels defaults to in_channels
            kw["out_channels"] = kw.get("in_channels", cls.in_channels)
        kw.pop("dtype", None)
        kw.pop("vae_stride", None)
        kw.pop("rope_partner", None)
        kw.pop("ulysses_exchange", None)
        kw.pop("splash_cost_estimate", None)
        t, h, w = vae_stride
        return cls(**kw, dtype=dtype, vae_stride=(t, h, w))

    def to_diffusers(self) -> dict[str, Any]:
        """The diffusers constructor arguments of the same architecture."""
        return dict(
            patch_size=tuple(self.patch_size), num_attention_heads=self.num_attention_heads,
            attention_head_dim=self.attention_head_dim, in_channels=self.in_channels,
            out_channels=self.out_channels, text_dim=self.text_dim, freq_dim=self.freq_dim,
            ffn_dim=self.ffn_dim, num_layers=self.num_layers, cross_attn_norm=self.cross_attn_norm,
            qk_norm="rms_norm_across_heads", eps=self.eps, image_dim=self.image_dim,
            added_kv_proj_dim=self.added_kv_proj_dim, rope_max_seq_len=self.rope_max_seq_len,
        )


WAN_T2V_1_3B = WanConfig(num_layers=30, num_attention_heads=12, ffn_dim=8960)
WAN_T2V_14B = WanConfig()
WAN_I2V_14B = WanConfig(in_channels=36, image_dim=1280, added_kv_proj_dim=5120)
# Wan 2.2 (Wan-Video/Wan2.2 wan/configs/wan_{t2v_A14B,i2v_A14B,ti2v_5B}.py): each A14B expert has
# Wan 2.1 14B's architecture; I2V-A14B conditions by channel concatenation only (36 = 16 noisy +
# 4 mask + 16 image latent channels, no CLIP image tokens); TI2V-5B is 24 heads x 128, 30 layers,
# ffn 14336, on the Wan 2.2 VAE's 48 channels.
WAN22_T2V_A14B = WanConfig()
WAN22_I2V_A14B = WanConfig(in_channels=36)
WAN22_TI2V_5B = WanConfig(num_layers=30, num_attention_heads=24, ffn_dim=14336, in_channels=VAE22_Z_DIM,
                          out_channels=VAE22_Z_DIM, vae_stride=VAE22_STRIDE)

PRESETS: dict[str, WanConfig] = {
    "t2v-1.3b": WAN_T2V_1_3B,
    "t2v-14b": WAN_T2V_14B,
    "i2v-14b": WAN_I2V_14B,
    "2.2-t2v-a14b": WAN22_T2V_A14B,
    "2.2-i2v-a14b": WAN22_I2V_A14B,
    "2.2-ti2v-5b": WAN22_TI2V_5B,
}


@dataclasses.dataclass(frozen=True)
class VideoShape:
    """A generation request's geometry: frames × height × width in pixels, batch of samples."""

    frames: int
    height: int
    width: int

    def validate(self, config: WanConfig) -> None:
        st, sh, sw = config.vae_stride
        if self.frames < 1:
            raise ShapeError(f"frame count {self.frames} is not positive; use {st}n+1 frames, e.g. 1, {st + 1} or 81")
        if (self.frames - 1) % st != 0:
            below = st * ((self.frames - 1) // st) + 1
            raise ShapeError(
                f"frame count {self.frames} is not {st}n+1 (the Wan VAE compresses time by {st}); "
                f"use e.g. {below} or {below + st}"
            )
        unit = sh * config.patch_size[1]
        unit_w = sw * config.patch_size[2]
        if self.height <= 0 or self.height % unit != 0 or self.width <= 0 or self.width % unit_w != 0:
            raise ShapeError(
                f"resolution {self.width}x{self.height} is not a positive multiple of {unit} "
                f"(VAE stride {sh} × patch {config.patch_size[1]}) in both width and height; use e.g. "
                f"{max(unit_w, round(self.width / unit_w) * unit_w)}x{max(unit, round(self.height / unit) * unit)}"
            )
        t = (self.frames - 1) // st + 1
        if t % config.patch_size[0] != 0:
            raise ShapeError(f"{t} latent frames are not divisible by the temporal patch {config.patch_size[0]}")

    def latent_shape(self, config: WanConfig) -> tuple[int, int, int, int]:
        """(channels, latent frames, latent height, latent width) of the transformer's input."""
        self.validate(config)
        st, sh, sw = config.vae_stride
        return (config.in_channels, (self.frames - 1) // st + 1, self.height // sh, self.width // sw)

    def grid(self, config: WanConfig) -> tuple[int, int, int]:
        """Token grid (t, h, w) after patchify."""
        _, t, h, w = self.latent_shape(config)
        pt, ph, pw = config.patch_size
        return t // pt, h // ph, w // pw

    def tokens(self, config: WanConfig) -> int:
        return math.prod(self.grid(config))


def grid_of_latent(config: WanConfig, latent_shape: tuple[int, ...]) -> tuple[int, int, int]:
    """Token grid of a latent array shaped (batch, channels, t, h, w); checks divisibility."""
    if len(latent_shape) != 5:
        raise ShapeError(f"latent must be (batch, channels, frames, height, width), got shape {latent_shape}")
    _, c, t, h, w = latent_shape
    if c != config.in_channels:
        raise ShapeError(f"latent has {c} channels, the model takes {config.in_channels}")
    pt, ph, pw = config.patch_size
    if t % pt or h % ph or w % pw:
        raise ShapeError(f"latent (t,h,w)=({t},{h},{w}) is not divisible by the patch {config.patch_size}")
    return t // pt, h // ph, w // pw
