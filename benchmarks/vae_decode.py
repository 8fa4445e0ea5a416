"""The predicted VAE decode time of one Wan 2.1 video per slice: the decode sharded as MaxDiffusion
shards it (its own (1, devices) mesh, the width over `vae_spatial`, float32 compute, bfloat16
weights), compiled by libtpu for each slice and costed by Q2 (`aoizora.stage2.vae_decode`).

    .venv/bin/python benchmarks/vae_decode.py [--topologies v5e:2x4,v6e:2x4,tpu7x:2x2x1]
        [--videos 720p,480p] [--frames 81] [--batch 1] [--vae-spatial N] [--no-cache] [--json OUT]

Per (slice, video) it prints Q2's decode time, the simulator's, its compute and exposed-collective parts, the
per-device HBM libtpu reports, and the compile wall seconds (on a compile-cache hit,
marked "cached", the seconds the cached compile took).
`--vae-spatial N` is MaxDiffusion's `vae_spatial` config key: the decode's width split over N devices, the
mesh (devices / N, N); −1 (the default, every Wan config's) splits over all devices, 1 replicates the decode.
`--json` writes every record as it comes, appended to the runs already in the file, so one file can hold
runs of several commands (`docs/data/video/vae_decode.json` and `vae_decode_tpu7x.json` hold committed runs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

#: Wan 2.1's resolutions, (height, width), as MaxDiffusion's configs give them.
VIDEOS = {"720p": (720, 1280), "480p": (480, 832)}


def run(topology_name: str, video: str, frames: int, batch: int, cache: Any, vae_spatial: int = -1) -> dict[str, Any]:
    from aoizora.stage2.vae_decode import video_decode_cost
    from aoizora.topology import get_topology

    height, width = VIDEOS[video]
    t0 = time.perf_counter()
    cost = video_decode_cost(get_topology(topology_name), height, width, frames, batch, cache=cache,
                             vae_spatial=vae_spatial)
    rec = {"resolution": video, "frames": frames, "batch": batch, "vae_spatial": vae_spatial, **cost.to_json(),
           "wall_seconds": time.perf_counter() - t0, "load_average": os.getloadavg()[0]}
    return rec


def line(rec: dict[str, Any]) -> str:
    mem = rec["memory_bytes"] / 2**30 if rec["memory_bytes"] is not None else float("nan")
    return (f"{rec['topology']:<13}{rec['resolution']:<6}{rec['frames']:>4}  decode {rec['seconds']:8.3f} s  "
            f"sim {rec.get('sim_seconds') or float('nan'):8.3f} s  compute {rec['compute_seconds']:8.3f} s  "
            f"exposed comm {rec['exposed_comm_seconds']:7.3f} s  "
            f"HBM {mem:6.2f} GiB  compile {rec['compile_seconds']:7.1f} s"
            + ("  (cached)" if rec["cached"] else ""))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topologies", default="v5e:2x4,v6e:2x4,tpu7x:2x2x1")
    ap.add_argument("--videos", default="720p,480p")
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--vae-spatial", type=int, default=-1,
                    help="MaxDiffusion's vae_spatial: the width split over N devices (-1: all, 1: replicated)")
    ap.add_argument("--no-cache", action="store_true", help="compile without the compile cache")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    from aoizora.stage2.compile_cache import default_compile_cache

    cache = None if args.no_cache else default_compile_cache()
    # Runs of earlier commands stay: the file gathers every command's records, each record naming its command.
    earlier: list[dict[str, Any]] = []
    if args.json and args.json.exists():
        old = json.loads(args.json.read_text())
        earlier = [{"command": old.get("command"), **r} if "command" not in r else r for r in old["runs"]]
    command = " ".join(["benchmarks/vae_decode.py", *sys.argv[1:]])
    runs: list[dict[str, Any]] = []
    for topology in args.topologies.split(","):
        for video in args.videos.split(","):
            try:
                rec = run(topology, video, args.frames, args.batch, cache, args.vae_spatial)
            except Exception as exc:  # one slice's failure is a record, not the end of the run
                rec = {"topology": topology, "resolution": video, "frames": args.frames,
                       "vae_spatial": args.vae_spatial, "error": f"{type(exc).__name__}: {exc}"}
            rec["command"] = command
            runs.append(rec)
            print(line(rec) if "error" not in rec else f"{topology:<13}{video:<6}error: {rec['error']}", flush=True)
            if args.json:
                doc = {"what": "Q2-predicted Wan 2.1 VAE decode per slice, sharded as MaxDiffusion 7cfb8801",
                       "runs": earlier + runs}
                args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
