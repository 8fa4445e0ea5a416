"""Why the VAE decode's compile is long: libtpu's compile time of each of its 3D convolutions alone.

    PYTHONPATH=src python benchmarks/vae_conv_compile.py [--topology v5e:1x1] [--video 480x832x5]
        [--json OUT]

Lowers the decode a plan compiles for its video time (`aoizora.models.wan.vae.program.decode_program`)
for the slice, lists its convolutions by (input, kernel) shape, and compiles one program per distinct
shape holding that convolution alone (stride 1, the decoder's zero spatial padding, its dtype), one at
a time, without any cache. Prints each shape's count in the decode and compile seconds, and the sums:
over distinct shapes, and over every convolution of the decode. Set beside the whole decode's compile
time (`benchmarks/vae_decode.py --no-cache`), this says whether the convolutions are where libtpu's
time goes.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
import time
from pathlib import Path
from typing import Any

_CONV = re.compile(r"stablehlo\.convolution.*?: \(tensor<([0-9x]+)x(f32|bf16)>, tensor<([0-9x]+)x(?:f32|bf16)>\)")


def decode_convolutions(topology_name: str, height: int, width: int, frames: int) -> collections.Counter:
    """(input shape, kernel shape, dtype) -> count, over the lowered decode's convolutions."""
    from aoizora.models.wan.vae.config import WAN21_VAE
    from aoizora.models.wan.vae.program import decode_program
    from aoizora.models.wan.vae.sharding import latent_shape
    from aoizora.topology import get_topology

    topology = get_topology(topology_name)
    program = decode_program(topology, latent_shape(height, width, frames, 1, WAN21_VAE))
    mesh = program.placement.jax_mesh(topology)  # the mesh a plan compiles the decode on
    text = program.space.lowering_inputs(program.strategy, mesh).lower().as_text()
    return collections.Counter(
        (tuple(map(int, x.split("x"))), tuple(map(int, k.split("x"))), dtype) for x, dtype, k in _CONV.findall(text))


def compile_alone(topology_name: str, x_shape: tuple[int, ...], k_shape: tuple[int, ...], dtype: str) -> float:
    """Seconds libtpu takes to compile the convolution alone on one device of the slice."""
    import jax
    import jax.numpy as jnp

    from aoizora.topology import get_topology

    device = get_topology(topology_name).devices[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    dt = jnp.float32 if dtype == "f32" else jnp.bfloat16
    pad = k_shape[1] // 2  # the decoder's zero spatial padding ("same"); no temporal padding

    def conv(x: Any, k: Any) -> Any:
        return jax.lax.conv_general_dilated(x, k, (1, 1, 1), ((0, 0), (pad, pad), (pad, pad)),
                                            dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))

    lowered = jax.jit(conv).lower(jax.ShapeDtypeStruct(x_shape, dt, sharding=sharding),
                                  jax.ShapeDtypeStruct(k_shape, dt, sharding=sharding))
    t0 = time.perf_counter()
    lowered.compile()
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default="v5e:1x1")
    ap.add_argument("--video", default="480x832x5", help="HEIGHTxWIDTHxFRAMES")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    height, width, frames = (int(n) for n in args.video.split("x"))
    convs = decode_convolutions(args.topology, height, width, frames)
    rows = []
    for (x_shape, k_shape, dtype), count in sorted(convs.items(), key=lambda kv: -kv[1]):
        seconds = compile_alone(args.topology, x_shape, k_shape, dtype)
        rows.append({"input": list(x_shape), "kernel": list(k_shape), "dtype": dtype, "count": count,
                     "compile_seconds": seconds})
        print(f"{count:3d} x  {'x'.join(map(str, x_shape)):>22s} * {'x'.join(map(str, k_shape)):>16s} {dtype}  "
              f"{seconds:6.2f} s", flush=True)
    distinct = sum(r["compile_seconds"] for r in rows)
    every = sum(r["compile_seconds"] * r["count"] for r in rows)
    print(f"{sum(convs.values())} convolutions, {len(rows)} distinct: {distinct:.1f} s over distinct shapes, "
          f"{every:.1f} s over every convolution")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "command": " ".join(["python benchmarks/vae_conv_compile.py", *sys.argv[1:]]),
            "topology": args.topology, "video": [height, width, frames], "rows": rows,
            "distinct_seconds": distinct, "every_seconds": every}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
