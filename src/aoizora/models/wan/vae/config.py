"""Configuration of the Wan video VAE (Wan 2.1's, Wan 2.2's of TI2V-5B), its decoder's block layout,
and the shapes of a decode: what the decoder (`aoizora.models.wan.vae.decoder`) builds from a latent."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from aoizora.errors import ShapeError

# Per-channel statistics of the Wan 2.1 VAE's latents, as in `latents_mean` / `latents_std` of
# Wan-AI/Wan2.1-T2V-14B-Diffusers, vae/config.json (the same VAE file is shipped by every Wan 2.1
# Diffusers repository and by Wan-AI/Wan2.2-T2V-A14B-Diffusers and Wan2.2-I2V-A14B-Diffusers; they
# are also diffusers' `AutoencoderKLWan` defaults).
WAN21_LATENTS_MEAN = (
    -0.7571, -0.7089, -0.9113, 0.1075, -0.1745, 0.9653, -0.1517, 1.5508,
    0.4134, -0.0715, 0.5517, -0.3632, -0.1922, -0.9497, 0.2503, -0.2921,
)
WAN21_LATENTS_STD = (
    2.8184, 1.4541, 2.3275, 2.6558, 1.2196, 1.7708, 2.6052, 2.0743,
    3.2687, 2.1526, 2.8652, 1.5579, 1.6382, 1.1253, 2.8251, 1.9160,
)
# The same statistics of the Wan 2.2 VAE's 48 channels: Wan-AI/Wan2.2-TI2V-5B-Diffusers, vae/config.json
# (identical to the `mean` / `std` lists of Wan2_2_VAE in Wan-Video/Wan2.2, wan/modules/vae2_2.py).
WAN22_LATENTS_MEAN = (
    -0.2289, -0.0052, -0.1323, -0.2339, -0.2799, 0.0174, 0.1838, 0.1557,
    -0.1382, 0.0542, 0.2813, 0.0891, 0.1570, -0.0098, 0.0375, -0.1825,
    -0.2246, -0.1207, -0.0698, 0.5109, 0.2665, -0.2108, -0.2158, 0.2502,
    -0.2055, -0.0322, 0.1109, 0.1567, -0.0729, 0.0899, -0.2799, -0.1230,
    -0.0313, -0.1649, 0.0117, 0.0723, -0.2839, -0.2083, -0.0520, 0.3748,
    0.0152, 0.1957, 0.1433, -0.2944, 0.3573, -0.0548, -0.1681, -0.0667,
)
WAN22_LATENTS_STD = (
    0.4765, 1.0364, 0.4514, 1.1677, 0.5313, 0.4990, 0.4818, 0.5013,
    0.8158, 1.0344, 0.5894, 1.0901, 0.6885, 0.6165, 0.8454, 0.4978,
    0.5759, 0.3523, 0.7135, 0.6804, 0.5833, 1.4146, 0.8986, 0.5659,
    0.7069, 0.5338, 0.4889, 0.4917, 0.4069, 0.4999, 0.6866, 0.4093,
    0.5709, 0.6065, 0.6415, 0.4944, 0.5726, 1.2042, 0.5458, 1.6887,
    0.3971, 1.0600, 0.3943, 0.5537, 0.5444, 0.4089, 0.7468, 0.7744,
)

#: How an up block resamples: nothing, space ×2, or time ×2 (but the first frame) and space ×2.
UPSAMPLE_MODES = (None, "upsample2d", "upsample3d")


@dataclasses.dataclass(frozen=True)
class UpBlock:
    """One up block of the decoder: `resnets` residual blocks (`in_dim` → `out_dim`, then `out_dim`),
    then `upsample` (one of `UPSAMPLE_MODES`) whose spatial convolution writes `upsample_dim` channels;
    `shortcut_t` is the temporal factor of a Wan 2.2 channel-to-space shortcut (`DupUp3D`) around the
    whole block, None without one."""

    in_dim: int
    out_dim: int
    resnets: int
    upsample: str | None
    upsample_dim: int
    shortcut_t: int | None


@dataclasses.dataclass(frozen=True)
class WanVAEConfig:
    """Hyper-parameters of a Wan VAE, named as in diffusers' `AutoencoderKLWan` (its `config.json`).

    Only the decoder is modelled; the encoder's fields (`base_dim`, `in_channels`,
    `temperal_downsample`, whose reverse is the decoder's temporal upsampling) are kept so that a
    config reads and writes the same file. `dtype` is the dtype of weights and activations; the
    RMS norms and the attention's softmax run in float32 regardless.
    """

    base_dim: int = 96
    decoder_base_dim: int | None = None
    z_dim: int = 16
    dim_mult: tuple[int, ...] = (1, 2, 4, 4)
    num_res_blocks: int = 2
    attn_scales: tuple[float, ...] = ()
    temperal_downsample: tuple[bool, ...] = (False, True, True)
    latents_mean: tuple[float, ...] = WAN21_LATENTS_MEAN
    latents_std: tuple[float, ...] = WAN21_LATENTS_STD
    is_residual: bool = False
    in_channels: int = 3
    out_channels: int = 3
    patch_size: int | None = None
    scale_factor_temporal: int = 4
    scale_factor_spatial: int = 8
    dtype: Any = jnp.bfloat16

    def __post_init__(self) -> None:
        if len(self.latents_mean) != self.z_dim or len(self.latents_std) != self.z_dim:
            raise ShapeError(f"latents_mean and latents_std need {self.z_dim} values (z_dim), got "
                             f"{len(self.latents_mean)} and {len(self.latents_std)}")
        if len(self.temperal_downsample) != len(self.dim_mult) - 1:
            raise ShapeError(f"temperal_downsample needs {len(self.dim_mult) - 1} flags (one per down block "
                             f"but the last), got {len(self.temperal_downsample)}")

    @property
    def decoder_dim(self) -> int:
        """The decoder's base channel count (diffusers: `decoder_base_dim`, else `base_dim`)."""
        return self.decoder_base_dim if self.decoder_base_dim is not None else self.base_dim

    @property
    def mid_dim(self) -> int:
        """Channels of the decoder's input convolution and mid block."""
        return self.decoder_dim * self.dim_mult[-1]

    @property
    def patch(self) -> int:
        return self.patch_size or 1

    def up_blocks(self) -> tuple[UpBlock, ...]:
        """The decoder's up blocks in order. Wan 2.1's plain blocks take half the previous block's
        channels (its upsampling convolution halves them); Wan 2.2's residual blocks keep them."""
        mult = self.dim_mult
        dims = [self.decoder_dim * m for m in (mult[-1], *mult[::-1])]
        temporal = self.temperal_downsample[::-1]
        blocks = []
        for i in range(len(mult)):
            in_dim, out_dim = dims[i], dims[i + 1]
            if i > 0 and not self.is_residual:
                in_dim //= 2
            up = i != len(mult) - 1
            mode = ("upsample3d" if temporal[i] else "upsample2d") if up else None
            blocks.append(UpBlock(
                in_dim=in_dim, out_dim=out_dim, resnets=self.num_res_blocks + 1, upsample=mode,
                upsample_dim=out_dim if self.is_residual else out_dim // 2,
                shortcut_t=(2 if temporal[i] else 1) if self.is_residual and up else None,
            ))
        return tuple(blocks)

    @property
    def temporal_factor(self) -> int:
        """Output frames of each latent frame after the first (which gives one)."""
        return 2 ** sum(b.upsample == "upsample3d" for b in self.up_blocks())

    @property
    def spatial_factor(self) -> int:
        """Pixels per latent pixel along height and width: the decoder's ×2 stages times the patch."""
        return 2 ** sum(b.upsample is not None for b in self.up_blocks()) * self.patch

    @property
    def video_channels(self) -> int:
        """Channels of the decoded video (the decoder's output channels unpatchified)."""
        return self.out_channels // (self.patch * self.patch)

    def replace(self, **changes: Any) -> WanVAEConfig:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_diffusers(cls, cfg: dict[str, Any], dtype: Any = jnp.bfloat16) -> WanVAEConfig:
        """Build from a diffusers `config.json` dict of an `AutoencoderKLWan` (keys it leaves out take
        diffusers' defaults, which are the Wan 2.1 VAE's)."""
        keys = {f.name for f in dataclasses.fields(cls)} - {"dtype"}
        kw = {k: v for k, v in cfg.items() if k in keys}
        for k in ("dim_mult", "attn_scales", "temperal_downsample", "latents_mean", "latents_std"):
            if k in kw:
                kw[k] = tuple(kw[k])
        return cls(**kw, dtype=dtype)

    def to_diffusers(self) -> dict[str, Any]:
        """The diffusers constructor arguments of the same architecture."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "dtype"}
        return {k: list(v) if isinstance(v, tuple) else v for k, v in out.items()}


# Wan 2.1's VAE: Wan-AI/Wan2.1-T2V-14B-Diffusers, vae/config.json gives base_dim 96, z_dim 16,
# dim_mult [1, 2, 4, 4], num_res_blocks 2, attn_scales [], temperal_downsample [false, true, true] and
# the statistics above; the fields it leaves out (decoder_base_dim, is_residual, in/out_channels,
# patch_size, scale factors) take diffusers' defaults.
WAN21_VAE = WanVAEConfig()
# Wan 2.2's VAE of TI2V-5B: Wan-AI/Wan2.2-TI2V-5B-Diffusers, vae/config.json gives base_dim 160,
# decoder_base_dim 256, z_dim 48, dim_mult [1, 2, 4, 4], num_res_blocks 2, attn_scales [],
# temperal_downsample [false, true, true], is_residual true, in_channels 12, out_channels 12
# (3 colours × a 2×2 patch), patch_size 2, scale_factor_temporal 4, scale_factor_spatial 16.
WAN22_VAE = WanVAEConfig(
    base_dim=160, decoder_base_dim=256, z_dim=48, latents_mean=WAN22_LATENTS_MEAN, latents_std=WAN22_LATENTS_STD,
    is_residual=True, in_channels=12, out_channels=12, patch_size=2, scale_factor_spatial=16,
)


@dataclasses.dataclass(frozen=True)
class DecodeShapes:
    """The shapes of one decode: the latent (batch, z_dim, T, h, w) in, the video (batch, channels,
    frames, height, width) out, and the frame-by-frame work between them: `chunks` decoder passes
    (one per latent frame), the first giving `first_frames` video frames, each later one `chunk_frames`."""

    latent: tuple[int, int, int, int, int]
    video: tuple[int, int, int, int, int]
    chunks: int
    first_frames: int
    chunk_frames: int


def decode_shapes(config: WanVAEConfig, latent_shape: tuple[int, ...]) -> DecodeShapes:
    """The shapes of decoding a latent of `latent_shape` (batch, z_dim, T, h, w): T latent frames give
    1 + temporal_factor·(T − 1) video frames (1 + 4·(T − 1) for Wan's VAEs), each latent pixel
    spatial_factor² pixels (8 × 8 for Wan 2.1, 16 × 16 for Wan 2.2). Raises ShapeError on a latent
    the decoder cannot take."""
    if len(latent_shape) != 5:
        raise ShapeError(f"a latent must be (batch, channels, frames, height, width), got shape {tuple(latent_shape)}")
    b, c, t, h, w = (int(d) for d in latent_shape)
    if c != config.z_dim:
        raise ShapeError(f"the latent has {c} channels, the VAE decodes {config.z_dim} (z_dim)")
    if min(b, t, h, w) < 1:
        raise ShapeError(f"the latent's batch, frames, height and width must be positive, got shape {latent_shape}")
    ft, s = config.temporal_factor, config.spatial_factor
    return DecodeShapes(latent=(b, c, t, h, w), video=(b, config.video_channels, 1 + ft * (t - 1), h * s, w * s),
                        chunks=t, first_frames=1, chunk_frames=ft)
