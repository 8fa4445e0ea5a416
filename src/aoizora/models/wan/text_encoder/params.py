"""The parameters of Wan's UMT5 text encoder: their table, and their loading from a transformers
`UMT5EncoderModel` state dict or safetensors checkpoint (the Wan pipelines' `text_encoder` folder).

Parameters are a nested dict pytree. Linear weights are stored (in, out). The encoder's blocks are
stacked: every leaf under `layers` has a leading (num_layers,) dimension, so the forward is one
`jax.lax.scan` (a compact program for the compiler, one sharding annotation per weight kind). Every
block has its own relative-position bias table (UMT5; T5 shares block 0's).
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from aoizora.errors import CheckpointError, ShapeError
from aoizora.models.wan.text_encoder.config import UMT5Config
from aoizora.models.wan.transformer.checkpoint import (
    WEIGHT_DTYPES,
    SafetensorsFile,
    TensorChecks,
    _files,
    state_dict_array,
)
from aoizora.models.wan.transformer.params import tree_of

#: How the encoder's checkpoint tensors are judged, and what a refusal asks for.
TEXT_TENSORS = TensorChecks(
    config="the text encoder config", weights="the text encoder's weights", own="this encoder's weights",
    library="transformers",
    missing_fix="pass the transformers UMT5EncoderModel checkpoint of this text encoder (the pipeline's "
                "`text_encoder` folder, all shards)",
    shape_fix="pass the checkpoint of the configured encoder (its config.json must match)",
)

#: The token embedding's tensor. transformers' `UMT5EncoderModel` ties `encoder.embed_tokens.weight` to
#: it and `save_pretrained` writes only `shared.weight`; a checkpoint with the tied name alone is read too.
EMBEDDING = "shared.weight"
TIED_EMBEDDING = "encoder.embed_tokens.weight"


@dataclasses.dataclass(frozen=True)
class TextParamSpec:
    """One encoder parameter: its pytree path and shape, and the transformers tensor(s) it comes from
    ("{i}" stands for the block index of a stacked parameter)."""

    path: tuple[str, ...]
    shape: tuple[int, ...]
    source: str
    kind: str  # "linear" (transposed to (in, out)) or "vec" (as stored)

    @property
    def stacked(self) -> bool:
        return self.path[0] == "layers"

    @property
    def source_shape(self) -> tuple[int, ...]:
        """The shape of one transformers tensor of this parameter."""
        shape = self.shape[1:] if self.stacked else self.shape
        return shape[::-1] if self.kind == "linear" else shape


def text_param_table(config: UMT5Config) -> list[TextParamSpec]:
    """Every parameter of the encoder of `config`, in the order the forward uses them."""
    d, f, inner, n = config.d_model, config.d_ff, config.inner_dim, config.num_layers
    b = "encoder.block.{i}.layer."
    a = b + "0.SelfAttention."
    ff = b + "1.DenseReluDense."
    t = [TextParamSpec(("embed",), (config.vocab_size, d), EMBEDDING, "vec"),
         TextParamSpec(("layers", "rel_bias"), (n, config.relative_attention_num_buckets, config.num_heads),
                       a + "relative_attention_bias.weight", "vec"),
         TextParamSpec(("layers", "attn_norm"), (n, d), b + "0.layer_norm.weight", "vec")]
    t += [TextParamSpec(("layers", w), (n, d, inner), a + f"{w}.weight", "linear") for w in ("q", "k", "v")]
    t.append(TextParamSpec(("layers", "o"), (n, inner, d), a + "o.weight", "linear"))
    t.append(TextParamSpec(("layers", "ffn_norm"), (n, d), b + "1.layer_norm.weight", "vec"))
    t += [TextParamSpec(("layers", w), (n, d, f), ff + f"{w}.weight", "linear") for w in ("wi_0", "wi_1")]
    t.append(TextParamSpec(("layers", "wo"), (n, f, d), ff + "wo.weight", "linear"))
    t.append(TextParamSpec(("final_norm",), (d,), "encoder.final_layer_norm.weight", "vec"))
    return t


def _sources(spec: TextParamSpec, config: UMT5Config) -> list[str]:
    return [spec.source.format(i=i) for i in range(config.num_layers)] if spec.stacked else [spec.source]


def text_param_shapes(config: UMT5Config) -> dict:
    """Pytree of `jax.ShapeDtypeStruct` for every encoder parameter (to build the encode abstractly)."""
    return tree_of(text_param_table(config), lambda s: jax.ShapeDtypeStruct(s.shape, config.dtype))


def text_state_dict_shapes(config: UMT5Config) -> dict[str, tuple[int, ...]]:
    """The transformers tensors the encoder reads, name → shape."""
    return {src: s.source_shape for s in text_param_table(config) for src in _sources(s, config)}


def init_text_params(config: UMT5Config, seed: int = 0) -> dict:
    """Random encoder parameters (for tests and examples): fan-in scaled weights, norm gains near 1,
    unit-normal embeddings and relative biases."""
    rng = np.random.default_rng(seed)

    def leaf(s: TextParamSpec) -> jnp.ndarray:
        if s.path[-1].endswith("norm"):
            arr = 1.0 + 0.1 * rng.standard_normal(s.shape)
        elif s.kind == "linear":
            arr = rng.standard_normal(s.shape) / np.sqrt(s.shape[-2])
        else:
            arr = rng.standard_normal(s.shape)
        return jnp.asarray(arr, dtype=config.dtype)

    return tree_of(text_param_table(config), leaf)


def _resolve(names: Mapping[str, Any] | set[str], spec: TextParamSpec, src: str) -> str:
    """The checkpoint's name of `src`: the embedding may be stored under its tied name."""
    if src == EMBEDDING and src not in names and TIED_EMBEDDING in names:
        return TIED_EMBEDDING
    return src


def _unused(names: list[str], config: UMT5Config, where: str) -> None:
    """CheckpointError if the checkpoint has tensors `config` does not use (a wrong config)."""
    used = set(text_state_dict_shapes(config)) | {TIED_EMBEDDING}
    extra = sorted(n for n in names if n not in used)
    if extra:
        raise CheckpointError(
            f"{where} has {len(extra)} tensor(s) the text encoder config does not use, e.g. {extra[0]}; pass the "
            "config.json of this checkpoint (or strict=False to ignore them)"
        )


def _assemble(config: UMT5Config, read: Callable[[str], np.ndarray], names: set[str]) -> dict:
    """The params pytree, each tensor read by `read(name)` and converted; a stacked parameter fills
    one preallocated (layers, ...) host array, so peak host memory is about one parameter."""
    dtype = np.dtype(config.dtype)

    def leaf(s: TextParamSpec) -> jnp.ndarray:
        host = np.empty(s.shape, dtype=dtype)
        for i, src in enumerate(_sources(s, config)):
            arr = read(_resolve(names, s, src))
            host[i if s.stacked else ...] = (arr.T if s.kind == "linear" else arr).astype(np.float32)
        return jnp.asarray(host)

    return tree_of(text_param_table(config), leaf)


def text_params_from_state_dict(state_dict: Mapping[str, Any], config: UMT5Config, strict: bool = True) -> dict:
    """The encoder params of `config` from a transformers `UMT5EncoderModel` state dict (name → numpy
    array or torch tensor). Every tensor is checked before any is converted; a missing, mis-shaped or
    non-float one raises CheckpointError naming it (with `strict`, so does an unused tensor)."""
    names = set(state_dict)
    for spec in text_param_table(config):
        for src in _sources(spec, config):
            name = _resolve(names, spec, src)
            if name not in state_dict:
                TEXT_TENSORS.check(name, None, "", False, spec.source_shape, "the state dict")
            arr, dtype, floating = state_dict_array(state_dict[name])
            TEXT_TENSORS.check(name, tuple(arr.shape), dtype, floating, spec.source_shape, "the state dict")
    if strict:
        _unused(list(state_dict), config, "the state dict")
    return _assemble(config, lambda n: state_dict_array(state_dict[n])[0], names)


def load_text_params(path: str | os.PathLike, config: UMT5Config, strict: bool = True) -> dict:
    """The encoder params of `config` from a transformers `UMT5EncoderModel` safetensors checkpoint (a
    file, an index json or a folder). Presence, shape and dtype of every tensor are checked from the
    headers before any data is read; a bad tensor raises CheckpointError naming it."""
    files = [SafetensorsFile(f) for f in _files(path)]
    where = {name: f for f in files for name in f.header}
    for spec in text_param_table(config):
        for src in _sources(spec, config):
            name = _resolve(set(where), spec, src)
            f = where.get(name)
            dtype = "" if f is None else f.header[name]["dtype"]
            TEXT_TENSORS.check(name, None if f is None else f.shape(name), dtype, dtype in WEIGHT_DTYPES,
                               spec.source_shape, f"checkpoint {path}")
    if strict:
        _unused(list(where), config, f"checkpoint {path}")
    return _assemble(config, lambda n: where[n].get(n), set(where))


def load_text_config(path: str | os.PathLike, dtype: Any = jnp.bfloat16) -> UMT5Config:
    """UMT5Config from a text encoder folder's transformers `config.json` (or that file's path)."""
    p = Path(path)
    cfg_path = p if p.name == "config.json" else (p / "config.json" if p.is_dir() else p.parent / "config.json")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8 or not JSON
        raise CheckpointError(
            f"cannot read {cfg_path}: {exc}; the text encoder folder needs the transformers config.json") from None
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{cfg_path} is not a JSON object; pass the transformers config.json of the encoder")
    if cfg.get("model_type", "umt5") != "umt5":
        raise CheckpointError(f"{cfg_path} is a {cfg.get('model_type')!r} config; Wan's text encoder is umt5")
    try:
        return UMT5Config.from_transformers(cfg, dtype=dtype)
    except (ShapeError, TypeError) as exc:  # TypeError: a value of the wrong type
        raise CheckpointError(f"{cfg_path} is not a consistent UMT5 config: {exc}") from None
