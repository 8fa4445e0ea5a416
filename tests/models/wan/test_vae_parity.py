"""Parity of aoizora's Wan VAE decode (Wan 2.1's and Wan 2.2's) with diffusers' PyTorch
`AutoencoderKLWan.decode` after the Wan pipelines' latent de-normalisation (float32, CPU)."""

from __future__ import annotations

import copy

import diffusers
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np
import pytest
import torch
from wan_testutil import TINY_VAE21, TINY_VAE22, rel_err  # noqa: E402

from aoizora.models.wan.vae.config import WAN21_VAE, WAN22_VAE  # noqa: E402
from aoizora.models.wan.vae.decoder import decode_latents  # noqa: E402
from aoizora.models.wan.vae.params import (  # noqa: E402
    load_vae_config,
    load_vae_params,
    vae_params_from_state_dict,
    vae_state_dict_shapes,
)

pytestmark = pytest.mark.parity

CONFIGS = {"wan2.1": TINY_VAE21, "wan2.2": TINY_VAE22}


def _reference(cfg, seed):
    """A diffusers VAE of `cfg` with every decoder weight random (diffusers initialises the RMS gains
    to ones), scaled so that most of the video lies inside the final clamp to [-1, 1]."""
    torch.manual_seed(seed)
    model = diffusers.AutoencoderKLWan(**cfg.to_diffusers()).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("gamma"):
                p.copy_(1 + 0.1 * torch.randn_like(p))
            elif p.ndim == 1:
                p.copy_(0.05 * torch.randn_like(p))
            else:
                p.copy_(torch.randn_like(p) / np.sqrt(p[0].numel()))
    return model


@pytest.fixture(scope="module")
def ref_models(tmp_path_factory):
    out = {}
    for i, (kind, cfg) in enumerate(CONFIGS.items()):
        d = tmp_path_factory.mktemp(kind)
        model = _reference(cfg, seed=10 + i)
        model.save_pretrained(d, safe_serialization=True)
        out[kind] = (model, d)
    return out


def _run_ref(model, latents):
    """What diffusers' WanPipeline does with the sampled latents: de-normalise, then `vae.decode`."""
    cfg = model.config
    with torch.no_grad():
        lat = torch.from_numpy(latents)
        mean = torch.tensor(cfg.latents_mean).view(1, cfg.z_dim, 1, 1, 1)
        inv_std = 1.0 / torch.tensor(cfg.latents_std).view(1, cfg.z_dim, 1, 1, 1)
        return model.decode(lat / inv_std + mean, return_dict=False)[0].numpy()


def _decode(cfg, params, latents):
    return np.asarray(jax.jit(lambda p, x: decode_latents(p, x, config=cfg))(params, latents))


CASES = [
    ("wan2.1", (2, 3, 4, 6)),  # batch 2, 3 latent frames -> 9 frames: both time upsamplers and every cache
    ("wan2.1", (1, 1, 4, 4)),  # one frame (an image): the first chunk alone
    ("wan2.1", (1, 4, 2, 4)),  # 4 latent frames -> 13
    ("wan2.2", (2, 3, 4, 6)),
    ("wan2.2", (1, 1, 2, 2)),
]


@pytest.mark.parametrize("kind,bthw", CASES)
def test_decode_parity(ref_models, kind, bthw):
    model, d = ref_models[kind]
    cfg = load_vae_config(d, dtype=jnp.float32)
    assert cfg == CONFIGS[kind]
    params = load_vae_params(d, cfg)
    b, t, h, w = bthw
    latents = np.random.default_rng(sum(bthw)).standard_normal((b, cfg.z_dim, t, h, w)).astype(np.float32)
    ref = _run_ref(model, latents)
    out = _decode(cfg, params, latents)
    assert out.shape == ref.shape == (b, 3, 1 + 4 * (t - 1), h * cfg.spatial_factor, w * cfg.spatial_factor)
    # the clamp to [-1, 1] would hide errors in saturated pixels: most must be inside it
    assert np.mean(np.abs(ref) < 1) > 0.75
    err, worst = rel_err(out, ref), float(np.max(np.abs(out - ref)))
    print(f"VAE parity {kind} latent{bthw}: max abs err {worst:.2e}, rel err {err:.2e}")
    assert err < 1e-4, err
    assert worst < 1e-4, worst


def test_parity_sees_the_time_upsampler(ref_models):
    """The comparison is sensitive to the causal temporal path: without the first time upsampler's
    convolution every frame after the first is wrong, and the first frame (which bypasses it) is not."""
    model, d = ref_models["wan2.1"]
    params = load_vae_params(d, TINY_VAE21)
    params["up0"]["time_conv"]["w"] = jnp.zeros_like(params["up0"]["time_conv"]["w"])
    latents = np.random.default_rng(3).standard_normal((1, TINY_VAE21.z_dim, 3, 4, 6)).astype(np.float32)
    ref, out = _run_ref(model, latents), _decode(TINY_VAE21, params, latents)
    assert np.max(np.abs(out[:, :, 0] - ref[:, :, 0])) < 1e-4
    assert rel_err(out[:, :, 1:], ref[:, :, 1:]) > 1e-2


def test_state_dict_and_safetensors_load_the_same(ref_models):
    model, d = ref_models["wan2.2"]
    from_file = load_vae_params(d, TINY_VAE22)
    from_sd = vae_params_from_state_dict(model.state_dict(), TINY_VAE22)
    assert jax.tree.structure(from_file) == jax.tree.structure(from_sd)
    for a, b in zip(jax.tree.leaves(from_file), jax.tree.leaves(from_sd), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    w = model.state_dict()["decoder.up_blocks.0.upsampler.time_conv.weight"].numpy()
    np.testing.assert_array_equal(np.asarray(from_file["up0"]["time_conv"]["w"]), w.transpose(2, 3, 4, 1, 0))


@pytest.mark.parametrize("cfg", [WAN21_VAE, WAN22_VAE], ids=["wan2.1", "wan2.2"])
def test_published_configs_have_diffusers_tensors(cfg):
    """The full-size presets read exactly the decoder-path tensors of diffusers' model of the same
    config (built on the meta device: shapes only, no memory)."""
    with torch.device("meta"):
        model = diffusers.AutoencoderKLWan(**cfg.to_diffusers())
    theirs = {k: tuple(v.shape) for k, v in model.state_dict().items() if not k.startswith(("encoder.", "quant_conv."))}
    assert vae_state_dict_shapes(cfg) == theirs


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_bf16_decode_as_close_as_diffusers_bf16(ref_models, kind):
    """bf16 deployment numerics: our bf16 decode is as close to the float32 reference as diffusers'
    own bf16 model is (which, like ours, normalises in float32)."""
    model, _ = ref_models[kind]
    cfg = CONFIGS[kind]
    latents = np.random.default_rng(5).standard_normal((1, cfg.z_dim, 3, 4, 6)).astype(np.float32)
    ref32 = _run_ref(model, latents)
    mb = copy.deepcopy(model).to(torch.bfloat16)
    with torch.no_grad():
        mean = torch.tensor(cfg.latents_mean).view(1, cfg.z_dim, 1, 1, 1).bfloat16()
        inv_std = (1.0 / torch.tensor(cfg.latents_std).view(1, cfg.z_dim, 1, 1, 1)).bfloat16()
        lat = torch.from_numpy(latents).bfloat16()
        theirs = rel_err(mb.decode(lat / inv_std + mean, return_dict=False)[0].float().numpy(), ref32)
    cb = cfg.replace(dtype=jnp.bfloat16)
    params = vae_params_from_state_dict(model.state_dict(), cb)
    out = jax.jit(lambda p, x: decode_latents(p, x, config=cb))(params, jnp.asarray(latents, jnp.bfloat16))
    ours = rel_err(np.asarray(out.astype(jnp.float32)), ref32)
    print(f"VAE bf16 {kind}: ours vs fp32 ref {ours:.2e}, diffusers bf16 vs fp32 ref {theirs:.2e}")
    assert ours < 1.5 * theirs + 1e-3
    assert ours < 5e-2
