"""Stage 1's memory estimate against `memory_analysis()` on its survivors (the Top-K of each cell).

    .venv/bin/python benchmarks/memory_survivors.py --out survivors.jsonl             # 18 cells
    .venv/bin/python benchmarks/memory_survivors.py --cells v5e:2x4/720p/81 --out F

For each grid cell (Wan 14B), run Stage 1, compile its Top-K with libtpu (full compiles, ~30-80 s
each here) and compare `MemoryEstimate.total_bytes` with the compiled program's arguments +
outputs + temp − aliased bytes, as Stage 2 reads them. Compiles are recorded in `--out` (JSON
lines; a rerun skips what is there, so a long run can be resumed or cut short); the estimate is
recomputed from the current code each time. A strategy the compiler refuses for HBM is listed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

MODEL = "wan2.1-t2v-14b"
GRID = [(t, r, f) for r in ("720p", "480p") for f in (81, 41, 21) for t in ("v5e:2x4", "v5e:4x4", "v5e:2x2")]


def compile_survivors(cells: list[tuple[str, str, int]], out: Path, top_k: int | None) -> None:
    from aoizora.models.registry import wan_space
    from aoizora.placement.jax_default import jax_default_placement
    from aoizora.stage1.search import run_stage1
    from aoizora.topology import get_topology

    done = {(r["topology"], r["resolution"], r["frames"], r["key"]) for r in _records(out)}
    for topology, resolution, frames in cells:
        topo = get_topology(topology)
        space = wan_space(MODEL, resolution, frames, generation=topo.generation)
        result = run_stage1(space, topo, progress=False, **({"top_k": top_k} if top_k else {}))
        for entry in result.ranked[: result.top_k]:
            if (topology, resolution, frames, entry.key) in done:
                continue
            strategy = entry.candidate.strategy
            mesh = jax_default_placement(topo, space.mesh_spec(strategy)).jax_mesh(topo)
            inp = space.lowering_inputs(strategy, mesh)
            record = {"topology": topology, "resolution": resolution, "frames": frames, "key": entry.key}
            t0 = time.perf_counter()
            try:
                m = inp.lower().compile().memory_analysis()
                record["memory_bytes"] = (m.argument_size_in_bytes + m.output_size_in_bytes
                                          + m.temp_size_in_bytes - m.alias_size_in_bytes)
            except Exception as e:  # noqa: BLE001 - recorded (an out-of-HBM refusal, most likely)
                record["error"] = str(e).splitlines()[0][:300]
            record["compile_seconds"] = round(time.perf_counter() - t0, 1)
            with out.open("a") as f:
                f.write(json.dumps(record) + "\n")
            print(f"  {topology} {resolution} {frames}f {entry.key}: {record.get('memory_bytes', record.get('error'))} "
                  f"({record['compile_seconds']} s)", flush=True)


def _records(out: Path) -> list[dict]:
    return [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []


def evaluate(records: list[dict]) -> None:
    from aoizora.models.registry import wan_space
    from aoizora.stage1.search import analyse
    from aoizora.topology import get_topology

    errors = []
    for r in records:
        label = f"{r['topology']} {r['resolution']} {r['frames']}f {r['key']}"
        if "memory_bytes" not in r:
            print(f"  not compiled: {label}: {r.get('error')}")
            continue
        topo = get_topology(r["topology"])
        space = wan_space(MODEL, r["resolution"], r["frames"], generation=topo.generation)
        strategy = next(c.strategy for c in space.candidates(topo.num_devices) if c.key == r["key"])
        est = analyse(space, strategy, topo)[2]
        errors.append((est.total_bytes / r["memory_bytes"] - 1, label, est.total_bytes, r["memory_bytes"]))
    if not errors:
        raise SystemExit("no compiled survivor in these records")
    abs_err = [abs(e[0]) for e in errors]
    print(f"\nmemory_analysis() total on {len(errors)} compiled survivors: within 15 %: "
          f"{sum(e <= 0.15 for e in abs_err)}/{len(errors)}, median |error| {statistics.median(abs_err):.1%}, "
          f"mean {statistics.mean(abs_err):.1%}, max {max(abs_err):.1%}")
    for e, label, est, compiled in sorted(errors, key=lambda x: -abs(x[0]))[:12]:
        print(f"    {e:+6.1%}  estimate {est / 2**30:6.2f} GiB  compiled {compiled / 2**30:6.2f} GiB  {label}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON lines of compiled memory (appended; reruns resume)")
    ap.add_argument("--cells", default="", help="comma-separated TOPOLOGY/RES/FRAMES (default: the 18 grid cells)")
    ap.add_argument("--top-k", type=int, default=None, help="survivors per cell (default: Stage 1's K)")
    ap.add_argument("--report-only", action="store_true", help="evaluate what --out holds, compile nothing")
    args = ap.parse_args()
    cells = [(c.split("/")[0], c.split("/")[1], int(c.split("/")[2])) for c in args.cells.split(",") if c] or GRID
    out = Path(args.out)
    if not args.report_only:
        compile_survivors(cells, out, args.top_k)
    wanted = set(cells)
    evaluate([r for r in _records(out) if (r["topology"], r["resolution"], r["frames"]) in wanted])


if __name__ == "__main__":
    main()
