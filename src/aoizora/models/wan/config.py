"""Model configuration of the Wan 2.1 video DiT and the video-shape arithmetic around it."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import jax.numpy as jnp

from aoizora.errors import ShapeError

#: Temporal and spatial stride of the Wan VAE, and its latent channel count.
VAE_STRIDE = (4, 8, 8)
VAE_Z_DIM = 16


@dataclasses.dataclass(frozen=True)
class WanConfig:
    """Hyper-parameters of a Wan 2.1 transformer, named as in diffusers' `WanTransformer3DModel`.

    `dtype` is the dtype of weights and activations (bfloat16 for deployment, float32 for parity
    tests); norms, modulation, RoPE and softmax are computed in float32 regardless, as the
    reference does.
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
    text_len: int = 512
    image_len: int = 257
    dtype: Any = jnp.bfloat16

    @property
    def dim(self) -> int:
        return self.num_attention_heads * self.attention_head_dim

    @property
    def is_i2v(self) -> bool:
        return self.added_kv_proj_dim is not None

    @property
    def patch_volume(self) -> int:
        return math.prod(self.patch_size)

    @property
    def context_len(self) -> int:
        """Length of the cross-attention context (text, plus image tokens for I2V)."""
        return self.text_len + (self.image_len if self.is_i2v else 0)

    def replace(self, **changes: Any) -> "WanConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_diffusers(cls, cfg: dict[str, Any], dtype: Any = jnp.bfloat16) -> "WanConfig":
        """Build from a diffusers `config.json` dict of a `WanTransformer3DModel`."""
        if cfg.get("pos_embed_seq_len") is not None:
            raise ShapeError("pos_embed_seq_len (Wan FLF2V) is not supported by aoizora's Wan 2.1 model")
        keys = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in cfg.items() if k in keys}
        if "patch_size" in kw:
            kw["patch_size"] = tuple(kw["patch_size"])
        kw.pop("dtype", None)
        return cls(**kw, dtype=dtype)

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

PRESETS: dict[str, WanConfig] = {
    "t2v-1.3b": WAN_T2V_1_3B,
    "t2v-14b": WAN_T2V_14B,
    "i2v-14b": WAN_I2V_14B,
}


@dataclasses.dataclass(frozen=True)
class VideoShape:
    """A generation request's geometry: frames × height × width in pixels, batch of samples."""

    frames: int
    height: int
    width: int

    def validate(self, config: WanConfig) -> None:
        if self.frames < 1:
            raise ShapeError(f"frame count {self.frames} is not positive; use 4n+1 frames, e.g. 1, 5 or 81")
        if (self.frames - 1) % VAE_STRIDE[0] != 0:
            below = 4 * ((self.frames - 1) // 4) + 1
            raise ShapeError(
                f"frame count {self.frames} is not 4n+1 (the Wan VAE compresses time by 4); "
                f"use e.g. {below} or {below + 4}"
            )
        unit = VAE_STRIDE[1] * config.patch_size[1]
        unit_w = VAE_STRIDE[2] * config.patch_size[2]
        if self.height <= 0 or self.height % unit != 0 or self.width <= 0 or self.width % unit_w != 0:
            raise ShapeError(
                f"resolution {self.width}x{self.height} is not a positive multiple of {unit} "
                f"(VAE stride 8 × patch 2) in both width and height; use e.g. "
                f"{max(unit_w, round(self.width / unit_w) * unit_w)}x{max(unit, round(self.height / unit) * unit)}"
            )
        t = (self.frames - 1) // VAE_STRIDE[0] + 1
        if t % config.patch_size[0] != 0:
            raise ShapeError(f"{t} latent frames are not divisible by the temporal patch {config.patch_size[0]}")

    def latent_shape(self, config: WanConfig) -> tuple[int, int, int, int]:
        """(channels, latent frames, latent height, latent width) of the transformer's input."""
        self.validate(config)
        return (
            config.in_channels,
            (self.frames - 1) // VAE_STRIDE[0] + 1,
            self.height // VAE_STRIDE[1],
            self.width // VAE_STRIDE[2],
        )

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
