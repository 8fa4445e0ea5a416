"""Parity of aoizora's Wan text encoder (UMT5's encoder) with transformers' PyTorch `UMT5EncoderModel`
(float32, CPU), and of its prompt embeddings with diffusers' `WanPipeline._get_t5_prompt_embeds`."""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from wan_testutil import TINY_UMT5, rel_err

from aoizora.models.wan.text_encoder.config import UMT5_XXL
from aoizora.models.wan.text_encoder.encoder import encode_text, relative_position_buckets, wan_prompt_embeds
from aoizora.models.wan.text_encoder.params import (
    TIED_EMBEDDING,
    load_text_config,
    load_text_params,
    text_params_from_state_dict,
    text_state_dict_shapes,
)

pytestmark = pytest.mark.parity


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """A random tiny `UMT5EncoderModel`, saved with `save_pretrained` (safetensors). transformers'
    own initialisation is kept but for the relative-bias tables and the norm gains, made larger
    (unit-normal biases, gains near 1 rather than exactly 1) so that an error in either shows."""
    torch.manual_seed(0)
    model = transformers.UMT5EncoderModel(transformers.UMT5Config(**TINY_UMT5.to_transformers())).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "relative_attention_bias" in name:
                p.copy_(torch.randn_like(p))
            elif "layer_norm" in name:
                p.copy_(1 + 0.1 * torch.randn_like(p))
    d = tmp_path_factory.mktemp("umt5")
    model.save_pretrained(d, safe_serialization=True)
    return model, d


def _prompts(lengths: list[int], text_len: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids and mask of prompts of `lengths` tokens (each ending with the EOS id 1), right-padded
    with the pad id 0 to `text_len`, as the T5 tokenizer pads them for the Wan pipelines."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((len(lengths), text_len), np.int64)
    mask = np.zeros((len(lengths), text_len), np.int64)
    for i, n in enumerate(lengths):
        ids[i, :n - 1] = rng.integers(2, TINY_UMT5.vocab_size, n - 1)
        ids[i, n - 1] = 1
        mask[i, :n] = 1
    return ids, mask


def _pipeline_embeds(model, ids: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(last_hidden_state, prompt embeddings) as diffusers' `WanPipeline._get_t5_prompt_embeds` makes
    them from the tokenizer's output: the encoder, then each prompt trimmed to its length and re-padded
    with zeros (the lines of diffusers 0.42.1's pipelines/wan/pipeline_wan.py)."""
    text_input_ids, mask_t = torch.from_numpy(ids), torch.from_numpy(mask)
    seq_lens = mask_t.gt(0).sum(dim=1).long()
    with torch.no_grad():
        hidden = model(text_input_ids, mask_t).last_hidden_state
    embeds = [u[:v] for u, v in zip(hidden, seq_lens, strict=True)]
    embeds = torch.stack([torch.cat([u, u.new_zeros(ids.shape[1] - u.size(0), u.size(1))]) for u in embeds], dim=0)
    return hidden.numpy(), embeds.numpy()


def _ours(params, ids, mask, cfg=TINY_UMT5):
    fn = jax.jit(lambda p, i, m: (lambda h: (h, wan_prompt_embeds(h, m)))(encode_text(p, i, m, config=cfg)))
    hidden, embeds = fn(params, jnp.asarray(ids, jnp.int32), jnp.asarray(mask, jnp.int32))
    return np.asarray(hidden), np.asarray(embeds)


CASES = [
    ([40, 17, 1], 40),  # one prompt fills the length, one is half padding, one is the EOS alone
    ([150, 60], 160),  # distances past max_distance (128): the last, shared buckets
    ([5], 5),
]


@pytest.mark.parametrize("lengths,text_len", CASES)
def test_encoder_parity(reference, lengths, text_len):
    model, d = reference
    cfg = load_text_config(d, dtype=jnp.float32)
    assert cfg == TINY_UMT5
    params = load_text_params(d, cfg)
    ids, mask = _prompts(lengths, text_len, seed=sum(lengths))
    ref_hidden, ref_embeds = _pipeline_embeds(model, ids, mask)
    hidden, embeds = _ours(params, ids, mask)
    assert hidden.shape == embeds.shape == (len(lengths), text_len, cfg.d_model)
    for name, out, ref in (("last_hidden_state", hidden, ref_hidden), ("prompt embeds", embeds, ref_embeds)):
        err, worst = rel_err(out, ref), float(np.max(np.abs(out - ref)))
        print(f"UMT5 parity {name} prompts {lengths} of {text_len}: max abs err {worst:.2e}, rel err {err:.2e}")
        assert err < 1e-4, err
        assert worst < 1e-4, worst
    for i, n in enumerate(lengths):  # the pipeline's zeros past each prompt, exactly
        assert not np.any(embeds[i, n:])


def test_parity_sees_each_blocks_relative_bias(reference):
    """The comparison is sensitive to every block's own relative-bias table: perturbing block 1's, or
    sharing block 0's with every block as T5 does, breaks parity."""
    model, d = reference
    params = load_text_params(d, TINY_UMT5)
    ids, mask = _prompts([40, 17], 40, seed=1)
    ref, _ = _pipeline_embeds(model, ids, mask)
    assert rel_err(_ours(params, ids, mask)[0], ref) < 1e-4
    table = params["layers"]["rel_bias"]
    # a constant added to a whole table leaves the softmax as it is: perturb each bucket differently
    noise = 0.3 * jax.random.normal(jax.random.key(0), table.shape[1:])
    perturbed = dict(params, layers=dict(params["layers"], rel_bias=table.at[1].add(noise)))
    assert rel_err(_ours(perturbed, ids, mask)[0], ref) > 1e-3
    shared = dict(params, layers=dict(params["layers"], rel_bias=jnp.broadcast_to(table[:1], table.shape)))
    assert rel_err(_ours(shared, ids, mask)[0], ref) > 1e-2


@pytest.mark.parametrize("length", [1, 7, 130, 512, 1000])
def test_buckets_match_transformers(length):
    """UMT5-XXL's bucketing (32 buckets, max distance 128) of every pair of positions is transformers',
    bin edges included."""
    with torch.device("meta"):
        att = transformers.models.umt5.modeling_umt5.UMT5Attention(
            transformers.UMT5Config(**UMT5_XXL.to_transformers()), has_relative_attention_bias=True)
    pos = torch.arange(length)
    theirs = att._relative_position_bucket((pos[None, :] - pos[:, None]).to("cpu")).numpy()
    np.testing.assert_array_equal(relative_position_buckets(length, 32, 128), theirs)


def test_state_dict_and_safetensors_load_the_same(reference):
    model, d = reference
    from_file = load_text_params(d, TINY_UMT5)
    sd = model.state_dict()
    from_sd = text_params_from_state_dict(sd, TINY_UMT5)
    assert jax.tree.structure(from_file) == jax.tree.structure(from_sd)
    for a, b in zip(jax.tree.leaves(from_file), jax.tree.leaves(from_sd), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    np.testing.assert_array_equal(np.asarray(from_file["layers"]["wi_0"][2]),
                                  sd["encoder.block.2.layer.1.DenseReluDense.wi_0.weight"].numpy().T)


def test_published_config_has_transformers_tensors():
    """UMT5-XXL's preset reads exactly the tensors of transformers' model of the same config (built on
    the meta device: shapes only, no memory), the tied embedding aside."""
    with torch.device("meta"):
        model = transformers.UMT5EncoderModel(transformers.UMT5Config(**UMT5_XXL.to_transformers()))
    theirs = {k: tuple(v.shape) for k, v in model.state_dict().items() if k != TIED_EMBEDDING}
    assert text_state_dict_shapes(UMT5_XXL) == theirs
    assert theirs["encoder.block.23.layer.0.SelfAttention.relative_attention_bias.weight"] == (32, 64)


def test_bf16_encode_as_close_as_transformers_bf16(reference):
    """bf16 deployment numerics: our bf16 encoder is as close to the float32 reference as transformers'
    own bf16 model is (both keep the norms' variance in float32; ours also the attention's softmax)."""
    model, _ = reference
    ids, mask = _prompts([40, 17], 40, seed=2)
    ref32, _ = _pipeline_embeds(model, ids, mask)
    with torch.no_grad():
        mb = copy.deepcopy(model).to(torch.bfloat16)
        theirs = rel_err(mb(torch.from_numpy(ids), torch.from_numpy(mask)).last_hidden_state.float().numpy(), ref32)
    cb = TINY_UMT5.replace(dtype=jnp.bfloat16)
    out, _ = _ours(text_params_from_state_dict(model.state_dict(), cb), ids, mask, cb)
    ours = rel_err(out.astype(np.float32), ref32)
    print(f"UMT5 bf16: ours vs fp32 ref {ours:.2e}, transformers bf16 vs fp32 ref {theirs:.2e}")
    assert ours < 1.5 * theirs + 1e-3
