"""Helpers shared by the Wan tests: tiny configs (of the transformer, the VAE and the text encoder) and the
diffusers reference."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from aoizora.models.wan.text_encoder.config import UMT5Config
from aoizora.models.wan.transformer.config import WanConfig
from aoizora.models.wan.vae.config import WanVAEConfig

TINY_T2V = WanConfig(
    num_layers=2, num_attention_heads=4, attention_head_dim=16, in_channels=4, out_channels=4,
    text_dim=32, freq_dim=16, ffn_dim=96, dtype=jnp.float32,
)
TINY_I2V = TINY_T2V.replace(in_channels=6, image_dim=24, added_kv_proj_dim=TINY_T2V.num_attention_heads * 16)


def rel_err(out, ref) -> float:
    out = np.asarray(out, np.float64)
    ref = np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def make_inputs(config: WanConfig, latent_thw, batch=2, text_len=24, seed=0):
    rng = np.random.default_rng(seed)
    t, h, w = latent_thw
    lat = rng.standard_normal((batch, config.in_channels, t, h, w)).astype(np.float32)
    ts = rng.uniform(0, 1000, size=(batch,)).astype(np.float32)
    text = rng.standard_normal((batch, text_len, config.text_dim)).astype(np.float32)
    img = None
    if config.is_i2v:
        img = rng.standard_normal((batch, config.image_len, config.image_dim)).astype(np.float32)
    return lat, ts, text, img


def diffusers_bf16(model):
    """A bf16 copy of a diffusers Wan transformer with the parts the reference keeps in float32
    (time embedder, norms, modulation tables) back in float32: diffusers' own bf16 numerics."""
    import copy

    import torch

    mb = copy.deepcopy(model).to(torch.bfloat16)
    for name, mod in mb.named_modules():
        if any(k in name.split(".") for k in ("time_embedder", "norm1", "norm2", "norm3")):
            mod.float()
    for name, prm in mb.named_parameters():
        if "scale_shift_table" in name:
            prm.data = prm.data.float()
    return mb


def bf16_errors(model, checkpoint_dir, lat, ts, text, ref32) -> tuple[float, float]:
    """(ours, diffusers') relative error of a bf16 forward against the float32 reference `ref32`:
    aoizora's model loaded in bf16 from `checkpoint_dir`, and diffusers' own bf16 numerics."""
    import jax
    import torch

    from aoizora.models.wan.transformer.checkpoint import load_config, load_params
    from aoizora.models.wan.transformer.model import forward

    with torch.no_grad():
        refb = diffusers_bf16(model)(torch.from_numpy(lat).bfloat16(), torch.from_numpy(ts),
                                     torch.from_numpy(text).bfloat16(), return_dict=False)[0].float().numpy()
    cfg = load_config(checkpoint_dir, dtype=jnp.bfloat16)
    out = jax.jit(lambda p, a, b, c: forward(p, a, b, c, config=cfg))(load_params(checkpoint_dir, cfg), lat, ts, text)
    return rel_err(np.asarray(out.astype(jnp.float32)), ref32), rel_err(refb, ref32)


def _stats(z_dim: int, seed: int) -> dict:
    rng = np.random.default_rng(seed)
    return dict(latents_mean=tuple(rng.standard_normal(z_dim).round(4).tolist()),
                latents_std=tuple((0.5 + rng.random(z_dim)).round(4).tolist()))


# Tiny stand-ins of the two Wan VAEs with their real block structure (dim_mult [1, 2, 4, 4], three
# residual blocks per up block, time upsampling in the first two up blocks): Wan 2.1's plain blocks,
# and Wan 2.2's residual blocks with channel-to-space shortcuts, 12 output channels and a 2×2 patch.
TINY_VAE21 = WanVAEConfig(base_dim=4, z_dim=4, dtype=jnp.float32, **_stats(4, 21))
TINY_VAE22 = WanVAEConfig(base_dim=4, decoder_base_dim=8, z_dim=6, is_residual=True, in_channels=12, out_channels=12,
                          patch_size=2, scale_factor_spatial=16, dtype=jnp.float32, **_stats(6, 22))

# A tiny UMT5 encoder with UMT5-XXL's bucketing (32 buckets, max distance 128) and, as in XXL, a
# feed-forward wider than d_model; heads × d_kv (48) differs from d_model (32) so that no shape mixes
# the two up; three blocks, each with its own relative-bias table.
TINY_UMT5 = UMT5Config(vocab_size=96, d_model=32, d_kv=12, d_ff=80, num_layers=3, num_heads=4, dtype=jnp.float32)
