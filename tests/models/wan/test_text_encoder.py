"""The Wan text encoder's config and shapes (without computing the encoder), its relative-position
buckets, the pipeline's zero padding of the prompt embeddings, and its parameter loading's errors."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file
from wan_testutil import TINY_UMT5

from aoizora.errors import CheckpointError, ShapeError
from aoizora.models.wan.text_encoder.config import UMT5_XXL, WAN_TEXT_LEN, UMT5Config, encode_shapes
from aoizora.models.wan.text_encoder.encoder import (
    _toeplitz,
    abstract_encode_inputs,
    encode_prompts,
    offset_buckets,
    relative_position_buckets,
    wan_prompt_embeds,
)
from aoizora.models.wan.text_encoder.params import (
    EMBEDDING,
    TIED_EMBEDDING,
    init_text_params,
    load_text_config,
    load_text_params,
    text_param_table,
    text_params_from_state_dict,
    text_state_dict_shapes,
)


def test_xxl_preset_is_wans_text_encoder():
    c = UMT5_XXL
    assert (c.vocab_size, c.d_model, c.d_kv, c.d_ff, c.num_layers, c.num_heads) == (256384, 4096, 64, 10240, 24, 64)
    assert (c.relative_attention_num_buckets, c.relative_attention_max_distance) == (32, 128)
    assert c.inner_dim == c.d_model and WAN_TEXT_LEN == 512
    # 10 tensors a block and the embedding and final norm: the 242 of the published checkpoint's index
    assert len(text_state_dict_shapes(c)) == 242
    n_params = sum(int(np.prod(s)) for s in text_state_dict_shapes(c).values())
    assert 5.6e9 < n_params < 5.7e9  # 22.7 GB in float32, the published text_encoder folder's size


def test_encode_shapes():
    s = encode_shapes(UMT5_XXL, 2)
    assert s.tokens == (2, 512) and s.embeddings == (2, 512, 4096)
    with pytest.raises(ShapeError, match="positive batch"):
        encode_shapes(UMT5_XXL, 0)


@pytest.mark.parametrize("cfg,batch", [(TINY_UMT5, 3), (UMT5_XXL, 2)], ids=["tiny", "xxl"])
def test_the_encode_builds_the_shapes_it_states(cfg, batch):
    """Traced abstractly (no weights, no compute), the prompt embeddings are what `encode_shapes` says."""
    params, ids, mask = abstract_encode_inputs(cfg, batch)
    out = jax.eval_shape(lambda p, i, m: encode_prompts(p, i, m, config=cfg), params, ids, mask)
    assert out.shape == encode_shapes(cfg, batch).embeddings
    assert out.dtype == cfg.dtype
    assert params["layers"]["rel_bias"].shape == (cfg.num_layers, 32, cfg.num_heads)


def test_buckets_are_bidirectional_and_saturate():
    b = relative_position_buckets(300, 32, 128)
    assert b.shape == (300, 300) and b.dtype == np.int32
    assert np.all(np.diag(b) == 0)
    assert b[0, 1] == 17 and b[1, 0] == 1  # a key after the query is in the upper half
    assert b[0, 299] == 31 and b[299, 0] == 15  # past max_distance: the last bucket of each half
    assert b.min() == 0 and b.max() == 31


@pytest.mark.parametrize("length", [1, 2, 9])
def test_the_bias_by_offset_is_the_bias_by_pair(length):
    """The attention builds each block's (heads, query, key) bias from its values by offset; it is the
    bias table read at every pair's bucket."""
    table = np.random.default_rng(length).standard_normal((32, 3)).astype(np.float32)
    by_offset = _toeplitz(jnp.asarray(table[offset_buckets(length, 32, 128)].T), length)
    by_pair = table[relative_position_buckets(length, 32, 128)].transpose(2, 0, 1)
    np.testing.assert_array_equal(np.asarray(by_offset), by_pair)


def test_the_xxl_encode_lowers_without_a_large_constant():
    """Lowered at UMT5-XXL × 512 tokens from abstract inputs, the program carries no (512, 512) bucket
    table as a constant: its text stays small for the HLO analyser."""
    fn = jax.jit(lambda p, i, m: encode_prompts(p, i, m, config=UMT5_XXL))
    lowered = fn.lower(*abstract_encode_inputs(UMT5_XXL, 2))
    assert len(lowered.as_text()) < 200_000


def test_prompt_embeds_are_zero_past_each_prompt():
    hidden = jnp.ones((2, 6, 3))
    mask = jnp.array([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]])
    out = wan_prompt_embeds(hidden, mask, videos_per_prompt=2, dtype=jnp.bfloat16)
    assert out.shape == (4, 6, 3) and out.dtype == jnp.bfloat16
    np.testing.assert_array_equal(np.asarray(out[:2, :, 0], np.float32), [[1, 1, 1, 0, 0, 0]] * 2)
    assert np.all(np.asarray(out[2:], np.float32) == 1)


def test_config_reads_and_writes_transformers_config():
    d = UMT5_XXL.to_transformers()
    assert UMT5Config.from_transformers({**d, "model_type": "umt5", "dense_act_fn": "gelu_new"}) == UMT5_XXL
    with pytest.raises(ShapeError, match="feed_forward_proj"):
        UMT5Config(feed_forward_proj="relu")


def _state_dict(cfg: UMT5Config) -> dict[str, np.ndarray]:
    """A transformers-named state dict of random params of `cfg`."""
    params = init_text_params(cfg)
    out = {}
    for spec in text_param_table(cfg):
        node = params
        for k in spec.path:
            node = node[k]
        arr = np.asarray(node)
        items = [(spec.source.format(i=i), arr[i]) for i in range(cfg.num_layers)] if spec.stacked else [
            (spec.source, arr)]
        for name, a in items:
            out[name] = np.ascontiguousarray(a.T if spec.kind == "linear" else a)
    return out


def _save(tmp_path, sd, config=None):
    save_file(sd, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config or {**TINY_UMT5.to_transformers(), "model_type": "umt5"}))
    return tmp_path


def test_loads_what_it_writes_and_the_tied_embedding_name(tmp_path):
    sd = _state_dict(TINY_UMT5)
    params = load_text_params(_save(tmp_path, sd), load_text_config(tmp_path, dtype=jnp.float32))
    q1 = sd["encoder.block.1.layer.0.SelfAttention.q.weight"]
    np.testing.assert_array_equal(np.asarray(params["layers"]["q"][1]), q1.T)
    sd[TIED_EMBEDDING] = sd.pop(EMBEDDING)
    tied = text_params_from_state_dict(sd, TINY_UMT5)
    np.testing.assert_array_equal(np.asarray(tied["embed"]), np.asarray(params["embed"]))


@pytest.mark.parametrize("change,match", [
    (lambda sd: sd.pop("encoder.block.2.layer.1.DenseReluDense.wo.weight"), "missing tensor encoder.block.2"),
    (lambda sd: sd.pop(EMBEDDING), "missing tensor shared.weight"),
    (lambda sd: sd.update({"encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight":
                           np.zeros((16, 4), np.float32)}), r"has shape \(16, 4\).*expects \(32, 4\)"),
    (lambda sd: sd.update({"encoder.final_layer_norm.weight": np.zeros(32, np.int32)}), "floating point"),
    (lambda sd: sd.update({"encoder.block.3.layer.0.layer_norm.weight": np.zeros(32, np.float32)}),
     "does not use, e.g. encoder.block.3"),
])
def test_bad_checkpoints_raise_checkpoint_error_naming_the_tensor(tmp_path, change, match):
    sd = _state_dict(TINY_UMT5)
    change(sd)
    with pytest.raises(CheckpointError, match=match):
        load_text_params(_save(tmp_path, sd), TINY_UMT5)
    with pytest.raises(CheckpointError, match=match):
        text_params_from_state_dict(sd, TINY_UMT5)


@pytest.mark.parametrize("text,match", [
    ("not json", "cannot read"),
    ("[1]", "not a JSON object"),
    ('{"model_type": "t5"}', "umt5"),
    ('{"feed_forward_proj": "relu"}', "not a consistent UMT5 config"),
])
def test_bad_configs_raise_checkpoint_error(tmp_path, text, match):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(CheckpointError, match=match):
        load_text_config(tmp_path)
