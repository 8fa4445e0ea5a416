"""'How to Scale Your Model' (jax-ml/scaling-book): measured profiles quoted in the text.

* `sharding.md`, Pop Quiz 2: AllGather over Y of bf16[E_Y, F] on a TPU v5e with mesh
  {'X': 8, 'Y': 4} (32 chips: the v5e slice of that size is 4x8; `jax.make_mesh` lays X, the
  axis of 8, along the slice's axis of 8, so each Y group of 4 is an open line of chips: no
  wraparound). (a) E, F = 2048, 8192: measured 680 us (the book's estimates: 377 us ideal,
  560 us without wraparound). (b) E, F = 256, 256: "closer to 8us" in practice.
* `jax-stuff.md`, collective matmul: v5e-8, `jax.make_mesh((2, 4), ('X', 'Y'))`,
  A[B_X, D_Y] . W[D, F_Y] -> Out[B_X, F_Y] with B, D, F = 1024, 2048, 8192: default `jit` matmul
  311 us, the shard_map collective matmul with ppermute 244 us, the matmul without sharding on
  the contracting dimension 224 us.
  Dtype: int32. The published code builds A and W with `jnp.arange` and no dtype, which under
  JAX's default (64-bit off) is int32; the 224 us of the communication-free matmul (4.3 GFLOP per
  chip, ~19 TFLOP/s) fits a dtype the MXU does not run natively, not bf16 (~22 us at 197 TFLOP/s).
"""

from __future__ import annotations

from common import ComparisonEntry, Config, Source, TimedEntry, sharded

REPO = "jax-ml/scaling-book"
COMMIT = "0819a7d8c55ddc113f5cba0285a5f97380cac1e3"


def _all_gather_y(e: int, f: int):
    def build(mesh):
        import jax
        import jax.numpy as jnp
        from jax.sharding import PartitionSpec as P

        def body(x):
            return jax.lax.all_gather(x, "Y", axis=0, tiled=True)

        fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("Y", None), out_specs=P(None, None), check_vma=False))
        return fn, (sharded((e, f), jnp.bfloat16, mesh, "Y", None),)

    return build


def _matmul_default(mesh):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    B, D, F = 1024, 2048, 8192
    fn = jax.jit(lambda a, w: a @ w, out_shardings=NamedSharding(mesh, P("X", "Y")))
    return fn, (sharded((B, D), jnp.int32, mesh, "X", "Y"), sharded((D, F), jnp.int32, mesh, None, "Y"))


def _matmul_no_contracting_comm(mesh):
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    B, D, F = 1024, 2048, 8192
    fn = jax.jit(lambda a, w: a @ w, out_shardings=NamedSharding(mesh, P("X", "Y")))
    return fn, (sharded((B, D), jnp.int32, mesh, "X", None), sharded((D, F), jnp.int32, mesh, None, "Y"))


def _collective_matmul(mesh):
    """The book's `collective_matmul_allgather_lhs_contracting`, as published (unrolled fori_loop)."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    B, D, F = 1024, 2048, 8192

    def body(lhs, rhs):
        axis_size = jax.lax.psum(1, axis_name="Y")
        idx = jax.lax.axis_index("Y")
        chunk = lhs.shape[1]

        def step(i, carry):
            accum, lhs = carry
            rhs_chunk = jax.lax.dynamic_slice_in_dim(rhs, (idx + i) % axis_size * chunk, chunk)
            update = lhs @ rhs_chunk
            lhs = jax.lax.ppermute(lhs, axis_name="Y", perm=[(j, (j - 1) % axis_size) for j in range(axis_size)])
            return accum + update, lhs

        accum = jnp.zeros((lhs.shape[0], rhs.shape[1]), dtype=lhs.dtype)
        accum, lhs = jax.lax.fori_loop(0, axis_size - 1, step, (accum, lhs), unroll=True)
        i = axis_size - 1
        rhs_chunk = jax.lax.dynamic_slice_in_dim(rhs, (idx + i) % axis_size * chunk, chunk)
        return accum + lhs @ rhs_chunk

    fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("X", "Y"), P(None, "Y")), out_specs=P("X", "Y"),
                               check_vma=False))
    return fn, (sharded((B, D), jnp.int32, mesh, "X", "Y"), sharded((D, F), jnp.int32, mesh, None, "Y"))


def entries() -> list:
    quiz = Source(REPO, "sharding.md", COMMIT, where="Pop Quiz 2 [AllGather time], answer")
    mesh_8x4 = (("X", 8), ("Y", 4))
    setup_a = "v5e 4x8 (32 chips), mesh {'X': 8, 'Y': 4} (jax default order), AllGather_Y bf16[2048_Y, 8192]"
    setup_b = "v5e 4x8 (32 chips), mesh {'X': 8, 'Y': 4} (jax default order), AllGather_Y bf16[256_Y, 256]"
    jax_stuff = Source(REPO, "jax-stuff.md", COMMIT,
                       where="Example [Collective Matmul], profiles quoted after the code")
    mesh_2x4 = (("X", 2), ("Y", 4))
    setup = "v5e-8 (2x4), jax.make_mesh((2, 4), ('X', 'Y')), B, D, F = 1024, 2048, 8192, int32"
    return [
        TimedEntry(
            "scaling-book/allgather-8.4MB", "AllGather_Y bf16[2048,8192], v5e {'X':8,'Y':4}", quiz,
            Config("allgather-8.4MB", "v5e:4x8", mesh_8x4, _all_gather_y(2048, 8192), setup=setup_a),
            680e-6, notes="book's estimates: 377 us (bidirectional, ideal), 560 us (no wraparound)",
        ),
        TimedEntry(
            "scaling-book/allgather-32kB", "AllGather_Y bf16[256,256], v5e {'X':8,'Y':4}", quiz,
            Config("allgather-32kB", "v5e:4x8", mesh_8x4, _all_gather_y(256, 256), setup=setup_b),
            8e-6, measured_note="'In practice, it's closer to 8us' (approximate)",
            notes="book's estimate: ~3 us (3 hops, latency bound)",
        ),
        ComparisonEntry(
            "scaling-book/collective-matmul",
            "A[B_X,D_Y] . W[D,F_Y] on v5e-8: jit vs collective matmul vs no contracting comm",
            jax_stuff,
            (
                Config("jit-matmul", "v5e:2x4", mesh_2x4, _matmul_default,
                       setup=setup + "; jax.jit, A P('X','Y'), W P(None,'Y'), out P('X','Y')"),
                Config("collective-matmul", "v5e:2x4", mesh_2x4, _collective_matmul,
                       setup=setup + "; shard_map collective matmul, ppermute (j -> j-1) over Y"),
                Config("no-contracting-comm", "v5e:2x4", mesh_2x4, _matmul_no_contracting_comm,
                       setup=setup + "; A P('X', None), W P(None,'Y')"),
            ),
            (311e-6, 244e-6, 224e-6), "s", higher_is_better=False,
            notes="dtype int32 assumed (jnp.arange without dtype, 64-bit off); see module docstring",
        ),
    ]
