"""Small programs that each isolate one memory behaviour of libtpu's (ring attention's), shared by
the tests and `experiments/ring_memory_probe.py`. Each returns the lowered program and its unit
(one per-device activation or shard, in bytes)."""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.topology import Topology

CHAIN = 8  # devices of the permute chain: 7 rotations
CHAIN_SEQ, CHAIN_DIM = 16384, 4096  # one 128 MiB bf16 K shard per device


def ring_layer(topo: Topology, steps: int, seq: int) -> tuple[Any, int]:
    """A scanned layer whose q, k and v are computed (a projection, a tanh) outside a ring
    shard_map of `steps` steps over "c" (the rest of the devices on "t")."""
    n = topo.num_devices
    mesh = Mesh(np.array(topo.devices).reshape(steps, n // steps), ("c", "t"))
    heads, head_dim = 40, 128
    perm = [(i, (i + 1) % steps) for i in range(steps)]

    def ring(q, k, v):
        out = None
        for step in range(steps):
            part = jnp.sum(q * k, axis=-1, keepdims=True) * v
            out = part if out is None else out + part
            if step + 1 < steps:
                k, v = (jax.lax.ppermute(t, "c", perm) for t in (k, v))
        return out

    def run(x, w):
        def layer(x, w):
            q = jnp.tanh(jnp.einsum("shd,de->she", x, w[0]))
            k = jnp.tanh(jnp.einsum("shd,de->she", x, w[1]))
            v = jnp.einsum("shd,de->she", x, w[2])
            return x + jax.shard_map(ring, mesh=mesh, in_specs=(P("c", "t"),) * 3, out_specs=P("c", "t"))(q, k, v), None

        return jax.lax.scan(layer, x, w)[0]

    lowered = jax.jit(run).lower(
        jax.ShapeDtypeStruct((seq, heads, head_dim), jnp.bfloat16, sharding=NamedSharding(mesh, P("c", "t"))),
        jax.ShapeDtypeStruct((2, 3, head_dim, head_dim), jnp.bfloat16, sharding=NamedSharding(mesh, P())))
    return lowered, seq * heads * head_dim * 2 // n


def permute_chain(topo: Topology, ballast_bytes: int = 0) -> tuple[Any, int]:
    """Ring attention's K/V rotation alone: a chain of 7 permutes of a computed K shard, each step
    a small dot; with `ballast_bytes`, an argument of that size per device beside it."""
    c = CHAIN
    mesh = Mesh(np.array(topo.devices[:c]), ("c",))
    rows = ballast_bytes // (CHAIN_DIM * 2)

    def body(q, k, *ballast):
        k = jnp.tanh(k)
        acc = None
        for step in range(c):
            part = jnp.dot(q, k.T, preferred_element_type=jnp.float32)  # small: 256 x seq
            acc = part if acc is None else acc + part
            if step + 1 < c:
                k = jax.lax.ppermute(k, "c", [(i, (i + 1) % c) for i in range(c)])
        return acc + sum(jnp.sum(b[:1, :1].astype(jnp.float32)) for b in ballast)

    def arg(rows: int):
        return jax.ShapeDtypeStruct((c * rows, CHAIN_DIM), jnp.bfloat16, sharding=NamedSharding(mesh, P("c", None)))

    args = [arg(256), arg(CHAIN_SEQ)] + ([arg(rows)] if rows else [])
    f = jax.shard_map(body, mesh=mesh, in_specs=(P("c", None),) * len(args), out_specs=P("c", None))
    return jax.jit(f).lower(*args), CHAIN_SEQ * CHAIN_DIM * 2
