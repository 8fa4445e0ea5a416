"""Real programs compiled by libtpu for the hlo tests (small shapes, compile-only devices).

Each builder returns the compiled HLO text; the tests parse it and compare against payloads
worked out by hand from the shapes written here.
"""

from __future__ import annotations

import os

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")  # other engineers compile concurrently

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.toolchain import compile_only_devices

S = jax.ShapeDtypeStruct
BF16 = jnp.bfloat16


def mesh(topology: str, shape: tuple[int, ...], names: tuple[str, ...]) -> Mesh:
    """A mesh over the slice's compile-only devices in libtpu order (logical id = position)."""
    devs = np.array(compile_only_devices(topology)).reshape(shape)
    return Mesh(devs, names)


def compile_jit(f, m: Mesh, in_specs, out_specs, args, options=None):
    """``jax.jit(f, in_shardings, out_shardings).lower(args).compile()`` over mesh ``m``."""
    def ns(spec):
        return NamedSharding(m, spec)

    outs = tuple(ns(s) for s in out_specs) if isinstance(out_specs, tuple) else ns(out_specs)
    jitted = jax.jit(f, in_shardings=tuple(ns(s) for s in in_specs), out_shardings=outs)
    return jitted.lower(*args).compile(compiler_options=options)


# v5e:2x4, mesh (x=2, y=4): logical id = 4*x + y; y-groups {0..3},{4..7}; x-pairs (i, i+4).
def matmul_allreduce():
    """Contraction dim sharded over y: partial [256,1024] bf16 sums need an all-reduce."""
    m = mesh("v5e:2x4", (2, 4), ("x", "y"))
    return compile_jit(lambda a, b: a @ b, m, (P(None, "y"), P("y", None)), P(),
                       (S((256, 512), BF16), S((512, 1024), BF16)))


def allgather():
    """Rows sharded over y, result replicated: all-gather of a [64,512] bf16 shard."""
    m = mesh("v5e:2x4", (2, 4), ("x", "y"))
    return compile_jit(lambda a: a * 2, m, (P("y", None),), P(), (S((256, 512), BF16),))


def reduce_scatter():
    """Contraction over y with the result row-sharded over y: a reduce-scatter."""
    m = mesh("v5e:2x4", (2, 4), ("x", "y"))
    return compile_jit(lambda a, b: a @ b, m, (P(None, "y"), P("y", None)), P("y", None),
                       (S((256, 512), BF16), S((512, 1024), BF16)))


def shard_map_collectives():
    """psum over y, all_to_all over y, ppermute over x, on a [32,64] f32 block per device."""
    m = mesh("v5e:2x4", (2, 4), ("x", "y"))

    def body(x):
        a = jax.lax.psum(x, "y")
        b = jax.lax.all_to_all(x, "y", 0, 1, tiled=True)
        c = jax.lax.ppermute(x, "x", [(0, 1), (1, 0)])
        return a + b.reshape(a.shape) + c

    def f(x):
        return jax.shard_map(body, mesh=m, in_specs=P("x", "y"), out_specs=P("x", "y"))(x)

    return compile_jit(f, m, (P("x", "y"),), P("x", "y"), (S((64, 256), jnp.float32),))


def scanned_layers(n_layers: int = 6):
    """A scan over ``n_layers`` layers whose weight columns are sharded over y."""
    m = mesh("v5e:2x4", (2, 4), ("x", "y"))

    def f(x, w):
        def step(h, wi):
            return jnp.tanh(h @ wi), None
        h, _ = jax.lax.scan(step, x, w)
        return h

    return compile_jit(f, m, (P(None, None), P(None, None, "y")), P(),
                       (S((128, 256), BF16), S((n_layers, 256, 256), BF16)))


SPLASH = dict(batch=2, heads=8, seq=512, head_dim=128)


def splash_attention():
    """Pallas splash attention under shard_map: batch over x, heads over y (opaque kernel)."""
    from jax.experimental.pallas.ops.tpu import splash_attention as sa

    m = mesh("v5e:2x4", (2, 4), ("x", "y"))
    b, h, s, d = SPLASH["batch"], SPLASH["heads"], SPLASH["seq"], SPLASH["head_dim"]
    local_heads = h // 4
    mask = sa.MultiHeadMask([sa.FullMask((s, s)) for _ in range(local_heads)])
    kernel = sa.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
    spec = P("x", "y", None, None)

    def body(q, k, v):
        return jax.vmap(kernel)(q, k, v)

    def f(q, k, v):
        return jax.shard_map(body, mesh=m, in_specs=(spec, spec, spec), out_specs=spec,
                             check_vma=False)(q, k, v)

    arg = S((b, h, s, d), BF16)
    return compile_jit(f, m, (spec, spec, spec), spec, (arg, arg, arg))


def overlapped_allgather():
    """An all-gather independent of a large matmul: libtpu overlaps them with an async
    collective fusion (AsyncCollectiveStart / async_collective_fusion / AsyncCollectiveDone)."""
    m = mesh("v5e:2x4", (2, 4), ("x", "y"))

    def f(x, w, z, v):
        a = x @ w
        zg = jax.lax.with_sharding_constraint(z, NamedSharding(m, P()))
        return a, zg @ v

    return compile_jit(f, m, (P("x", None), P(None, "y"), P("y", None), P(None, None)),
                       (P("x", "y"), P()),
                       (S((4096, 4096), BF16), S((4096, 4096), BF16), S((2048, 4096), BF16),
                        S((4096, 4096), BF16)))


# v5e:4x4, 1-D mesh of 16: logical id = position.
def collective_matmul():
    """All-gathered rows feeding a matmul on v5e:4x4: libtpu turns it into a windowed einsum
    (collective matmul) loop of collective-permutes overlapped with partial matmuls."""
    m = mesh("v5e:4x4", (16,), ("y",))
    return compile_jit(lambda a, b: a @ b, m, (P("y", None), P(None, "y")), P(None, "y"),
                       (S((16384, 5120), BF16), S((5120, 5120), BF16)))


def allreduce_4x4():
    """Contraction over the 4-wide axis of a (x=4, y=4) mesh on v5e:4x4."""
    m = mesh("v5e:4x4", (4, 4), ("x", "y"))
    return compile_jit(lambda a, b: a @ b, m, (P(None, "y"), P("y", None)), P(),
                       (S((512, 1024), BF16), S((1024, 256), BF16)))


def matmul_allreduce_2way():
    """A 2-way sharded matmul: mesh (x=4, y=2), contraction over y -> all-reduce of the
    bf16[128,512] partial product over pairs {0,1},{2,3},{4,5},{6,7}."""
    m = mesh("v5e:2x4", (4, 2), ("x", "y"))
    return compile_jit(lambda a, b: a @ b, m, (P(None, "y"), P("y", None)), P(),
                       (S((128, 256), BF16), S((256, 512), BF16)))


PERMUTED_ORDER = (5, 2, 7, 0, 3, 6, 1, 4)


def permuted_mesh_allreduce():
    """The all-reduce matmul over a mesh whose devices are a permutation of libtpu's order:
    replica groups stay logical positions; the device assignment carries the permutation."""
    devs = compile_only_devices("v5e:2x4")
    m = Mesh(np.array([devs[i] for i in PERMUTED_ORDER]).reshape(2, 4), ("x", "y"))
    return compile_jit(lambda a, b: a @ b, m, (P(None, "y"), P("y", None)), P(),
                       (S((256, 512), BF16), S((512, 1024), BF16)))


def shard_map_4x4():
    """shard_map on v5e:4x4, mesh (a=4, b=4): all_gather over a, psum over b, all_to_all over
    a of a bf16[128,256] block per device (libtpu prints iota replica groups here)."""
    m = mesh("v5e:4x4", (4, 4), ("a", "b"))

    def body(x):
        g = jax.lax.all_gather(x, "a", axis=0, tiled=True)  # [512, 256]
        s = jax.lax.psum(x, "b")
        t = jax.lax.all_to_all(x, "a", 1, 1, tiled=True)
        return g[:128] + s + t

    def f(x):
        return jax.shard_map(body, mesh=m, in_specs=P("a", "b"), out_specs=P("a", "b"))(x)

    return compile_jit(f, m, (P("a", "b"),), P("a", "b"), (S((512, 1024), BF16),))


FSDP_TP = dict(layers=3, tokens=4096, dim=1024, ffn=4096)


def fsdp_tp_scan():
    """A scanned FFN stack on v5e:4x4, mesh (fsdp=4, tensor=4): weights gathered over fsdp
    each layer (libtpu overlaps one gather via an async collective fusion and prints its
    groups as a transposed iota), partial sums all-reduced over tensor."""
    m = mesh("v5e:4x4", (4, 4), ("fsdp", "tensor"))
    c = FSDP_TP

    def f(x, w1, w2):
        def step(h, ws):
            a, b = ws
            return h + jax.nn.gelu(h @ a) @ b, None
        h, _ = jax.lax.scan(step, x, (w1, w2))
        return h

    return compile_jit(
        f, m, (P("fsdp", None), P(None, "fsdp", "tensor"), P(None, "tensor", "fsdp")), P("fsdp", None),
        (S((c["tokens"], c["dim"]), BF16), S((c["layers"], c["dim"], c["ffn"]), BF16),
         S((c["layers"], c["ffn"], c["dim"]), BF16)))
