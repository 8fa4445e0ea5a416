"""The parameter table of the Wan DiT: one entry per JAX parameter with its shape, dtype class,
logical axes and the diffusers tensor(s) it comes from.

Parameters are a nested dict pytree. Linear weights are stored (in, out). The transformer
blocks are *stacked*: every block leaf has a leading ``layers`` dimension so the forward pass
is one `jax.lax.scan` (compact compiled programs, one sharding annotation per weight kind).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol, TypeVar

import jax
import jax.numpy as jnp
import numpy as np

from aoizora.models.wan.transformer.config import WanConfig


class _HasPath(Protocol):
    @property
    def path(self) -> tuple[str, ...]: ...


S = TypeVar("S", bound=_HasPath)


@dataclasses.dataclass(frozen=True)
class ParamSpec:
    path: tuple[str, ...]
    shape: tuple[int, ...]
    axes: tuple[str | None, ...]
    fp32: bool  # kept in float32 (norms, modulation tables, time embedder) like diffusers
    source: str  # diffusers name; "{i}" stands for the block index for stacked params
    kind: str  # "linear" (transpose), "conv" (flatten+transpose), "table" (squeeze lead 1), "vec"
    init_std: float = 0.02

    @property
    def stacked(self) -> bool:
        return self.path[0] == "blocks"


def _linear(path, n_in, n_out, ax_in, ax_out, source, fp32=False, stacked_layers=None):
    lead, lead_ax = ((stacked_layers,), ("layers",)) if stacked_layers else ((), ())
    return [
        ParamSpec(path + ("w",), lead + (n_in, n_out), lead_ax + (ax_in, ax_out), fp32, source + ".weight", "linear"),
        ParamSpec(path + ("b",), lead + (n_out,), lead_ax + (ax_out,), fp32, source + ".bias", "vec"),
    ]


def param_table(config: WanConfig) -> list[ParamSpec]:
    """Every parameter of the model for `config`."""
    d, f, L = config.dim, config.ffn_dim, config.num_layers
    pv = config.patch_volume
    t: list[ParamSpec] = []
    t.append(ParamSpec(("patch_embed", "w"), (config.in_channels * pv, d), (None, "embed"), False,
                       "patch_embedding.weight", "conv"))
    t.append(ParamSpec(("patch_embed", "b"), (d,), ("embed",), False, "patch_embedding.bias", "vec"))
    ce = "condition_embedder."
    t += _linear(("time_1",), config.freq_dim, d, None, "embed", ce + "time_embedder.linear_1", fp32=True)
    t += _linear(("time_2",), d, d, None, "embed", ce + "time_embedder.linear_2", fp32=True)
    t += _linear(("time_proj",), d, 6 * d, "embed", None, ce + "time_proj")
    t += _linear(("text_1",), config.text_dim, d, None, "embed", ce + "text_embedder.linear_1")
    t += _linear(("text_2",), d, d, None, "embed", ce + "text_embedder.linear_2")
    if config.is_i2v:
        if config.image_dim is None:
            raise ValueError("an I2V config (added_kv_proj_dim set) needs image_dim")
        im = config.image_dim
        ie = ce + "image_embedder."
        t += [ParamSpec(("img_norm1", "scale"), (im,), (None,), True, ie + "norm1.weight", "vec"),
              ParamSpec(("img_norm1", "bias"), (im,), (None,), True, ie + "norm1.bias", "vec")]
        t += _linear(("img_ff1",), im, im, None, None, ie + "ff.net.0.proj")
        t += _linear(("img_ff2",), im, d, None, "embed", ie + "ff.net.2")
        t += [ParamSpec(("img_norm2", "scale"), (d,), (None,), True, ie + "norm2.weight", "vec"),
              ParamSpec(("img_norm2", "bias"), (d,), (None,), True, ie + "norm2.bias", "vec")]
    b = "blocks.{i}."
    S = dict(stacked_layers=L)
    t.append(ParamSpec(("blocks", "sst"), (L, 6, d), ("layers", None, None), True, b + "scale_shift_table", "table"))
    for a in ("attn1", "attn2"):
        for n in ("q", "k", "v"):
            src = b + f"{a}.to_{n}"
            t += _linear(("blocks", a, n), d, d, "embed", "heads", src, **S)
        t += _linear(("blocks", a, "o"), d, d, "heads", "embed", b + f"{a}.to_out.0", **S)
        t.append(ParamSpec(("blocks", a, "norm_q"), (L, d), ("layers", "heads"), False,
                           b + f"{a}.norm_q.weight", "vec"))
        t.append(ParamSpec(("blocks", a, "norm_k"), (L, d), ("layers", "heads"), False,
                           b + f"{a}.norm_k.weight", "vec"))
    if config.is_i2v:
        kv = config.added_kv_proj_dim
        t += _linear(("blocks", "attn2", "add_k"), kv, d, "embed", "heads", b + "attn2.add_k_proj", **S)
        t += _linear(("blocks", "attn2", "add_v"), kv, d, "embed", "heads", b + "attn2.add_v_proj", **S)
        t.append(ParamSpec(("blocks", "attn2", "norm_added_k"), (L, d), ("layers", "heads"), False,
                           b + "attn2.norm_added_k.weight", "vec"))
    if config.cross_attn_norm:
        t.append(ParamSpec(("blocks", "norm2", "scale"), (L, d), ("layers", None), True, b + "norm2.weight", "vec"))
        t.append(ParamSpec(("blocks", "norm2", "bias"), (L, d), ("layers", None), True, b + "norm2.bias", "vec"))
    t += _linear(("blocks", "ff1"), d, f, "embed", "mlp", b + "ffn.net.0.proj", **S)
    t += _linear(("blocks", "ff2"), f, d, "mlp", "embed", b + "ffn.net.2", **S)
    t.append(ParamSpec(("out_sst",), (2, d), (None, None), True, "scale_shift_table", "table"))
    t += _linear(("proj_out",), d, config.out_channels * pv, "embed", None, "proj_out")
    return t


def param_dtype(spec: ParamSpec, config: WanConfig) -> Any:
    return jnp.float32 if spec.fp32 else config.dtype


def _set(tree: dict, path: tuple[str, ...], value: Any) -> None:
    for k in path[:-1]:
        tree = tree.setdefault(k, {})
    tree[path[-1]] = value


def tree_of(specs: Iterable[S], leaf: Callable[[S], Any]) -> dict:
    """Nested dict with `leaf(spec)` at each spec's `path` (a parameter table of any model)."""
    tree: dict = {}
    for spec in specs:
        _set(tree, spec.path, leaf(spec))
    return tree


def build_tree(config: WanConfig, leaf_fn) -> dict:
    """Nested dict with `leaf_fn(spec)` at every parameter."""
    return tree_of(param_table(config), leaf_fn)


def iter_specs(config: WanConfig) -> Iterator[ParamSpec]:
    yield from param_table(config)


def param_shapes(config: WanConfig) -> dict:
    """Pytree of `jax.ShapeDtypeStruct` (no sharding) for every parameter."""
    return build_tree(config, lambda s: jax.ShapeDtypeStruct(s.shape, param_dtype(s, config)))


def param_logical_axes(config: WanConfig) -> dict:
    """Pytree of logical axis-name tuples, one per parameter (same structure as the params)."""
    return build_tree(config, lambda s: s.axes)


def init_params(config: WanConfig, seed: int = 0) -> dict:
    """Random parameters (for tests and examples): normal weights, unit norm scales, random tables."""
    rng = np.random.default_rng(seed)

    def leaf(s: ParamSpec):
        name = s.path[-1]
        if name in ("norm_q", "norm_k", "norm_added_k", "scale"):
            arr = 1.0 + 0.1 * rng.standard_normal(s.shape)
        elif name in ("sst", "out_sst"):
            arr = rng.standard_normal(s.shape) / np.sqrt(config.dim)
        elif name == "b" or name == "bias":
            arr = 0.02 * rng.standard_normal(s.shape)
        else:
            fan_in = s.shape[-2]
            arr = rng.standard_normal(s.shape) / np.sqrt(fan_in)
        return jnp.asarray(arr, dtype=param_dtype(s, config))

    return build_tree(config, leaf)
