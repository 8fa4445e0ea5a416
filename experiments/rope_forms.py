"""libtpu's cost of the rotary embedding in its two partner forms (`aoizora.models.wan.transformer.rope`).

The rotation alone (bf16 activations of Wan 14B's head dim, float32 tables), compiled for one
device of each generation's slice; the cost is what Q2 and the simulator charge for the compiled
instructions (libtpu's cycle estimates at the chip's clock, the roofline where it gives none).
Shapes are (batch, tokens, heads, head_dim) of a strategy's local query: the same element count
with 40 and with 20 local heads, and a two-sample batch.

    .venv/bin/python experiments/rope_forms.py [--topologies v5e:2x2,v6e:2x2,tpu7x:2x2x1]

Compile-only: no TPU, a few seconds per program. The forms' effect on a whole strategy's program
is measured with `benchmarks/q1_compute_gap.py` at the commits before and after the model's
change of form (docs/notebook/q1-and-recall.md).
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp

from aoizora.hlo import build_program
from aoizora.models.wan.transformer.config import ROPE_PARTNERS
from aoizora.models.wan.transformer.rope import apply_rope
from aoizora.toolchain import compile_only_devices
from aoizora.topology import hardware_profile

SHAPES = ((1, 2432, 40, 128), (1, 4864, 20, 128), (2, 4864, 40, 128))


def rotation_seconds(topology: str, shape: tuple[int, ...], partner: str) -> float:
    """Compute seconds of the compiled rotation of one (batch, tokens, heads, head_dim) array."""
    device = compile_only_devices(topology)[0]
    on_device = jax.sharding.SingleDeviceSharding(device)
    width = shape[-1] if partner == "matmul" else shape[-1] // 2  # as rope_tables makes them
    x = jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=on_device)
    table = jax.ShapeDtypeStruct((shape[1], width), jnp.float32, sharding=on_device)
    text = jax.jit(apply_rope, static_argnums=3).lower(x, table, table, partner).compile().as_text()
    hardware = hardware_profile(topology.split(":")[0])
    return sum(node.compute_seconds(hardware) for node in build_program(text).nodes if node.collective is None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topologies", default="v5e:2x2,v6e:2x2,tpu7x:2x2x1")
    args = ap.parse_args()
    print(f"| slice | local shape | {' ms | '.join(ROPE_PARTNERS)} ms | reshape / matmul |")
    print("|---|---|" + "---|" * (len(ROPE_PARTNERS) + 1))
    for topology in args.topologies.split(","):
        for shape in SHAPES:
            ms = {p: rotation_seconds(topology, shape, p) * 1e3 for p in ROPE_PARTNERS}
            cells = " | ".join(f"{ms[p]:.3f}" for p in ROPE_PARTNERS)
            print(f"| {topology} | {list(shape)} | {cells} | {ms['reshape'] / ms['matmul']:.2f} |")


if __name__ == "__main__":
    main()
