"""Loading diffusers-format `WanTransformer3DModel` weights into the JAX params pytree.

Reads safetensors directly (header + memory map; no torch, bfloat16 via ml_dtypes), single file
or sharded with a `*.safetensors.index.json`. Every tensor's presence and shape is checked
from the headers before any data is read, so a bad checkpoint raises `CheckpointError` naming
the tensor and nothing is half-loaded. Tensors are then read one parameter at a time and,
when `shardings` is given, placed directly with their sharding.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

import jax
import ml_dtypes
import numpy as np

from aoizora.errors import CheckpointError
from aoizora.models.wan.config import WanConfig
from aoizora.models.wan.params import ParamSpec, _set, param_dtype, param_table

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
#: Tensors diffusers itself ignores on load.
IGNORED = ("norm_added_q",)


class SafetensorsFile:
    """Minimal reader: parses the header, memory-maps the data, returns numpy views."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
        except (OSError, struct.error, json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise CheckpointError(f"cannot read safetensors header of {self.path}: {exc}") from exc
        header.pop("__metadata__", None)
        self.offset = 8 + n
        self.header: dict[str, dict] = header
        self._mm: np.memmap | None = None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.header[name]["shape"])

    def get(self, name: str) -> np.ndarray:
        info = self.header[name]
        if info["dtype"] not in _DTYPES:
            raise CheckpointError(f"tensor {name} in {self.path} has unsupported dtype {info['dtype']}")
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        start, end = info["data_offsets"]
        raw = self._mm[self.offset + start: self.offset + end]
        dt = np.dtype(_DTYPES[info["dtype"]])
        if raw.size != dt.itemsize * int(np.prod(info["shape"], dtype=np.int64)):
            raise CheckpointError(f"tensor {name} in {self.path}: data size does not match its shape")
        return raw.view(dt).reshape(info["shape"])


def _files(path: str | os.PathLike) -> list[Path]:
    p = Path(path)
    if p.is_file():
        if p.name.endswith(".index.json"):
            try:
                index = json.loads(p.read_text())
            except (OSError, json.JSONDecodeError) as exc:
                raise CheckpointError(f"cannot read checkpoint index {p}: {exc}") from exc
            return sorted({p.parent / f for f in index.get("weight_map", {}).values()})
        return [p]
    if p.is_dir():
        idx = sorted(p.glob("*.safetensors.index.json"))
        if idx:
            return _files(idx[0])
        files = sorted(p.glob("*.safetensors"))
        if files:
            return files
    raise CheckpointError(f"no safetensors checkpoint at {p} (expected a .safetensors file, an index json or a folder)")


def load_config(path: str | os.PathLike, **overrides: Any) -> WanConfig:
    """WanConfig from the checkpoint folder's diffusers `config.json`."""
    p = Path(path)
    cfg_path = p / "config.json" if p.is_dir() else p.parent / "config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"cannot read {cfg_path}: {exc}") from exc
    return WanConfig.from_diffusers(cfg, **overrides)


def _expected_source_shape(spec: ParamSpec, config: WanConfig) -> tuple[int, ...]:
    shape = spec.shape[1:] if spec.stacked else spec.shape
    if spec.kind == "linear":
        return (shape[1], shape[0])
    if spec.kind == "conv":
        return (shape[1], config.in_channels, *config.patch_size)
    if spec.kind == "table":
        return (1, *shape)
    return tuple(shape)


def _convert(arr: np.ndarray, spec: ParamSpec) -> np.ndarray:
    if spec.kind == "linear":
        return arr.T
    if spec.kind == "conv":
        return arr.reshape(arr.shape[0], -1).T
    if spec.kind == "table":
        return arr[0]
    return arr


def _sources(spec: ParamSpec, config: WanConfig) -> list[str]:
    if spec.stacked:
        return [spec.source.format(i=i) for i in range(config.num_layers)]
    return [spec.source]


def load_params(
    path: str | os.PathLike,
    config: WanConfig,
    shardings: Any | None = None,
    strict: bool = True,
) -> dict:
    """Load a diffusers Wan transformer checkpoint into the params pytree of `config`.

    `shardings`: optional pytree of `jax.sharding.Sharding` (same structure as the params) —
    each parameter is placed with its sharding as it is read. With `strict`, tensors the model
    does not use (other than ones diffusers ignores) are an error too.
    """
    where = validate_checkpoint(path, config, strict)
    specs = param_table(config)
    # stream tensor by tensor
    flat_shardings = _flatten_shardings(shardings, config)
    tree: dict = {}
    for spec in specs:
        dtype = param_dtype(spec, config)
        if spec.stacked:  # fill one preallocated (layers, ...) array: peak host memory ≈ one parameter
            host = np.empty(spec.shape, dtype=dtype)
            for i, src in enumerate(_sources(spec, config)):
                host[i] = _convert(where[src].get(src), spec)
        else:
            host = _convert(where[spec.source].get(spec.source), spec).astype(dtype)
        sh = flat_shardings.get(spec.path)
        _set(tree, spec.path, jax.device_put(host, sh) if sh is not None else jax.numpy.asarray(host))
    return tree


def validate_checkpoint(path: str | os.PathLike, config: WanConfig, strict: bool = True) -> dict[str, "SafetensorsFile"]:
    """Check every tensor's presence and shape (and, with `strict`, that nothing is left over)
    from the safetensors headers alone; returns where each tensor lives. Raises `CheckpointError`
    naming the first bad tensor."""
    files = [SafetensorsFile(f) for f in _files(path)]
    where: dict[str, SafetensorsFile] = {}
    for f in files:
        for name in f.header:
            where[name] = f
    used: set[str] = set()
    for spec in param_table(config):
        want = _expected_source_shape(spec, config)
        for src in _sources(spec, config):
            if src not in where:
                raise CheckpointError(f"checkpoint {path} is missing tensor {src} (shape {want})")
            got = where[src].shape(src)
            if got != want:
                raise CheckpointError(f"tensor {src} has shape {got}, the config expects {want}")
            used.add(src)
    if strict:
        extra = sorted(n for n in where if n not in used and not any(s in n for s in IGNORED))
        if extra:
            raise CheckpointError(
                f"checkpoint has {len(extra)} tensor(s) this config does not use, e.g. {extra[0]} "
                "(wrong config? pass strict=False to ignore)"
            )
    return where


def _flatten_shardings(shardings: Any | None, config: WanConfig) -> dict:
    if shardings is None:
        return {}
    out = {}
    for spec in param_table(config):
        node = shardings
        for k in spec.path:
            node = node[k]
        out[spec.path] = node
    return out


def save_params(params: dict, config: WanConfig, path: str | os.PathLike) -> None:
    """Write params back in diffusers naming (float32/bfloat16 as stored) — the inverse of load."""
    from safetensors.numpy import save_file

    tensors: dict[str, np.ndarray] = {}
    for spec in param_table(config):
        node = params
        for k in spec.path:
            node = node[k]
        arr = np.asarray(jax.device_get(node))
        items = [arr[i] for i in range(config.num_layers)] if spec.stacked else [arr]
        for src, a in zip(_sources(spec, config), items):
            if spec.kind == "linear":
                a = a.T
            elif spec.kind == "conv":
                a = a.T.reshape(config.dim, config.in_channels, *config.patch_size)
            elif spec.kind == "table":
                a = a[None]
            tensors[src] = np.ascontiguousarray(a)
    save_file(tensors, str(path))
