"""The Wan 2.1 VAE decode timed on the attached TPU chips, beside the decode time a plan predicts.

    # on a host with a TPU (one chip: the decode of a v5e:1x1 plan)
    python benchmarks/chip/vae_decode_chip.py measure --video 480x832x5 --video 480x832x21 --runs 3 --out OUT
    # on any host: Q2's prediction of the same decodes (libtpu compile-only, through the compile cache)
    python benchmarks/chip/vae_decode_chip.py compare OUT [--topology v5e:1x1]

`measure` runs the decode program a plan compiles for its video time (`aoizora.models.wan.vae.sharding.
sharded_decode`: MaxDiffusion's sharding over its own (1, devices) mesh, float32 compute, bfloat16
weights, uint8 frames out) with random weights on every device JAX sees, and writes each video's
compile seconds, every timed run and the median, with the chip and toolchain. `compare` adds Q2's
time of the same program compiled for the described slice of as many devices
(`aoizora.stage2.vae_decode.video_decode_cost`) and prints predicted over measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any


def parse_video(text: str) -> tuple[int, int, int]:
    """HEIGHTxWIDTHxFRAMES, e.g. 480x832x21."""
    try:
        height, width, frames = (int(n) for n in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"write a video as HEIGHTxWIDTHxFRAMES, e.g. 480x832x21, not {text!r}") from None
    return height, width, frames


def measure_video(height: int, width: int, frames: int, runs: int, devices: list[Any] | None = None) -> dict[str, Any]:
    """Compile and time one decode on `devices` (default: every device JAX sees), random weights and
    latents."""
    import jax
    import numpy as np
    from jax.sharding import Mesh

    from aoizora.models.wan.vae.config import WAN21_VAE
    from aoizora.models.wan.vae.params import init_vae_params
    from aoizora.models.wan.vae.program import DecodeShape, VaeDecodeSpace
    from aoizora.models.wan.vae.sharding import latent_shape, sharded_decode

    devices = devices or jax.devices()
    latent = latent_shape(height, width, frames, 1, WAN21_VAE)
    space = VaeDecodeSpace()
    spec = space.mesh_spec(DecodeShape(tuple(latent), len(devices)))
    mesh = Mesh(np.array(devices).reshape(spec.axis_sizes), spec.axis_names)
    decode = sharded_decode(space.config, latent, mesh)
    params_abstract, latents_abstract = decode.inputs
    params = jax.tree.map(lambda a, x: jax.device_put(x.astype(a.dtype), a.sharding), params_abstract,
                          init_vae_params(space.config))
    rng = np.random.default_rng(1)
    latents = jax.device_put(rng.standard_normal(latents_abstract.shape).astype(latents_abstract.dtype),
                             latents_abstract.sharding)
    t0 = time.perf_counter()
    compiled = decode.fn.lower(params, latents).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(params, latents))  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(params, latents))
        times.append(time.perf_counter() - t0)
    return {"video": [height, width, frames], "latent": list(latent), "mesh": list(spec.axis_sizes),
            "compile_seconds": compile_s, "seconds": times, "median_seconds": statistics.median(times)}


def measure(args: argparse.Namespace) -> int:
    import importlib.metadata

    import jax

    if jax.devices()[0].platform != "tpu":
        print("measure needs a TPU host: JAX sees no TPU here; run `compare` on this host instead",
              file=sys.stderr)
        return 2
    doc: dict[str, Any] = {
        "command": " ".join(["python benchmarks/chip/vae_decode_chip.py", *sys.argv[1:]]),
        "chip": jax.devices()[0].device_kind, "devices": len(jax.devices()),
        "jax": jax.__version__, "libtpu": importlib.metadata.version("libtpu"),
        "date": time.strftime("%Y-%m-%d", time.gmtime()), "runs": args.runs, "videos": [],
    }
    for height, width, frames in args.video:
        doc["videos"].append(measure_video(height, width, frames, args.runs))
        Path(args.out).write_text(json.dumps(doc, indent=1) + "\n")  # each video as it comes
        print(json.dumps(doc["videos"][-1]), flush=True)
    return 0


def compare(args: argparse.Namespace, argv: list[str] | None = None) -> int:
    from aoizora.stage2.compile_cache import default_compile_cache
    from aoizora.stage2.vae_decode import video_decode_cost
    from aoizora.topology import get_topology

    doc = json.loads(Path(args.data).read_text())
    topology = get_topology(args.topology)
    if topology.num_devices != doc["devices"]:
        print(f"{args.topology} has {topology.num_devices} devices but the decodes ran on {doc['devices']}; "
              "name a slice of as many devices", file=sys.stderr)
        return 2
    rows = []
    for rec in doc["videos"]:
        height, width, frames = rec["video"]
        cost = video_decode_cost(topology, height, width, frames, simulated=False, cache=default_compile_cache())
        rows.append({"video": rec["video"], "measured_seconds": rec["median_seconds"],
                     "predicted_seconds": cost.seconds, "predicted_compute_seconds": cost.compute_seconds,
                     "ratio": cost.seconds / rec["median_seconds"]})
        print(f"{height}x{width}x{frames}: measured {rec['median_seconds'] * 1e3:9.1f} ms  "
              f"predicted {cost.seconds * 1e3:9.1f} ms  predicted/measured {rows[-1]['ratio']:.3f}", flush=True)
    if args.json:
        command = " ".join(["python benchmarks/chip/vae_decode_chip.py", *(argv or sys.argv[1:])])
        Path(args.json).write_text(json.dumps({"command": command, "topology": args.topology, "data": args.data,
                                               "rows": rows}, indent=1) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="time the decodes on the attached TPU chips")
    m.add_argument("--video", type=parse_video, action="append", required=True, metavar="HxWxF")
    m.add_argument("--runs", type=int, default=3)
    m.add_argument("--out", required=True)
    c = sub.add_parser("compare", help="Q2's prediction of the measured decodes (no TPU needed)")
    c.add_argument("data", help="a file `measure` wrote")
    c.add_argument("--topology", default="v5e:1x1")
    c.add_argument("--json", default=None, help="write the comparison here")
    args = parser.parse_args(argv)
    return measure(args) if args.command == "measure" else compare(args, argv)


if __name__ == "__main__":
    sys.exit(main())
