"""What libtpu holds outside its buffer assignment, on small scanned programs, against Stage 1.

    .venv/bin/python experiments/outside_assignment_probe.py            # v5e:2x2 and v5e:2x4

`memory_analysis().temp_size_in_bytes` is libtpu's preallocated temp (the buffer assignment,
read from its dump) plus memory it holds outside it, which its out-of-HBM check does not count.
Each probe is a 4-layer scan over sequence-sharded activations; the outside part is printed in
activations (`act`, one per-device activation), next to Stage 1's `Prediction.outside_bytes`.

- `a2a-1`: Ulysses' resharding, sequence- to head-sharded and back (`all_to_all` in shard_map).
- `a2a-2`: two projections resharded to heads, multiplied, one resharded back.
- `gather-6`: six weights stored sharded and gathered per layer (q, k, v, o, MLP in and out).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))


def probe(topology: str, name: str, seq: int) -> tuple[float, float, float, float]:
    """(activation bytes; libtpu outside, Stage 1 outside, libtpu assigned temp, in activations)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from aoizora.hlo.buffer_dump import read_buffer_assignment
    from aoizora.stage1 import predict, read_module
    from aoizora.topology import get_topology

    topo = get_topology(topology)
    n = topo.num_devices
    mesh = Mesh(np.array(topo.devices).reshape(n), ("c",))
    heads, head_dim, d, f, layers = 40, 128, 5120, 13824, 4

    def bf16(shape, spec):
        return jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))

    if name.startswith("a2a"):
        act = seq * heads * head_dim * 2 / n
        two = name == "a2a-2"

        def layer(x, w):
            to_heads = lambda v: jax.lax.all_to_all(v, "c", 1, 0, tiled=True)  # noqa: E731
            y = to_heads(jnp.einsum("shd,de->she", x, w[0]))
            if two:
                y = y * jnp.tanh(to_heads(jnp.einsum("shd,de->she", x, w[1])))
            return x + jax.lax.all_to_all(y, "c", 0, 1, tiled=True), None

        def run(x, w):
            return jax.shard_map(lambda x, w: jax.lax.scan(layer, x, w)[0], mesh=mesh,
                                 in_specs=(P("c"), P()), out_specs=P("c"))(x, w)

        args = (bf16((seq, heads, head_dim), P("c")), bf16((layers, 2, head_dim, head_dim), P()))
    else:
        act = seq * d * 2 / n
        whole = NamedSharding(mesh, P())

        def layer(x, ws):
            wq, wk, wv, wo, w1, w2 = (jax.lax.with_sharding_constraint(w, whole) for w in ws)
            x = x + (jnp.tanh(x @ wq) * (x @ wk) + x @ wv) @ wo
            return x + jax.nn.gelu(x @ w1) @ w2, None

        def run(x, *ws):
            return jax.lax.scan(layer, x, ws)[0]

        w = lambda a, b: bf16((layers, a, b), P(None, "c"))  # noqa: E731
        args = (bf16((seq, d), P("c")), w(d, d), w(d, d), w(d, d), w(d, d), w(d, f), w(f, d))
    lowered = jax.jit(run).lower(*args)
    stage1 = predict(read_module(lowered)).outside_bytes
    with tempfile.TemporaryDirectory() as dump:
        compiled = lowered.compile(compiler_options={"xla_dump_to": dump, "xla_dump_hlo_as_text": True})
        assigned = read_buffer_assignment(dump).temp_bytes
    outside = compiled.memory_analysis().temp_size_in_bytes - assigned
    return act, outside / act, stage1 / act, assigned / act


PROBES = [("v5e:2x2", "a2a-1", 75776), ("v5e:2x2", "a2a-2", 75776), ("v5e:2x4", "a2a-2", 151552),
          ("v5e:2x4", "a2a-2", 37888), ("v5e:2x4", "gather-6", 75776), ("v5e:2x4", "gather-6", 151552),
          ("v5e:2x4", "gather-6", 303104), ("v5e:2x2", "gather-6", 151552)]


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print(f"{'topology':9s} {'probe':9s} {'seq':>7s} {'act MiB':>8s} {'libtpu outside':>15s} "
          f"{'Stage 1 outside':>16s} {'libtpu assigned':>16s}")
    for topology, name, seq in PROBES:
        act, lib, s1, assigned = probe(topology, name, seq)
        print(f"{topology:9s} {name:9s} {seq:7d} {act / 2**20:8.0f} {lib:12.2f} act {s1:12.2f} act "
              f"{assigned:12.2f} act", flush=True)


if __name__ == "__main__":
    main()
