"""Configuration of Wan's text encoder (UMT5-XXL's encoder, transformers' `UMT5EncoderModel`), the
prompt length the Wan pipelines pad to, and the shapes of one encode."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from aoizora.errors import ShapeError

#: Tokens every prompt is padded (or truncated) to: the `max_sequence_length=512` default of
#: diffusers' `WanPipeline.__call__` (diffusers 0.42.1, pipelines/wan/pipeline_wan.py), which it
#: passes to `encode_prompt` and on to `_get_t5_prompt_embeds`; the transformer's text input is
#: (batch, 512, 4096). (`_get_t5_prompt_embeds`' own default of 226 is never used by `__call__`.)
WAN_TEXT_LEN = 512

#: The feed-forward kinds the encoder implements: transformers' "gated-gelu", a gated GELU whose
#: activation is `gelu_new` (the tanh approximation), which `UMT5Config` substitutes for "gelu".
FEED_FORWARD_PROJS = ("gated-gelu",)


@dataclasses.dataclass(frozen=True)
class UMT5Config:
    """Hyper-parameters of a UMT5 encoder, named as in transformers' `UMT5Config` (its `config.json`).

    The defaults are UMT5-XXL as Wan uses it (`UMT5_XXL`). `dtype` is the dtype of weights and
    activations; the RMS norms' variance, the attention scores and the softmax are computed in
    float32 regardless.
    """

    vocab_size: int = 256384
    d_model: int = 4096
    d_kv: int = 64
    d_ff: int = 10240
    num_layers: int = 24
    num_heads: int = 64
    relative_attention_num_buckets: int = 32
    relative_attention_max_distance: int = 128
    layer_norm_epsilon: float = 1e-6
    feed_forward_proj: str = "gated-gelu"
    dtype: Any = jnp.bfloat16

    def __post_init__(self) -> None:
        if self.feed_forward_proj not in FEED_FORWARD_PROJS:
            raise ShapeError(f"feed_forward_proj {self.feed_forward_proj!r} is not implemented; the encoder has "
                             f"{', '.join(FEED_FORWARD_PROJS)} (UMT5-XXL's)")
        # the bidirectional buckets split in two halves, each half's first half exact positions
        if self.relative_attention_num_buckets < 4 or self.relative_attention_num_buckets % 4:
            raise ShapeError(f"relative_attention_num_buckets must be a positive multiple of 4, got "
                             f"{self.relative_attention_num_buckets}")
        if min(self.vocab_size, self.d_model, self.d_kv, self.d_ff, self.num_layers, self.num_heads) < 1:
            raise ShapeError("vocab_size, d_model, d_kv, d_ff, num_layers and num_heads must be positive")

    @property
    def inner_dim(self) -> int:
        """Width of the attention's queries, keys and values: heads × d_kv."""
        return self.num_heads * self.d_kv

    def replace(self, **changes: Any) -> UMT5Config:
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_transformers(cls, cfg: dict[str, Any], dtype: Any = jnp.bfloat16) -> UMT5Config:
        """Build from a transformers `config.json` dict of a `UMT5EncoderModel` (keys it leaves out
        take `UMT5Config`'s defaults here, which are UMT5-XXL's, not transformers' umt5-small's)."""
        keys = {f.name for f in dataclasses.fields(cls)} - {"dtype"}
        return cls(**{k: v for k, v in cfg.items() if k in keys}, dtype=dtype)

    def to_transformers(self) -> dict[str, Any]:
        """The transformers `UMT5Config` arguments of the same architecture."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "dtype"}


# UMT5-XXL's encoder as the Wan pipelines ship it: Wan-AI/Wan2.1-T2V-14B-Diffusers, text_encoder/config.json
# (UMT5EncoderModel) gives vocab_size 256384, d_model 4096, d_kv 64, d_ff 10240, num_layers 24, num_heads 64,
# relative_attention_num_buckets 32, relative_attention_max_distance 128, layer_norm_epsilon 1e-06 and
# feed_forward_proj "gated-gelu". huggingface.co was out of reach when this was written: the values are read
# from a public copy re-saved from that repository's snapshot (wavespeed/Wan2.1-T2V-14B-Diffusers-fp16,
# text_encoder/config.json; a copy of Wan-AI/Wan2.1-I2V-14B-480P-Diffusers' has the same) and should be
# checked against the Wan-AI file. Wan-Video/Wan2.1's own encoder agrees (wan/modules/t5.py, `umt5_xxl`, commit
# fc124fd0cf31945f39b39af80191fa8c7d07a027: vocab 256384, dim 4096, dim_ffn 10240, 64 heads, 24 layers,
# 32 buckets, shared_pos False, i.e. a relative bias in every block), as does the published checkpoint's size:
# its text_encoder folder holds 22.7 GB, these shapes' 5.68e9 float32 parameters.
UMT5_XXL = UMT5Config()


@dataclasses.dataclass(frozen=True)
class EncodeShapes:
    """The shapes of one encode: token ids and attention mask (batch, tokens) in, the prompt
    embeddings (batch, tokens, d_model) out."""

    tokens: tuple[int, int]
    embeddings: tuple[int, int, int]


def encode_shapes(config: UMT5Config, batch: int, text_len: int = WAN_TEXT_LEN) -> EncodeShapes:
    """The shapes of encoding `batch` prompts padded to `text_len` tokens. With classifier-free guidance
    a Wan pipeline encodes the positive and the negative prompts (two calls of `batch`, the same work
    as one of 2·batch). Raises ShapeError on a batch or length that is not positive."""
    if batch < 1 or text_len < 1:
        raise ShapeError(f"an encode needs a positive batch and prompt length, got batch {batch}, {text_len} tokens")
    return EncodeShapes(tokens=(batch, text_len), embeddings=(batch, text_len, config.d_model))
