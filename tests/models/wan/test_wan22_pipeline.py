"""Wan 2.2 pipelines without the reference: diffusers folder layout (two experts, sharded files,
bad tensors), the published configurations, expert choice per step, TI2V's latent geometry."""

from __future__ import annotations

import json
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from wan_testutil import TINY_T2V

from aoizora.errors import CheckpointError, ShapeError
from aoizora.models.registry import model_config, pipeline_config, video_shape
from aoizora.models.wan.transformer.checkpoint import save_params
from aoizora.models.wan.transformer.config import WAN22_TI2V_5B, WAN_T2V_14B, VideoShape
from aoizora.models.wan.transformer.params import init_params, param_shapes
from aoizora.models.wan.video.pipeline import WanPipelineConfig, load_expert_params, load_pipeline_config

MODEL_INDEX = {
    "_class_name": "WanPipeline", "_diffusers_version": "0.42.1", "boundary_ratio": 0.875,
    "expand_timesteps": False, "scheduler": ["diffusers", "UniPCMultistepScheduler"],
    "text_encoder": ["transformers", "UMT5EncoderModel"], "tokenizer": ["transformers", "AutoTokenizer"],
    "transformer": ["diffusers", "WanTransformer3DModel"], "transformer_2": ["diffusers", "WanTransformer3DModel"],
    "vae": ["diffusers", "AutoencoderKLWan"],
}


def _write_expert(folder, params, sharded=False):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(
        {"_class_name": "WanTransformer3DModel", **TINY_T2V.to_diffusers(), "patch_size": [1, 2, 2]}))
    path = folder / "diffusion_pytorch_model.safetensors"
    save_params(params, TINY_T2V, path)
    if sharded:  # as diffusers writes large checkpoints: parts plus an index json
        tensors = load_file(str(path))
        path.unlink()
        names = sorted(tensors)
        half = len(names) // 2
        parts = {"diffusion_pytorch_model-00001-of-00002.safetensors": names[:half],
                 "diffusion_pytorch_model-00002-of-00002.safetensors": names[half:]}
        for part, keys in parts.items():
            save_file({k: tensors[k] for k in keys}, str(folder / part))
        index = {"weight_map": {k: part for part, keys in parts.items() for k in keys}}
        (folder / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))


@pytest.fixture()
def two_experts(tmp_path):
    hi, lo = init_params(TINY_T2V, seed=1), init_params(TINY_T2V, seed=2)
    (tmp_path / "model_index.json").write_text(json.dumps(MODEL_INDEX))
    _write_expert(tmp_path / "transformer", hi)
    _write_expert(tmp_path / "transformer_2", lo, sharded=True)
    (tmp_path / "scheduler").mkdir()
    (tmp_path / "scheduler" / "scheduler_config.json").write_text(json.dumps({"flow_shift": 12.0}))
    (tmp_path / "vae").mkdir()
    (tmp_path / "vae" / "config.json").write_text(json.dumps({"z_dim": 4, "scale_factor_spatial": 8,
                                                              "scale_factor_temporal": 4}))
    return tmp_path, hi, lo


def test_two_expert_folder_with_a_sharded_expert(two_experts):
    root, hi, lo = two_experts
    pipe = load_pipeline_config(root, dtype=jnp.float32)
    assert pipe.boundary_ratio == 0.875 and pipe.shift == 12.0 and pipe.transformer == TINY_T2V
    assert pipe.transformer_2 == TINY_T2V and pipe.boundary_timestep == 875.0
    got = load_expert_params(root, pipe)
    for want, loaded in zip((hi, lo), got, strict=True):
        jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), want, loaded)
    # the experts differ (the second is not the first loaded twice)
    assert not np.array_equal(np.asarray(got[0]["blocks"]["ff1"]["w"]), np.asarray(got[1]["blocks"]["ff1"]["w"]))


def _rewrite_part(root, mutate):
    folder = root / "transformer_2"
    part = folder / "diffusion_pytorch_model-00002-of-00002.safetensors"
    tensors = load_file(str(part))
    mutate(tensors)
    save_file(tensors, str(part))
    index_path = folder / "diffusion_pytorch_model.safetensors.index.json"
    index = json.loads(index_path.read_text())
    index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != part.name}
    index["weight_map"].update({k: part.name for k in tensors})
    index_path.write_text(json.dumps(index))


def test_bad_tensor_in_the_second_expert_is_named(two_experts):
    root, _, _ = two_experts
    pipe = load_pipeline_config(root, dtype=jnp.float32)
    name = "blocks.1.ffn.net.2.weight"
    pattern = re.escape(name)
    _rewrite_part(root, lambda t: t.__setitem__(name, np.zeros((3, 5), np.float32)))
    with pytest.raises(CheckpointError, match=rf"transformer_2/: tensor {pattern} has shape \(3, 5\)"):
        load_expert_params(root, pipe)
    _rewrite_part(root, lambda t: t.pop(name))
    with pytest.raises(CheckpointError, match=rf"transformer_2/.*missing tensor {pattern}"):
        load_expert_params(root, pipe)
    _rewrite_part(root, lambda t: t.update({name: np.zeros((64, 96), np.float32),
                                            "blocks.1.attn1.to_qq.weight": np.zeros((64, 64), np.float32)}))
    with pytest.raises(CheckpointError, match=r"transformer_2/.*blocks\.1\.attn1\.to_qq\.weight"):
        load_expert_params(root, pipe)


def test_folder_inconsistencies(two_experts):
    root, _, _ = two_experts
    index = dict(MODEL_INDEX, transformer_2=[None, None])
    (root / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="1 transformer.*boundary_ratio 0.875"):
        load_pipeline_config(root)
    (root / "model_index.json").write_text(json.dumps(dict(index, transformer=[None, None])))
    with pytest.raises(CheckpointError, match="no transformer"):
        load_pipeline_config(root)
    (root / "model_index.json").write_text(json.dumps(MODEL_INDEX))
    (root / "vae" / "config.json").write_text(json.dumps({"z_dim": 48, "scale_factor_spatial": 16}))
    with pytest.raises(CheckpointError, match="z_dim is 48"):
        load_pipeline_config(root)
    (root / "model_index.json").unlink()
    with pytest.raises(CheckpointError, match="model_index.json"):
        load_pipeline_config(root)


def test_published_configurations():
    def count(cfg):
        return sum(int(np.prod(s.shape)) for s in jax.tree.leaves(param_shapes(cfg)))

    t2v, i2v, ti2v = (pipeline_config(f"wan2.2-{m}") for m in ("t2v-a14b", "i2v-a14b", "ti2v-5b"))
    assert len(t2v.experts) == 2 and t2v.transformer == t2v.transformer_2 == WAN_T2V_14B
    assert ((t2v.boundary_ratio, t2v.shift, t2v.steps, t2v.guidance_scale, t2v.guidance_scale_2)
            == (0.875, 12.0, 40, 4.0, 3.0))
    assert (i2v.boundary_ratio, i2v.shift, i2v.guidance(0), i2v.guidance(1)) == (0.9, 5.0, 3.5, 3.5)
    assert i2v.transformer.condition_channels == 20 and not i2v.transformer.is_i2v
    assert len(ti2v.experts) == 1 and ti2v.expand_timesteps and ti2v.transformer.dim == 3072
    assert abs(count(t2v.transformer) / 1e9 - 14.29) < 0.05  # each expert; 28.6B in all
    assert abs(count(ti2v.transformer) / 1e9 - 5.0) < 0.1
    with pytest.raises(ShapeError, match="both transformer_2 and boundary_ratio"):
        WanPipelineConfig(TINY_T2V, TINY_T2V)


def test_expert_per_step_follows_the_boundary():
    pipe = pipeline_config("wan2.2-t2v-a14b")
    sched = pipe.scheduler()
    experts = pipe.expert_per_step(sched)
    n_high = experts.count(0)
    assert experts == [0] * n_high + [1] * (40 - n_high)
    assert sched.timesteps[n_high - 1] >= 875 > sched.timesteps[n_high]
    assert [pipe.guidance(e) for e in experts[n_high - 1: n_high + 1]] == [4.0, 3.0]
    single = pipeline_config("wan2.2-ti2v-5b")
    assert set(single.expert_per_step(single.scheduler())) == {0}


def test_ti2v_latent_geometry():
    cfg = model_config("wan2.2-ti2v-5b")
    video = video_shape(cfg, "720p", 121)
    assert (video.width, video.height) == (1280, 704)
    assert video.latent_shape(cfg) == (48, 31, 44, 80) and video.tokens(cfg) == 31 * 22 * 40
    assert video_shape(cfg, "720p", 81).tokens(cfg) == 21 * 22 * 40
    assert video_shape(model_config("wan2.2-t2v-a14b"), "720p", 81).tokens(WAN_T2V_14B) == 75_600
    with pytest.raises(ShapeError, match="multiple of 32"):
        VideoShape(81, 720, 1280).latent_shape(WAN22_TI2V_5B)


@pytest.mark.slow
def test_per_token_timestep_shape_is_checked():
    from aoizora.models.wan.transformer.model import forward

    params = init_params(TINY_T2V)
    x = jnp.zeros((1, 4, 1, 4, 4))
    text = jnp.zeros((1, 5, 32))
    with pytest.raises(ShapeError, match=r"\(1, 4\) \(one per token\)"):
        forward(params, x, jnp.zeros((1, 5)), text, config=TINY_T2V)
    same = forward(params, x, jnp.full((1, 4), 300.0), text, config=TINY_T2V)
    np.testing.assert_allclose(same, forward(params, x, jnp.full((1,), 300.0), text, config=TINY_T2V), rtol=1e-5,
                               atol=1e-5)
