"""A generic scanned transformer (attention + MLP), sharded by logical-axis rules.

Not Wan: a plain pre-norm block used to validate the cost model on compiled programs of
realistic structure (a while loop over layers, tensor/sequence/data parallel collectives) and to
benchmark the analyzers at 14B size without depending on the Wan model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

Rules = Mapping[str, str | tuple[str, ...] | None]  # logical axis -> mesh axis (or axes)


@dataclass(frozen=True)
class TransformerConfig:
    layers: int = 4
    dim: int = 1024
    heads: int = 8
    head_dim: int = 128
    mlp: int = 4096
    seq: int = 2048
    batch: int = 2

    @classmethod
    def like_wan_14b(cls, seq: int = 4096, layers: int = 40) -> TransformerConfig:
        """Wan 2.1 14B block dimensions (dim 5120, 40 heads x 128, ffn 13824)."""
        return cls(layers=layers, dim=5120, heads=40, head_dim=128, mlp=13824, seq=seq, batch=2)


def _spec(rules: Rules, *logical: str | None) -> P:
    return P(*(rules.get(a) if a else None for a in logical))


def param_specs(rules: Rules) -> dict[str, P]:
    return {
        "wq": _spec(rules, None, "embed", "heads", None),
        "wk": _spec(rules, None, "embed", "heads", None),
        "wv": _spec(rules, None, "embed", "heads", None),
        "wo": _spec(rules, None, "heads", None, "embed"),
        "w1": _spec(rules, None, "embed", "mlp"),
        "w2": _spec(rules, None, "mlp", "embed"),
    }


def abstract_args(cfg: TransformerConfig, mesh: Mesh, rules: Rules) -> tuple[Any, dict[str, Any]]:
    """ShapeDtypeStructs (with shardings) of the activations and the stacked layer weights."""
    bf16 = jnp.bfloat16
    L, D, H, K, F = cfg.layers, cfg.dim, cfg.heads, cfg.head_dim, cfg.mlp
    shapes = {"wq": (L, D, H, K), "wk": (L, D, H, K), "wv": (L, D, H, K), "wo": (L, H, K, D),
              "w1": (L, D, F), "w2": (L, F, D)}
    specs = param_specs(rules)
    params = {k: jax.ShapeDtypeStruct(s, bf16, sharding=NamedSharding(mesh, specs[k])) for k, s in shapes.items()}
    x = jax.ShapeDtypeStruct(
        (cfg.batch, cfg.seq, D), bf16, sharding=NamedSharding(mesh, _spec(rules, "batch", "seq", None))
    )
    return x, params


def make_forward(mesh: Mesh, rules: Rules):
    """The forward pass: layers under `lax.scan`, activations constrained to the rules."""
    act = NamedSharding(mesh, _spec(rules, "batch", "seq", None))
    heads = NamedSharding(mesh, _spec(rules, "batch", None, "heads", None))

    def norm(x):
        x32 = x.astype(jnp.float32)
        return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6)).astype(x.dtype)

    def layer(x, w):
        h = norm(x)
        q = jax.lax.with_sharding_constraint(jnp.einsum("bsd,dhk->bshk", h, w["wq"]), heads)
        k = jax.lax.with_sharding_constraint(jnp.einsum("bsd,dhk->bshk", h, w["wk"]), heads)
        v = jax.lax.with_sharding_constraint(jnp.einsum("bsd,dhk->bshk", h, w["wv"]), heads)
        s = jnp.einsum("bqhk,bshk->bhqs", q, k) * (q.shape[-1] ** -0.5)
        a = jnp.einsum("bhqs,bshk->bqhk", jax.nn.softmax(s.astype(jnp.float32), axis=-1).astype(x.dtype), v)
        x = jax.lax.with_sharding_constraint(x + jnp.einsum("bqhk,hkd->bqd", a, w["wo"]), act)
        h = norm(x)
        m = jax.nn.gelu(jnp.einsum("bsd,df->bsf", h, w["w1"]), approximate=True)
        x = jax.lax.with_sharding_constraint(x + jnp.einsum("bsf,fd->bsd", m, w["w2"]), act)
        return x, None

    def forward(x, params):
        out, _ = jax.lax.scan(layer, x, params)
        return out

    return forward


def lower(cfg: TransformerConfig, mesh: Mesh, rules: Rules):
    """`jax.jit(forward).lower(...)` on abstract inputs: no weights are materialised."""
    x, params = abstract_args(cfg, mesh, rules)
    out = NamedSharding(mesh, _spec(rules, "batch", "seq", None))
    return jax.jit(make_forward(mesh, rules), out_shardings=out).lower(x, params)
