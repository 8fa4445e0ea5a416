"""AI-Hypercomputer/maxtext PR #1239, "Optimize the device assignment for TPU v6e".

Published: MLPerf Offline (Llama-2-70B inference, MaxText on a v6e-8), 10.3444 samples/s before,
11.5125 after with `optimize_mesh_for_tpu_v6e` (+11.3 % samples/s; tokens/s 2931.84 -> 3272.44,
+11.6 %). The change (`MaxText/max_utils.py`, `optimize_mesh_for_tpu_v6e`): on a v6e whose chips
span a 2x4 box, when one mesh axis holds all 8 devices, reverse the last four devices of that
axis in the order `mesh_utils.create_device_mesh` returned.

Orders compared here (v6e:2x4; libtpu numbers the chips x-minor: id 2k is (0, k), 2k+1 is (1, k)):
* before: the 8 devices in x-minor physical order, ids 0..7 (a zigzag whose closing edge is 4
  hops). JAX 0.10.2's `mesh_utils` returns ids (0, 1, 2, 3, 7, 6, 5, 4) for this slice, which is
  this order with its last four reversed, i.e. the PR's own result; the PR's "before" is taken to
  be the order it reverses back to.
* after: the PR's order, ids (0, 1, 2, 3, 7, 6, 5, 4).

Program (stated choice, the PR does not publish one): the collectives and matmuls of one
Llama-2-70B decoder layer, tensor-parallel over the 8 devices as MaxText's inference does
(Megatron-style: QKV and gate/up projections column-sharded, attention-output and down
projections row-sharded, each followed by an all-reduce of the bf16 activations). Two token
counts: a decode step of 64 sequences (the output tokens/s the PR reports are made in decode)
and a prefill chunk of 1024 tokens. Attention itself (no collective) is left out.
"""

from __future__ import annotations

import numpy as np
from common import ComparisonEntry, Config, Source

SOURCE = Source(
    "AI-Hypercomputer/maxtext", "MaxText/max_utils.py", "65cafbd8ad095a7e530a678006ecb44a562848a4",
    url="https://github.com/AI-Hypercomputer/maxtext/pull/1239",
    where="PR description: MLPerf Offline samples/s before/after; optimize_mesh_for_tpu_v6e",
)
D, F, QKV = 8192, 28672, 8192 + 2 * 8 * 128  # Llama-2-70B: 64 heads, 8 KV heads of 128


def _layer(tokens: int):
    return lambda mesh: _layer_program(mesh, tokens)


def _layer_program(mesh, tokens: int):
    import jax
    import jax.numpy as jnp
    from common import sharded
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    def rms(x):
        return x * jax.lax.rsqrt(jnp.mean(jnp.square(x.astype(jnp.float32)), -1, keepdims=True) + 1e-5).astype(x.dtype)

    def layer(x, wqkv, wo, w1, w3, w2):
        h = rms(x)
        qkv = h @ wqkv  # column-sharded over 'tensor'
        attn = qkv[:, :D]  # stands for the attention output (sharded like q)
        x = x + attn @ wo  # row-sharded: all-reduce
        h = rms(x)
        x = x + (jax.nn.silu(h @ w1) * (h @ w3)) @ w2  # all-reduce
        return x

    rep = NamedSharding(mesh, P(None, None))
    fn = jax.jit(layer, out_shardings=rep)
    bf = jnp.bfloat16
    return fn, (
        sharded((tokens, D), bf, mesh, None, None),
        sharded((D, QKV), bf, mesh, None, "tensor"),
        sharded((D, D), bf, mesh, "tensor", None),
        sharded((D, F), bf, mesh, None, "tensor"),
        sharded((D, F), bf, mesh, None, "tensor"),
        sharded((F, D), bf, mesh, "tensor", None),
    )


def _reverse_last_four(ids: np.ndarray) -> np.ndarray:
    out = ids.copy()
    out[4:] = ids[-1:3:-1]
    return out


def entries() -> list:
    mesh = (("tensor", 8),)
    out = []
    for tokens, what in ((64, "decode step, 64 sequences"), (1024, "prefill chunk, 1024 tokens")):
        setup = f"v6e-8 (2x4), one mesh axis 'tensor' of 8; Llama-2-70B decoder layer, TP=8, {what}, bf16"
        out.append(ComparisonEntry(
            f"maxtext-1239/v6e-ring-order-{tokens}tok",
            f"v6e-8 device order, before vs optimize_mesh_for_tpu_v6e, one layer: {what}", SOURCE,
            (
                Config(f"before-{tokens}", "v6e:2x4", mesh, _layer(tokens), order=_reverse_last_four,
                       setup=setup + "; order ids 0..7"),
                Config(f"after-{tokens}", "v6e:2x4", mesh, _layer(tokens), setup=setup + "; order ids 0,1,2,3,7,6,5,4"),
            ),
            (10.3444, 11.5125), "samples/s", higher_is_better=True,
            notes="measured: MLPerf Offline throughput of the whole model; predicted: one decoder layer",
        ))
    return out
