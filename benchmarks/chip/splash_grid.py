"""The splash kernel timed on a TPU chip over the Wan spaces' per-device calls, at every tile and
scoped-VMEM limit the tile search weighs for them.

    python benchmarks/chip/splash_grid.py --out docs/data/chip/v5e_splash_grid.json [--list]

The calls: every self-attention splash call a strategy of Wan 2.1 1.3B or 14B runs on one device at
480p and 720p, 81 frames, on v5e:2x4 and v5e:4x4 (`--slices`: others, e.g. v5e:1x1) (all-gather,
Ulysses, ring and 2D-context local lengths; local batch 1 and 2), one per (local batch, query
length, key length, residuals) with the fewest heads a strategy gives it (a call's maps are
independent, so the head count multiplies its time; `--heads-check` adds the 14B heads of the demo
plan's call to check that).
The tiles: of the (tile, limit) pairs `splash_tiles.splash_tile_candidates` weighs for the
strategies that run the call, per limit and K/V cap the one of the largest block_q (the search's
fewest-Q-blocks tile; MaxDiffusion's own block_q values where they are larger). Each case is
compiled for the chip and timed (`aoizora.measure.chip`); `--list` prints the cases and their
predicted time without a chip. Runs on the chip host only.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from pathlib import Path

from aoizora.api import wan_request_space
from aoizora.measure.splash_calls import SplashCall, SplashCase, splash_cases
from aoizora.topology import get_topology, hardware_profile

SLICES = ("v5e:2x4", "v5e:4x4")
MODELS = ("wan2.1-t2v-1.3b", "wan2.1-t2v-14b")
RESOLUTIONS = ("480p", "720p")
FRAMES = 81
#: the demo plan's per-device call (14B 720p/81 on v5e:2x4, fsdp=2 x context=4, all-gather)
DEMO_CALL = SplashCall(batch=1, heads=40, lq=18944, lk=75776, head_dim=128, residuals=False)


def grid_cases(heads_check: bool, slices: Iterable[str] = SLICES) -> list[SplashCase]:
    by_shape: dict[tuple[int, int, int, bool], list[SplashCase]] = {}
    for topo_name in slices:
        topo = get_topology(topo_name)
        for model in MODELS:
            for res in RESOLUTIONS:
                space = wan_request_space({"model": model, "resolution": res, "frames": FRAMES,
                                           "kernel_profile": "jax-splash", "program": "aoizora"}, topo,
                                          vae_decode=False)
                strategies = [c.strategy for c in space.candidates(topo.num_devices) if c.legal]
                for case in splash_cases(space, strategies):
                    c = case.call
                    by_shape.setdefault((c.batch, c.lq, c.lk, c.residuals), []).append(case)
    chosen: dict[SplashCase, None] = {}
    for shape in sorted(by_shape):
        cases = by_shape[shape]
        heads = min(c.call.heads for c in cases)
        chosen.update(dict.fromkeys(_largest_block_q(c for c in cases if c.call.heads == heads)))
    if heads_check:
        demo = [c for c in chosen if (c.call.batch, c.call.lq, c.call.lk, c.call.residuals)
                == (DEMO_CALL.batch, DEMO_CALL.lq, DEMO_CALL.lk, DEMO_CALL.residuals)]
        for case in demo:
            chosen.setdefault(SplashCase(DEMO_CALL, case.blocks, case.limit_kib), None)
    return list(chosen)


def _largest_block_q(cases: Iterable[SplashCase]) -> list[SplashCase]:
    """Per (limit, block_kv, block_kv_compute), the case of the largest block_q (the fewest Q
    blocks, the tile the search's own rule gives for that K/V cap), in the order first met."""
    best: dict[tuple[int | None, int, int], SplashCase] = {}
    for case in cases:
        group = (case.limit_kib, case.blocks.block_kv, case.blocks.block_kv_compute)
        if group not in best or case.blocks.block_q > best[group].blocks.block_q:
            best[group] = case
    return list(best.values())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=False)
    ap.add_argument("--list", action="store_true", help="print the cases and their predictions; time nothing")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--heads-check", action="store_true")
    ap.add_argument("--slices", default=",".join(SLICES),
                    help="the slices whose strategies' calls make the grid (comma-separated; e.g. v5e:1x1: one chip)")
    ap.add_argument("--shard", default="0/1", help="I/N: time every N-th case from the I-th (split a grid over calls)")
    ap.add_argument("--skip", type=Path, action="append", default=[],
                    help="a grid document already measured: its cases are not timed again (repeatable)")
    ap.add_argument("--workers", type=int, default=1, help="compile this many cases at once (threads)")
    ap.add_argument("--reverse", action="store_true", help="time the cases last to first (the longest calls first)")
    args = ap.parse_args(argv)
    hw = hardware_profile("v5e")
    cases = grid_cases(args.heads_check, args.slices.split(","))
    index, count = (int(x) for x in args.shard.split("/"))
    cases = cases[index::count][::-1] if args.reverse else cases[index::count]
    done = {SplashCase.from_json(row) for path in args.skip for row in json.loads(path.read_text())["rows"]}
    cases = [c for c in cases if c not in done]
    if args.list:
        for case in cases:
            print(f"{case.call.label():40s} {case.blocks.describe():16s} {case.limit_kib}  "
                  f"{case.predicted_seconds(hw) * 1e3:9.2f} ms")
        print(f"{len(cases)} cases, {len({c.call for c in cases})} calls, "
              f"{sum(c.predicted_seconds(hw) for c in cases):.1f} s predicted in all")
        return 0
    if args.out is None:
        ap.error("--out is required unless --list")
    from aoizora.measure.candidates import time_splash_cases
    from aoizora.measure.records import document, write_document

    def keep(rows: list[dict]) -> None:
        if len(rows) % 5 == 0:
            write_document(document("splash", rows, complete=False), args.out)

    rows = time_splash_cases(cases, hw, runs=args.runs, workers=args.workers,
                             say=lambda text: print(text, flush=True), on_row=keep)
    write_document(document("splash", rows, complete=True, model_profile="v5e"), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
