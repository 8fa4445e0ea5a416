"""Where one VAE decode compile's time goes: the decode of 1 latent frame (the first chunk alone),
of 2 (the first chunk and a one-trip scan of the chunk body) and of all T frames, each compiled
without the compile cache, one at a time, with libtpu's compile time and Q2's time of each.

    PYTHONPATH=src python benchmarks/vae_decode_compile.py [--topology v5e:2x4] [--video 480p]
        [--frames 81] [--tiny] [--json OUT]

The decode is the first chunk then a `lax.scan` of one chunk body over the other T − 1 frames, so
the body is compiled once whatever T. If the T-frame compile takes about the 2-frame one, T does
not cost compile time and there is no cheaper exact form to take; the Q2 times show whether the
T-frame decode is the first chunk plus T − 1 bodies (decode(T) = decode(1) + (T − 1)·(decode(2) −
decode(1))). `--tiny` runs a tiny VAE (base_dim 4, z_dim 4) at a tiny latent instead, in about a
minute per compile.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

VIDEOS = {"720p": (720, 1280), "480p": (480, 832)}


def run(topology_name: str, latent: tuple[int, ...], config: Any) -> dict[str, Any]:
    from aoizora.stage2.vae_decode import vae_decode_cost
    from aoizora.topology import get_topology

    t0 = time.perf_counter()
    cost = vae_decode_cost(get_topology(topology_name), latent, config=config, simulated=False)
    return {"latent": list(latent), "seconds": cost.seconds, "compile_seconds": cost.compile_seconds,
            "wall_seconds": time.perf_counter() - t0, "load_average": os.getloadavg()[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", default="v5e:2x4")
    ap.add_argument("--video", default="480p", choices=sorted(VIDEOS))
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--tiny", action="store_true", help="a tiny VAE at a tiny latent (a quick look)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    import jax.numpy as jnp

    from aoizora.models.wan.vae.config import WAN21_VAE, WanVAEConfig
    from aoizora.models.wan.vae.sharding import COMPUTE_DTYPE, latent_shape

    if args.tiny:
        config = WanVAEConfig(base_dim=4, z_dim=4, latents_mean=(0.0,) * 4, latents_std=(1.0,) * 4, dtype=jnp.float32)
        full = (1, 4, (args.frames - 1) // 4 + 1, 8, 16)
    else:
        config = WAN21_VAE.replace(dtype=COMPUTE_DTYPE)
        full = latent_shape(*VIDEOS[args.video], args.frames, 1, config)
    runs = []
    for frames in (1, 2, full[2]):
        rec = run(args.topology, (*full[:2], frames, *full[3:]), config)
        runs.append(rec)
        print(f"T={frames:>3}  compile {rec['compile_seconds']:7.1f} s  decode (Q2) {rec['seconds']:.4f} s  "
              f"load {rec['load_average']:.1f}", flush=True)
    first, two, whole = (r["seconds"] for r in runs)
    composed = first + (full[2] - 1) * (two - first)
    print(f"decode(1) + (T-1)*(decode(2) - decode(1)) = {composed:.4f} s vs decode(T) = {whole:.4f} s "
          f"({(composed / whole - 1) * 100:+.2f}%)")
    if args.json:
        args.json.write_text(json.dumps({"command": " ".join(["benchmarks/vae_decode_compile.py", *sys.argv[1:]]),
                                         "topology": args.topology, "tiny": args.tiny, "runs": runs,
                                         "composed_seconds": composed}, indent=1) + "\n")


if __name__ == "__main__":
    main()
