"""Stage 1 from the command line (lowering only; no compile).

    python -m aoizora.stage1 --topology v5e:4x4 --workload transformer [--seq 4096] [--top-k 4] [--json]
    python -m aoizora.stage1 --topology v5e:2x4 --workload wan --model t2v-14b --video 81x720x1280 [--json]

Prints the counts and the Top-K table, or with --json every strategy with its verdict, reasons,
Q1 (compute / communication), memory estimate and communication per mesh axis. Kept separate
from `aoizora.cli` so the stage can be run before the planner's CLI wires it in.
"""

from __future__ import annotations

import argparse
import json
import sys

import aoizora  # noqa: F401  (sets libtpu's multi-process switch)
from aoizora.defaults import DEFAULT_TOP_K
from aoizora.stage1.search import run_stage1
from aoizora.topology import get_topology


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m aoizora.stage1", description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default="v5e:2x4")
    ap.add_argument("--workload", choices=("transformer", "wan"), default="transformer")
    ap.add_argument("--model", default="t2v-14b", help="Wan preset (t2v-1.3b, t2v-14b, i2v-14b)")
    ap.add_argument("--video", default="81x720x1280", help="FRAMESxHEIGHTxWIDTH for Wan")
    ap.add_argument("--seq", type=int, default=4096, help="tokens for the generic transformer (14B-like dims)")
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--top-k", type=int, default=DEFAULT_TOP_K)
    ap.add_argument("--memory-slack", type=float, default=1.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    topo = get_topology(args.topology)
    if args.workload == "wan":
        from aoizora.models.wan.config import PRESETS, VideoShape
        from aoizora.stage1.wan_space import WanSpace

        frames, height, width = (int(v) for v in args.video.lower().split("x"))
        space = WanSpace(PRESETS[args.model], VideoShape(frames, height, width))
    else:
        from aoizora.stage1.transformer_space import TransformerSpace
        from aoizora.workloads.transformer import TransformerConfig

        space = TransformerSpace(TransformerConfig.like_wan_14b(seq=args.seq, layers=args.layers))
    res = run_stage1(space, topo, top_k=args.top_k, memory_slack=args.memory_slack, progress=not args.json)
    if args.json:
        doc = {"topology": topo.name, "workload": space.name, "counts": res.counts(), "seconds": res.seconds,
               "strategies": [e.to_json(space) for e in sorted(res.entries, key=lambda e: (e.rank or 10**9, e.key))]}
        json.dump(doc, sys.stdout, indent=1, default=str)
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
