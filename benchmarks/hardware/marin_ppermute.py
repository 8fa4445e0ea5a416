"""marin-community/marin issue #6736: a barriered `lax.ppermute` payload sweep on TPU.

The issue reports, per call (repeat-count slopes of a `lax.fori_loop` with
`lax.optimization_barrier`, so no host launch time): v5p-8 1 MiB 16.94 us, 64 MiB 781.98 us
(fit over large payloads: t = 4.55 us + B / 86.3 GB/s); v6e-8 1 MiB 17.45 us, 64 MiB 776.34 us
(t = 2.29 us + B / 86.8 GB/s). B is the payload per device.

Setup as published: v5p-8 (v5p:2x2x1, 4 chips) and v6e-8 (v6e:2x4, 8 chips), all devices on
one mesh axis. The permutation is not published: assumed here to be the cyclic shift by one
along the mesh axis (i -> i+1 mod n), the usual ppermute benchmark, over JAX's default device
order. The payload is float32 (only the byte count matters to a permute).
"""

from __future__ import annotations

from common import HELD_OUT, IN_SAMPLE, Config, Source, TimedEntry, sharded

MiB = 1 << 20
SOURCE = Source(
    "marin-community/marin", url="https://github.com/marin-community/marin/issues/6736",
    where="comment by dlwh, 2026-06-28, 'TPU ppermute payload sweep update'",
)


def _ppermute(payload_bytes: int, n: int):
    def build(mesh):
        import jax
        import jax.numpy as jnp
        from jax.sharding import PartitionSpec as P

        rows = payload_bytes // (4 * 128)

        def body(x):
            return jax.lax.ppermute(x, "x", perm=[(i, (i + 1) % n) for i in range(n)])

        fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("x", None), out_specs=P("x", None), check_vma=False))
        return fn, (sharded((rows * n, 128), jnp.float32, mesh, "x", None),)

    return build


def entries() -> list:
    out = []
    for gen, topo, n, points in (
        ("v5p-8", "v5p:2x2x1", 4, ((1, 16.94e-6), (64, 781.98e-6))),
        ("v6e-8", "v6e:2x4", 8, ((1, 17.45e-6), (64, 776.34e-6))),
    ):
        for mib, t in points:
            setup = f"{gen} ({topo}), mesh {{'x': {n}}} (jax default order), ppermute i -> i+1, {mib} MiB per device"
            out.append(TimedEntry(
                f"marin/ppermute-{gen}-{mib}MiB", f"ppermute {mib} MiB/device, {gen}", SOURCE,
                Config(f"ppermute-{gen}-{mib}MiB", topo, (("x", n),), _ppermute(mib * MiB, n), setup=setup),
                t, notes="permutation assumed: cyclic shift by one", group=f"marin-{gen}",
                # the v5p pair gives hardware.json's collective launch cost (its intercept)
                basis=IN_SAMPLE if gen == "v5p-8" else HELD_OUT,
            ))
    return out
