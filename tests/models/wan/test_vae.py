"""The Wan VAE decode's shapes (without computing it) and its parameter loading's errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
from safetensors.numpy import save_file
from wan_testutil import TINY_VAE21, TINY_VAE22

from aoizora.errors import CheckpointError, ShapeError
from aoizora.models.wan.vae.config import WAN21_VAE, WAN22_VAE, WanVAEConfig, decode_shapes
from aoizora.models.wan.vae.decoder import abstract_decode_inputs, decode_latents
from aoizora.models.wan.vae.params import (
    load_vae_config,
    load_vae_params,
    vae_params_from_state_dict,
    vae_state_dict_shapes,
)


@pytest.mark.parametrize("cfg,latent,video", [
    # Wan 2.1 14B at 720p, 81 frames: 21 latent frames of 90 x 160
    (WAN21_VAE, (1, 16, 21, 90, 160), (1, 3, 81, 720, 1280)),
    (WAN21_VAE, (2, 16, 1, 60, 104), (2, 3, 1, 480, 832)),
    # Wan 2.2 TI2V-5B at 704 x 1280, 121 frames: 31 latent frames of 44 x 80, 48 channels
    (WAN22_VAE, (1, 48, 31, 44, 80), (1, 3, 121, 704, 1280)),
])
def test_decode_shapes_of_the_published_vaes(cfg, latent, video):
    shapes = decode_shapes(cfg, latent)
    assert shapes.video == video
    assert (shapes.chunks, shapes.first_frames, shapes.chunk_frames) == (latent[2], 1, 4)


@pytest.mark.parametrize("cfg", [TINY_VAE21, TINY_VAE22, WAN21_VAE, WAN22_VAE],
                         ids=["tiny2.1", "tiny2.2", "2.1", "2.2"])
def test_the_decode_builds_the_shapes_it_states(cfg):
    """Traced abstractly (no weights, no compute), the decode's output is what `decode_shapes` says."""
    latent = (1, cfg.z_dim, 3, 2, 3)
    params, latents = abstract_decode_inputs(cfg, latent)
    out = jax.eval_shape(lambda p, x: decode_latents(p, x, config=cfg), params, latents)
    assert out.shape == decode_shapes(cfg, latent).video
    assert out.dtype == cfg.dtype


@pytest.mark.parametrize("latent,what", [
    ((1, 16, 3, 4), "(batch, channels, frames, height, width)"),
    ((1, 48, 3, 4, 4), "16 (z_dim)"),
    ((1, 16, 0, 4, 4), "positive"),
])
def test_decode_shapes_rejects_latents_the_decoder_cannot_take(latent, what):
    with pytest.raises(ShapeError, match=what.replace("(", r"\(").replace(")", r"\)")):
        decode_shapes(WAN21_VAE, latent)


def test_config_reads_and_writes_diffusers_config():
    d = WAN22_VAE.to_diffusers()
    assert d["decoder_base_dim"] == 256 and d["patch_size"] == 2 and len(d["latents_mean"]) == 48
    assert WanVAEConfig.from_diffusers({**d, "_class_name": "AutoencoderKLWan", "dropout": 0.0}) == WAN22_VAE
    # a config.json that leaves out fields gets diffusers' defaults, which are Wan 2.1's VAE
    assert WanVAEConfig.from_diffusers({"base_dim": 96, "z_dim": 16}) == WAN21_VAE
    with pytest.raises(ShapeError, match="latents_mean"):
        WanVAEConfig(z_dim=48)


def _tensors(cfg, dtype=np.float32):
    rng = np.random.default_rng(0)
    t = {name: rng.standard_normal(shape).astype(dtype) for name, shape in vae_state_dict_shapes(cfg).items()}
    t["encoder.conv_in.weight"] = np.zeros((4, 3, 3, 3, 3), np.float32)  # the encoder's: left unread
    t["quant_conv.bias"] = np.zeros((8,), np.float32)
    return t


def test_loads_a_checkpoint_ignoring_the_encoder(tmp_path):
    tensors = _tensors(TINY_VAE21, ml_dtypes.bfloat16)
    save_file(tensors, str(tmp_path / "vae.safetensors"))
    params = load_vae_params(tmp_path, TINY_VAE21)
    w = tensors["decoder.up_blocks.0.upsamplers.0.resample.1.weight"].astype(np.float32)
    np.testing.assert_array_equal(np.asarray(params["up0"]["resample"]["w"]), w.transpose(2, 3, 1, 0))
    assert params["up0"]["resample"]["w"].dtype == jnp.float32
    gain = tensors["decoder.mid_block.attentions.0.norm.gamma"].astype(np.float32)
    np.testing.assert_array_equal(np.asarray(params["mid"]["attn"]["norm"]), gain.reshape(-1))


@pytest.mark.parametrize("damage,name,problem", [
    (lambda t: t.pop("decoder.conv_out.bias"), "decoder.conv_out.bias", "missing tensor"),
    (lambda t: t.__setitem__("decoder.mid_block.resnets.1.conv2.weight", np.zeros((16, 16, 3, 3, 1), np.float32)),
     "decoder.mid_block.resnets.1.conv2.weight",
     "has shape (16, 16, 3, 3, 1), the VAE config expects (16, 16, 3, 3, 3)"),
    (lambda t: t.__setitem__("post_quant_conv.bias", np.zeros((4,), np.int32)), "post_quant_conv.bias", "stored as"),
    (lambda t: t.__setitem__("decoder.up_blocks.3.upsamplers.0.resample.1.bias", np.zeros((2,), np.float32)),
     "decoder.up_blocks.3.upsamplers.0.resample.1.bias", "does not use"),
])
def test_loading_names_the_bad_tensor(tmp_path, damage, name, problem):
    tensors = _tensors(TINY_VAE21)
    damage(tensors)
    save_file(tensors, str(tmp_path / "vae.safetensors"))
    for load in (lambda: load_vae_params(tmp_path / "vae.safetensors", TINY_VAE21),
                 lambda: vae_params_from_state_dict(tensors, TINY_VAE21)):
        with pytest.raises(CheckpointError) as err:
            load()
        assert name in str(err.value) and problem in str(err.value)


def test_a_wrong_config_is_a_shape_error_and_unused_tensors_can_be_allowed(tmp_path):
    tensors = _tensors(TINY_VAE22)
    with pytest.raises(CheckpointError, match="expects"):
        vae_params_from_state_dict(tensors, TINY_VAE21)
    tensors["decoder.extra.weight"] = np.zeros((1,), np.float32)
    with pytest.raises(CheckpointError, match="decoder.extra.weight"):
        vae_params_from_state_dict(tensors, TINY_VAE22)
    vae_params_from_state_dict(tensors, TINY_VAE22, strict=False)


def test_a_vae_folder_without_its_config_is_a_checkpoint_error(tmp_path):
    with pytest.raises(CheckpointError, match="config.json"):
        load_vae_config(tmp_path)
    (tmp_path / "config.json").write_text('{"base_dim": 160, "z_dim": 48, "latents_mean": [0.0], "latents_std": [1.0]}')
    with pytest.raises(CheckpointError, match="48 values"):
        load_vae_config(tmp_path)
