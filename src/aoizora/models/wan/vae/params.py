"""The parameters of the Wan VAE's decoder path (`post_quant_conv` and `decoder.*`): their table, and
their loading from a diffusers `AutoencoderKLWan` state dict or safetensors checkpoint.

Parameters are a nested dict pytree, channels last: a 3D convolution's weight is
(kt, kh, kw, in, out), a 2D one's (kh, kw, in, out), a 1×1 convolution's a dense (in, out) matrix,
an RMS norm's gain a (channels,) vector. The encoder's tensors (`encoder.*`, `quant_conv.*`) are
not read: decoding does not use them.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from aoizora.errors import CheckpointError, ShapeError
from aoizora.models.wan.transformer.checkpoint import (
    WEIGHT_DTYPES,
    SafetensorsFile,
    TensorChecks,
    _files,
    state_dict_array,
)
from aoizora.models.wan.transformer.params import tree_of
from aoizora.models.wan.vae.config import WanVAEConfig

#: How the decoder's checkpoint tensors are judged, and what a refusal asks for.
VAE_TENSORS = TensorChecks(
    config="the VAE config", weights="the VAE's weights", own="this VAE's weights", library="diffusers",
    missing_fix="pass the diffusers AutoencoderKLWan checkpoint of this VAE (the pipeline's `vae` folder)",
    shape_fix="pass the checkpoint of the configured VAE (Wan 2.1's and Wan 2.2's differ; its config.json must "
              "match)",
)

#: Checkpoint tensors of the encoder side, which decoding leaves unread.
ENCODER_PREFIXES = ("encoder.", "quant_conv.")

@dataclasses.dataclass(frozen=True)
class VaeParamSpec:
    """One decoder parameter: its pytree path and shape, and the diffusers tensor it comes from."""

    path: tuple[str, ...]
    shape: tuple[int, ...]
    source: str
    source_shape: tuple[int, ...]
    kind: str  # how the diffusers tensor becomes the parameter: "conv3d", "conv2d", "dense", "gain" or "vec"


def _conv3d(path: tuple[str, ...], src: str, c_in: int, c_out: int, k: tuple[int, int, int]) -> list[VaeParamSpec]:
    return [VaeParamSpec(path + ("w",), (*k, c_in, c_out), src + ".weight", (c_out, c_in, *k), "conv3d"),
            VaeParamSpec(path + ("b",), (c_out,), src + ".bias", (c_out,), "vec")]


def _conv2d(path: tuple[str, ...], src: str, c_in: int, c_out: int) -> list[VaeParamSpec]:
    return [VaeParamSpec(path + ("w",), (3, 3, c_in, c_out), src + ".weight", (c_out, c_in, 3, 3), "conv2d"),
            VaeParamSpec(path + ("b",), (c_out,), src + ".bias", (c_out,), "vec")]


def _dense(path: tuple[str, ...], src: str, c_in: int, c_out: int, dims: int) -> list[VaeParamSpec]:
    """A 1×1 (`dims`-D) convolution as an (in, out) matrix."""
    return [VaeParamSpec(path + ("w",), (c_in, c_out), src + ".weight", (c_out, c_in) + (1,) * dims, "dense"),
            VaeParamSpec(path + ("b",), (c_out,), src + ".bias", (c_out,), "vec")]


def _gain(path: tuple[str, ...], src: str, c: int, dims: int) -> VaeParamSpec:
    return VaeParamSpec(path, (c,), src + ".gamma", (c,) + (1,) * dims, "gain")


def _resnet(path: tuple[str, ...], src: str, c_in: int, c_out: int) -> list[VaeParamSpec]:
    t = [_gain(path + ("norm1",), src + ".norm1", c_in, 3)]
    t += _conv3d(path + ("conv1",), src + ".conv1", c_in, c_out, (3, 3, 3))
    t.append(_gain(path + ("norm2",), src + ".norm2", c_out, 3))
    t += _conv3d(path + ("conv2",), src + ".conv2", c_out, c_out, (3, 3, 3))
    if c_in != c_out:
        t += _dense(path + ("shortcut",), src + ".conv_shortcut", c_in, c_out, 3)
    return t


def vae_param_table(config: WanVAEConfig) -> list[VaeParamSpec]:
    """Every parameter of the decoder path of `config`, in the order the decoder uses them."""
    z, mid = config.z_dim, config.mid_dim
    d = "decoder."
    t = _dense(("post_quant_conv",), "post_quant_conv", z, z, 3)
    t += _conv3d(("conv_in",), d + "conv_in", z, mid, (3, 3, 3))
    t += _resnet(("mid", "res0"), d + "mid_block.resnets.0", mid, mid)
    a = d + "mid_block.attentions.0"
    t.append(_gain(("mid", "attn", "norm"), a + ".norm", mid, 2))
    t += _dense(("mid", "attn", "qkv"), a + ".to_qkv", mid, 3 * mid, 2)
    t += _dense(("mid", "attn", "proj"), a + ".proj", mid, mid, 2)
    t += _resnet(("mid", "res1"), d + "mid_block.resnets.1", mid, mid)
    for i, blk in enumerate(config.up_blocks()):
        p, s = (f"up{i}",), d + f"up_blocks.{i}"
        c_in = blk.in_dim
        for j in range(blk.resnets):
            t += _resnet(p + (f"res{j}",), s + f".resnets.{j}", c_in, blk.out_dim)
            c_in = blk.out_dim
        # diffusers names the resampler `upsampler` in Wan 2.2's residual blocks, `upsamplers.0` in Wan 2.1's
        r = s + (".upsampler" if config.is_residual else ".upsamplers.0")
        if blk.upsample == "upsample3d":
            t += _conv3d(p + ("time_conv",), r + ".time_conv", blk.out_dim, 2 * blk.out_dim, (3, 1, 1))
        if blk.upsample is not None:
            t += _conv2d(p + ("resample",), r + ".resample.1", blk.out_dim, blk.upsample_dim)
    out = config.up_blocks()[-1].out_dim
    t.append(_gain(("norm_out",), d + "norm_out", out, 3))
    t += _conv3d(("conv_out",), d + "conv_out", out, config.out_channels, (3, 3, 3))
    return t


def _convert(arr: np.ndarray, spec: VaeParamSpec) -> np.ndarray:
    """A diffusers tensor in the JAX parameter's layout."""
    if spec.kind == "conv3d":
        return arr.transpose(2, 3, 4, 1, 0)
    if spec.kind == "conv2d":
        return arr.transpose(2, 3, 1, 0)
    if spec.kind == "dense":
        return arr.reshape(arr.shape[0], arr.shape[1]).T
    if spec.kind == "gain":
        return arr.reshape(-1)
    return arr


def vae_param_shapes(config: WanVAEConfig) -> dict:
    """Pytree of `jax.ShapeDtypeStruct` for every decoder parameter (to build the decode abstractly)."""
    return tree_of(vae_param_table(config), lambda s: jax.ShapeDtypeStruct(s.shape, config.dtype))


def vae_state_dict_shapes(config: WanVAEConfig) -> dict[str, tuple[int, ...]]:
    """The diffusers tensors the decoder path reads, name → shape."""
    return {s.source: s.source_shape for s in vae_param_table(config)}


def init_vae_params(config: WanVAEConfig, seed: int = 0) -> dict:
    """Random decoder parameters (for tests and examples): fan-in scaled weights, gains near 1."""
    rng = np.random.default_rng(seed)

    def leaf(s: VaeParamSpec) -> jnp.ndarray:
        if s.kind == "gain":
            arr = 1.0 + 0.1 * rng.standard_normal(s.shape)
        elif s.kind == "vec":
            arr = 0.02 * rng.standard_normal(s.shape)
        else:
            arr = rng.standard_normal(s.shape) / np.sqrt(np.prod(s.shape[:-1]))
        return jnp.asarray(arr, dtype=config.dtype)

    return tree_of(vae_param_table(config), leaf)


def _unused(names: list[str], config: WanVAEConfig, where: str) -> None:
    """CheckpointError if the checkpoint has decoder-path tensors `config` does not use (a wrong config)."""
    used = set(vae_state_dict_shapes(config))
    extra = sorted(n for n in names if n not in used and not n.startswith(ENCODER_PREFIXES))
    if extra:
        raise CheckpointError(
            f"{where} has {len(extra)} decoder tensor(s) the VAE config does not use, e.g. {extra[0]}; pass the "
            "config.json of this checkpoint (or strict=False to ignore them)"
        )


def vae_params_from_state_dict(state_dict: Mapping[str, Any], config: WanVAEConfig, strict: bool = True) -> dict:
    """The decoder params of `config` from a diffusers `AutoencoderKLWan` state dict (name → numpy array
    or torch tensor). Every tensor is checked before any is converted; a missing, mis-shaped or
    non-float one raises CheckpointError naming it (with `strict`, so does an unused decoder tensor)."""
    for spec in vae_param_table(config):
        if spec.source not in state_dict:
            VAE_TENSORS.check(spec.source, None, "", False, spec.source_shape, "the state dict")
        arr, dtype, floating = state_dict_array(state_dict[spec.source])
        VAE_TENSORS.check(spec.source, tuple(arr.shape), dtype, floating, spec.source_shape, "the state dict")
    if strict:
        _unused(list(state_dict), config, "the state dict")

    def leaf(s: VaeParamSpec) -> jnp.ndarray:
        return jnp.asarray(_convert(state_dict_array(state_dict[s.source])[0], s).astype(np.float32), config.dtype)

    return tree_of(vae_param_table(config), leaf)


def load_vae_params(path: str | os.PathLike, config: WanVAEConfig, strict: bool = True) -> dict:
    """The decoder params of `config` from a diffusers `AutoencoderKLWan` safetensors checkpoint (a
    file, an index json or a folder). Presence, shape and dtype of every tensor are checked from the
    headers before any data is read; a bad tensor raises CheckpointError naming it."""
    files = [SafetensorsFile(f) for f in _files(path)]
    where = {name: f for f in files for name in f.header}
    for spec in vae_param_table(config):
        f = where.get(spec.source)
        dtype = "" if f is None else f.header[spec.source]["dtype"]
        VAE_TENSORS.check(spec.source, None if f is None else f.shape(spec.source), dtype, dtype in WEIGHT_DTYPES,
                          spec.source_shape, f"checkpoint {path}")
    if strict:
        _unused(list(where), config, f"checkpoint {path}")

    def leaf(s: VaeParamSpec) -> jnp.ndarray:
        return jnp.asarray(_convert(where[s.source].get(s.source), s).astype(np.float32), config.dtype)

    return tree_of(vae_param_table(config), leaf)


def load_vae_config(path: str | os.PathLike, dtype: Any = jnp.bfloat16) -> WanVAEConfig:
    """WanVAEConfig from a VAE checkpoint folder's diffusers `config.json` (or that file's path)."""
    p = Path(path)
    cfg_path = p if p.name == "config.json" else (p / "config.json" if p.is_dir() else p.parent / "config.json")
    try:
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8 or not JSON
        raise CheckpointError(
            f"cannot read {cfg_path}: {exc}; the VAE folder needs the diffusers config.json") from None
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{cfg_path} is not a JSON object; pass the diffusers config.json of the VAE")
    try:
        return WanVAEConfig.from_diffusers(cfg, dtype=dtype)
    except ShapeError as exc:
        raise CheckpointError(f"{cfg_path} is not a consistent AutoencoderKLWan config: {exc}") from None
