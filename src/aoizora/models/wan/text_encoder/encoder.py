"""Wan's text encoder, UMT5-XXL's encoder, in pure JAX over a params pytree
(`aoizora.models.wan.text_encoder.params`), computing what transformers' `UMT5EncoderModel` computes
(`last_hidden_state`), and the Wan pipelines' post-processing of it into prompt embeddings.

The encoder, as transformers' `models/umt5/modeling_umt5.py` has it:
- token embedding (`shared`), no scaling, no absolute positions;
- per block: RMS norm, self-attention, residual; RMS norm, gated-GELU feed-forward, residual;
- the RMS norm is T5's: no mean subtraction and no bias, its variance in float32;
- the attention has no 1/√d_kv scaling (`UMT5Attention.scaling = 1.0`: T5 folds it into the
  initialisation) and adds a learned relative-position bias, its own table in every block
  (UMT5; T5 computes it in block 0 only and shares it);
- padded keys are masked out of the softmax (queries at padded positions are still computed, as in
  transformers: the pipeline zeroes them afterwards);
- the feed-forward is `DenseGatedActDense`: gelu_new(x·wi_0) ⊙ (x·wi_1), then ·wo;
- a final RMS norm.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from aoizora.models.wan.text_encoder.config import WAN_TEXT_LEN, UMT5Config, encode_shapes
from aoizora.models.wan.text_encoder.params import text_param_shapes

F32 = jnp.float32


def offset_buckets(length: int, num_buckets: int, max_distance: int) -> np.ndarray:
    """The bucket of every key − query offset of `length` positions, −(length − 1) … length − 1
    (entry o + length − 1 is offset o), bidirectional as in an encoder: half the buckets for keys
    after the query, half for keys at or before it; in each half, exact distances below
    num_buckets/4, then logarithmic bins up to `max_distance`, beyond which all share the last bucket.

    Computed in float32 with numpy in the order transformers' `_relative_position_bucket` computes
    it, so that a distance on a bin's edge falls in the same bucket."""
    rel = np.arange(-(length - 1), length, dtype=np.int64)
    half = num_buckets // 2
    buckets = (rel > 0).astype(np.int64) * half
    dist = np.abs(rel)
    max_exact = half // 2
    # distances below max_exact take the exact branch; clamping them keeps the log finite
    ratio = np.log(np.maximum(dist, max_exact).astype(np.float32) / np.float32(max_exact))
    ratio = ratio / np.float32(math.log(max_distance / max_exact)) * np.float32(half - max_exact)
    large = np.minimum(max_exact + ratio.astype(np.int64), half - 1)
    return (buckets + np.where(dist < max_exact, dist, large)).astype(np.int32)


def relative_position_buckets(length: int, num_buckets: int, max_distance: int) -> np.ndarray:
    """The (query, key) bucket of every pair of `length` positions (`offset_buckets` of key − query)."""
    pos = np.arange(length)
    return offset_buckets(length, num_buckets, max_distance)[pos[None, :] - pos[:, None] + length - 1]


def _toeplitz(u: jnp.ndarray, length: int) -> jnp.ndarray:
    """(heads, 2·length − 1) values by offset → (heads, query, key) with [h, q, k] = u[h, k − q + length − 1].

    Built by broadcasting, reshaping and slicing rather than by a gather with a (length, length) index
    table: that table (1 MiB at 512 tokens) would be a constant of the compiled program, in its HLO
    text; this way the only constant is the offsets' buckets. Each row of the (length, 2·length)
    broadcast, read with a stride one shorter, starts one offset earlier."""
    h = u.shape[0]
    rows = jnp.broadcast_to(jnp.pad(u, ((0, 0), (0, 1)))[:, None, :], (h, length, 2 * length))
    skewed = rows.reshape(h, 2 * length * length)[:, :length * (2 * length - 1)].reshape(h, length, 2 * length - 1)
    return skewed[:, :, length - 1:]


def _rms(x: jnp.ndarray, gain: jnp.ndarray, eps: float) -> jnp.ndarray:
    """T5's layer norm: x / √(mean(x²) + eps) × gain, the variance in float32, no mean, no bias."""
    xf = x.astype(F32)
    y = xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)
    return gain.astype(x.dtype) * y.astype(x.dtype)


def _attention(x: jnp.ndarray, p: dict, offsets: jnp.ndarray, key_mask: jnp.ndarray, config: UMT5Config,
               ) -> jnp.ndarray:
    """One block's self-attention of the normed `x` (batch, tokens, d_model): unscaled scores plus
    the block's relative-position bias (`offsets`: each key − query offset's bucket), padded keys
    masked, softmax in float32."""
    b, n, _ = x.shape
    h, dk = config.num_heads, config.d_kv
    q, k, v = ((x @ p[w].astype(x.dtype)).reshape(b, n, h, dk) for w in ("q", "k", "v"))
    bias = _toeplitz(jnp.take(p["rel_bias"].astype(F32), offsets, axis=0).T, n)  # (heads, query, key)
    s = jnp.einsum("bqhd,bkhd->bhqk", q, k, preferred_element_type=F32) + bias[None]
    # a masked key's score is the float32 minimum, as transformers' mask makes it (not −inf: an
    # all-padding row then averages its values instead of giving NaN, as there)
    s = jnp.where(key_mask[:, None, None, :], s, jnp.finfo(F32).min)
    w = jax.nn.softmax(s, axis=-1).astype(x.dtype)
    o = jnp.einsum("bhqk,bkhd->bqhd", w, v).reshape(b, n, h * dk)
    return o @ p["o"].astype(x.dtype)


def _feed_forward(x: jnp.ndarray, p: dict) -> jnp.ndarray:
    """`DenseGatedActDense`: gelu_new(x·wi_0) ⊙ (x·wi_1), then ·wo (gelu_new is GELU's tanh form)."""
    gate = jax.nn.gelu(x @ p["wi_0"].astype(x.dtype), approximate=True)
    return (gate * (x @ p["wi_1"].astype(x.dtype))) @ p["wo"].astype(x.dtype)


def encode_text(params: dict, input_ids: jnp.ndarray, attention_mask: jnp.ndarray | None = None, *,
           config: UMT5Config) -> jnp.ndarray:
    """transformers' `UMT5EncoderModel(input_ids, attention_mask).last_hidden_state`: token ids
    (batch, tokens) and a mask (batch, tokens), nonzero on real tokens (None: all real), → hidden
    states (batch, tokens, d_model) in `config.dtype`. The blocks run as one `jax.lax.scan`."""
    b, n = input_ids.shape
    mask = jnp.ones((b, n), bool) if attention_mask is None else attention_mask != 0
    offsets = jnp.asarray(offset_buckets(n, config.relative_attention_num_buckets,
                                         config.relative_attention_max_distance))
    x = jnp.take(params["embed"], input_ids, axis=0).astype(config.dtype)
    eps = config.layer_norm_epsilon

    def block(x: jnp.ndarray, p: dict) -> tuple[jnp.ndarray, None]:
        x = x + _attention(_rms(x, p["attn_norm"], eps), p, offsets, mask, config)
        return x + _feed_forward(_rms(x, p["ffn_norm"], eps), p), None

    x, _ = jax.lax.scan(block, x, params["layers"])
    return _rms(x, params["final_norm"], eps)


def wan_prompt_embeds(hidden: jnp.ndarray, attention_mask: jnp.ndarray, videos_per_prompt: int = 1,
                      dtype: Any = None) -> jnp.ndarray:
    """What diffusers' Wan pipelines (`_get_t5_prompt_embeds`) make of the encoder's output: each
    prompt's first `sum(mask)` positions kept and the rest zeros (they trim to the prompt's length and
    pad with zeros), cast to `dtype` (None: as it is), each prompt repeated `videos_per_prompt` times
    in a row. `hidden` (batch, tokens, d_model), `attention_mask` (batch, tokens)."""
    lengths = jnp.sum(attention_mask != 0, axis=1)
    keep = jnp.arange(hidden.shape[1])[None, :] < lengths[:, None]
    out = jnp.where(keep[..., None], hidden, jnp.zeros((), hidden.dtype))
    out = out if dtype is None else out.astype(dtype)
    return jnp.repeat(out, videos_per_prompt, axis=0) if videos_per_prompt > 1 else out


def encode_prompts(params: dict, input_ids: jnp.ndarray, attention_mask: jnp.ndarray, *,
                   config: UMT5Config) -> jnp.ndarray:
    """The Wan pipelines' prompt embeddings from tokenised prompts (padded to 512 tokens, the
    mask nonzero on real tokens): the encoder, then `wan_prompt_embeds`. (batch, tokens, d_model)."""
    return wan_prompt_embeds(encode_text(params, input_ids, attention_mask, config=config), attention_mask)


def abstract_encode_inputs(config: UMT5Config, batch: int, text_len: int = WAN_TEXT_LEN,
                           ) -> tuple[Any, jax.ShapeDtypeStruct, jax.ShapeDtypeStruct]:
    """(params, input_ids, attention_mask) as `jax.ShapeDtypeStruct`s for `encode_prompts` of `batch`
    prompts of `text_len` tokens (with classifier-free guidance, positive and negative prompts:
    see `encode_shapes`), to lower the encode without weights."""
    shapes = encode_shapes(config, batch, text_len)
    tokens = jax.ShapeDtypeStruct(shapes.tokens, jnp.int32)
    return text_param_shapes(config), tokens, jax.ShapeDtypeStruct(shapes.tokens, jnp.int32)
