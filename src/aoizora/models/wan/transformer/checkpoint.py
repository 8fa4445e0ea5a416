"""Loading diffusers-format `WanTransformer3DModel` weights into the JAX params pytree.

Reads safetensors directly (header + memory map; no torch, bfloat16 via ml_dtypes), single file
or sharded with a `*.safetensors.index.json`. Every tensor's presence and shape is checked
from the headers before any data is read, so a bad checkpoint raises `CheckpointError` naming
the tensor and nothing is half-loaded. Tensors are then read one parameter at a time and,
when `shardings` is given, placed directly with their sharding.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import ml_dtypes
import numpy as np

from aoizora.errors import CheckpointError
from aoizora.models.wan.transformer.config import WanConfig
from aoizora.models.wan.transformer.params import ParamSpec, _set, param_dtype, param_table

_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
#: The safetensors format caps its JSON header at 100 MB (huggingface/safetensors,
#: safetensors/src/tensor.rs, MAX_HEADER_SIZE, commit 000a16f45cff0d4169ca15b67ea002895234d671);
#: a larger length field means the file is not safetensors.
MAX_HEADER_BYTES = 100_000_000
#: What the model's weights may be stored as: every Wan parameter is floating point (converted to
#: the parameter's dtype on load). An integer or boolean label over a weight means the header lies
#: about the data (float32 bytes labelled I32 have the same size) or the file is not this model's.
WEIGHT_DTYPES = ("F32", "BF16", "F16", "F64")
#: Tensors diffusers itself ignores on load.
IGNORED = ("norm_added_q",)


@dataclass(frozen=True)
class TensorChecks:
    """How one model's checkpoint tensors are judged (present, of the configured shape, floating
    point) and what each refusal tells the user to pass instead."""

    config: str  # the config a shape comes from, e.g. "the VAE config"
    weights: str  # whose weights are floating point, e.g. "the VAE's weights"
    own: str  # what a non-float tensor is not, e.g. "this VAE's weights"
    library: str  # the library whose checkpoint is expected, e.g. "diffusers"
    missing_fix: str  # what to pass when a tensor is missing
    shape_fix: str  # what to pass when a tensor has another shape

    def check(self, name: str, shape: tuple[int, ...] | None, dtype: str, floating: bool,
              want: tuple[int, ...], where: str) -> None:
        """CheckpointError unless tensor `name` is present (`shape` not None), of shape `want` and
        floating point."""
        if shape is None:
            raise CheckpointError(f"{where} is missing tensor {name} (shape {want}); {self.missing_fix}")
        if shape != want:
            raise CheckpointError(f"tensor {name} in {where} has shape {shape}, {self.config} expects {want}; "
                                  f"{self.shape_fix}")
        if not floating:
            raise CheckpointError(
                f"tensor {name} in {where} is stored as {dtype}, but {self.weights} are floating point (a "
                f"mislabelled header, or not {self.own}); pass the {self.library} checkpoint as published"
            )


def state_dict_array(value: Any) -> tuple[np.ndarray, str, bool]:
    """A state dict entry (numpy array or torch tensor) as a numpy array, its dtype's name, and
    whether it is floating point."""
    if hasattr(value, "detach"):  # a torch tensor: bfloat16 has no numpy dtype, so floats are read as float32
        floating = bool(value.is_floating_point())
        t = value.detach().cpu()
        return (t.float() if floating else t).numpy(), str(value.dtype), floating
    arr = np.asarray(value)
    return arr, str(arr.dtype), arr.dtype.kind == "f" or arr.dtype == ml_dtypes.bfloat16


class SafetensorsFile:
    """Minimal reader: parses the header, memory-maps the data, returns numpy views."""

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        fix = "pass a diffusers .safetensors checkpoint (re-download it if it was cut short)"
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as fh:
                prefix = fh.read(8)
                if len(prefix) < 8:
                    raise CheckpointError(
                        f"{self.path} is {len(prefix)} bytes, too short for a safetensors file; {fix}")
                (n,) = struct.unpack("<Q", prefix)
                if n > min(size - 8, MAX_HEADER_BYTES):  # the header length is read from the file: bound it
                    raise CheckpointError(
                        f"{self.path} is not a safetensors file (its header length field says {n} bytes, "
                        f"the file has {size - 8} after it); {fix}"
                    )
                header = json.loads(fh.read(n).decode("utf-8"), parse_constant=_reject_constant)
        except OSError as exc:
            raise CheckpointError(f"cannot read {self.path}: {exc.strerror}; {fix}") from None
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
            raise CheckpointError(f"{self.path} has no readable safetensors header ({exc}); {fix}") from None
        self.offset = 8 + n
        self.header: dict[str, dict] = _check_header(header, self.path, size - self.offset, fix)
        self._mm: np.memmap | None = None

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self.header[name]["shape"])

    def get(self, name: str) -> np.ndarray:
        info = self.header[name]
        if info["dtype"] not in _DTYPES:
            raise CheckpointError(
                f"tensor {name} in {self.path} has unsupported dtype {info['dtype']} (aoizora reads "
                f"{', '.join(_DTYPES)}); convert the checkpoint to bfloat16 or float32"
            )
        if self._mm is None:
            self._mm = np.memmap(self.path, dtype=np.uint8, mode="r")
        start, end = info["data_offsets"]
        raw = self._mm[self.offset + start: self.offset + end]
        dt = np.dtype(_DTYPES[info["dtype"]])
        if raw.size != dt.itemsize * math.prod(info["shape"]):
            raise CheckpointError(
                f"tensor {name} in {self.path}: data size does not match its shape; the file is damaged, "
                "re-download it"
            )
        return raw.view(dt).reshape(info["shape"])


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


def _check_header(header: object, path: Path, data_bytes: int, fix: str) -> dict[str, dict]:
    """The tensor entries of a parsed header; CheckpointError unless each has a dtype, a shape and
    data offsets inside the file."""
    if not isinstance(header, dict):
        raise CheckpointError(f"{path} has a safetensors header that is not a JSON object; {fix}")
    header = dict(header)
    header.pop("__metadata__", None)
    for name, info in header.items():
        ok = (
            isinstance(info, dict)
            and isinstance(info.get("dtype"), str)
            and isinstance(info.get("shape"), list)
            and all(type(d) is int and d >= 0 for d in info["shape"])
            and isinstance(info.get("data_offsets"), list)
            and len(info["data_offsets"]) == 2
            and all(type(o) is int for o in info["data_offsets"])
            and 0 <= info["data_offsets"][0] <= info["data_offsets"][1] <= data_bytes
        )
        if not ok:
            raise CheckpointError(
                f"{path}: tensor {name!r} has a malformed header entry (dtype, shape and data offsets inside "
                f"the file's {data_bytes} data bytes are required); {fix}"
            )
    return header


def _files(path: str | os.PathLike) -> list[Path]:
    p = Path(path)
    if p.is_file():
        if p.name.endswith(".index.json"):
            try:
                index = json.loads(p.read_text(encoding="utf-8"))
            except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8 or not JSON
                raise CheckpointError(f"cannot read checkpoint index {p}: {exc}; pass an intact checkpoint") from None
            weight_map = index.get("weight_map") if isinstance(index, dict) else None
            if not isinstance(weight_map, dict) or not all(isinstance(f, str) for f in weight_map.values()):
                raise CheckpointError(
                    f"checkpoint index {p} has no weight_map of tensor name to file name; pass an intact checkpoint"
                )
            return sorted({p.parent / f for f in weight_map.values()})
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
        cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # ValueError: not UTF-8 or not JSON
        raise CheckpointError(
            f"cannot read {cfg_path}: {exc}; the checkpoint folder needs the diffusers config.json"
        ) from None
    if not isinstance(cfg, dict):
        raise CheckpointError(f"{cfg_path} is not a JSON object; pass the diffusers config.json of the checkpoint")
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


def validate_checkpoint(path: str | os.PathLike, config: WanConfig, strict: bool = True) -> dict[str, SafetensorsFile]:
    """Check every tensor's presence, shape and dtype (and, with `strict`, that nothing is left over)
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
                raise CheckpointError(
                    f"checkpoint {path} is missing tensor {src} (shape {want}); pass the diffusers "
                    "WanTransformer3DModel checkpoint of this model (the `transformer` folder, all shards)"
                )
            got = where[src].shape(src)
            if got != want:
                raise CheckpointError(
                    f"tensor {src} has shape {got}, the config expects {want}; pass the checkpoint of the "
                    "planned model (its config.json must match)"
                )
            stored = where[src].header[src]["dtype"]
            if stored not in WEIGHT_DTYPES:
                raise CheckpointError(
                    f"tensor {src} is stored as {stored}, but the model's weights are floating point "
                    f"({', '.join(WEIGHT_DTYPES)}); the file's header mislabels its data or it is not this model's "
                    "checkpoint: pass the diffusers checkpoint as published"
                )
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
        for src, a in zip(_sources(spec, config), items, strict=True):
            if spec.kind == "linear":
                a = a.T
            elif spec.kind == "conv":
                a = a.T.reshape(config.dim, config.in_channels, *config.patch_size)
            elif spec.kind == "table":
                a = a[None]
            tensors[src] = np.ascontiguousarray(a)
    save_file(tensors, str(path))
