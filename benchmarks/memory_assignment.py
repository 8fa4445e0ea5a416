"""Stage 1's HBM check against libtpu's buffer assignment, on every legal strategy of the grid.

    .venv/bin/python benchmarks/memory_assignment.py --out assign.jsonl                 # 18 cells
    .venv/bin/python benchmarks/memory_assignment.py --topologies v5e:2x2 --frames 21 --out F

libtpu writes its buffer assignment (`xla_dump_to`) a few seconds into a compile whose back end
then runs for a minute or more; each strategy is compiled in a child process that exits as soon as
the assignment is on disk (~2 s per strategy here instead of ~40 s). The compiler refuses a
program when parameters + outputs + preallocated temp exceed the HBM it allows (`hbm_usable_bytes`);
memory it holds outside the assignment (async collective copies, all-reduce scratch) is not
checked. Stage 1's counterpart is `MemoryEstimate.checked_bytes`. Printed: the error of the
checked estimate on every strategy the compiler accepts, and the verdicts — strategies Stage 1
drops that the compiler accepts (must be none), and refusals Stage 1 keeps (Stage 2 then compiles
the next-ranked strategy instead). Results go to `--out` (JSON lines; a rerun skips what is there).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from assignment_watch import compile_until_assignment

GIB = 2**30
MODEL = "wan2.1-t2v-14b"


def child(topology: str, resolution: str, frames: int, key: str) -> None:
    """Compile one strategy until libtpu has written its buffer assignment; print it as JSON."""
    from aoizora.hlo.buffer_dump import read_buffer_assignment
    from aoizora.models.registry import wan_space
    from aoizora.topology import get_topology
    from aoizora.workload import lowering_inputs_on

    topo = get_topology(topology)
    space = wan_space(MODEL, resolution, frames, generation=topo.generation)
    strategy = next(c.strategy for c in space.candidates(topo.num_devices) if c.key == key)
    lowered = lowering_inputs_on(space, strategy, topo).lower()
    record = {"topology": topology, "resolution": resolution, "frames": frames, "key": key}

    def read(dump: str) -> None:
        a = read_buffer_assignment(dump)
        record.update(temp_bytes=a.temp_bytes, parameter_bytes=a.parameter_bytes, output_bytes=a.output_bytes)
        print("RESULT " + json.dumps(record), flush=True)

    record["error"] = compile_until_assignment(lowered, read)
    print("RESULT " + json.dumps(record), flush=True)


def collect(jobs: list[tuple[str, str, int, str]], out: Path, parallel: int) -> None:
    running: list[subprocess.Popen] = []

    def reap(block: bool) -> None:
        for p in list(running):
            if block or p.poll() is not None:
                stdout, _ = p.communicate()
                running.remove(p)
                for line in stdout.splitlines():
                    if line.startswith("RESULT "):
                        with out.open("a") as f:
                            f.write(line[7:] + "\n")

    t0 = time.perf_counter()
    for n, (topology, resolution, frames, key) in enumerate(jobs, 1):
        while len(running) >= parallel:
            reap(False)
            time.sleep(0.1)
        running.append(subprocess.Popen(
            [sys.executable, __file__, "--child", topology, resolution, str(frames), key],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
        if n % 25 == 0:
            print(f"  {n}/{len(jobs)} strategies, {time.perf_counter() - t0:.0f} s", flush=True)
    while running:
        reap(True)
    print(f"  {len(jobs)} strategies in {time.perf_counter() - t0:.0f} s", flush=True)


def evaluate(records: list[dict], estimates: Path | None = None) -> None:
    from aoizora.models.registry import wan_space
    from aoizora.stage1.search import ArgumentsDoNotFit, analyse
    from aoizora.topology import get_topology

    spaces: dict[tuple[str, int], object] = {}
    errors, false_drops, kept_refusals, refusals = [], [], [], 0
    for r in records:
        if "temp_bytes" not in r:
            print(f"  no assignment: {r['topology']} {r['resolution']} {r['frames']}f {r['key']}: {r.get('error')}")
            continue
        topo = get_topology(r["topology"])
        space = spaces.setdefault((r["topology"], r["resolution"], r["frames"]),
                                  wan_space(MODEL, r["resolution"], r["frames"], generation=topo.generation))
        strategy = next(c.strategy for c in space.candidates(topo.num_devices) if c.key == r["key"])
        try:
            est = analyse(space, strategy, topo)[2]
        except ArgumentsDoNotFit:  # Stage 1 drops it before lowering
            est = None
        libtpu = r["temp_bytes"] + r["parameter_bytes"] + r["output_bytes"]
        accepted = libtpu <= topo.hardware.hbm_usable_bytes
        if estimates is not None:
            with estimates.open("a") as f:
                f.write(json.dumps({k: r[k] for k in ("topology", "resolution", "frames", "key")} | {
                    "libtpu_checked_bytes": libtpu, "libtpu_temp_bytes": r["temp_bytes"],
                    "stage1_checked_bytes": None if est is None else est.checked_bytes,
                    "stage1_temp_bytes": None if est is None else est.temp_bytes - est.outside_bytes,
                    "stage1_fits": est is not None and est.fits, "compiler_accepts": accepted}) + "\n")
        label = f"{r['topology']} {r['resolution']} {r['frames']}f {r['key']}"
        if accepted:
            if est is None or not est.fits:
                false_drops.append(label)
            if est is not None:
                errors.append((est.checked_bytes / libtpu - 1, label))
        else:
            refusals += 1
            if est is not None and est.fits:
                kept_refusals.append(label)
    if not errors:
        raise SystemExit("no strategy with a buffer assignment in these records")
    abs_err = [abs(e) for e, _ in errors]
    print(f"\nchecked bytes (parameters + outputs + temp) on the {len(errors)} strategies the compiler accepts:")
    print(f"  within 15 %: {sum(e <= 0.15 for e in abs_err)}/{len(errors)}, "
          f"median |error| {statistics.median(abs_err):.1%}, "
          f"mean {statistics.mean(abs_err):.1%}, max {max(abs_err):.1%}; "
          f"under by > 15 %: {sum(e < -0.15 for e, _ in errors)}, over by > 15 %: {sum(e > 0.15 for e, _ in errors)}")
    for e, label in sorted(errors, key=lambda x: -abs(x[0]))[:10]:
        print(f"    {e:+6.1%}  {label}")
    print(f"verdicts on {len(errors) + refusals} strategies: the compiler accepts {len(errors)}, Stage 1 drops "
          f"{len(false_drops)} of them; it refuses {refusals}, Stage 1 keeps {len(kept_refusals)} of them")
    for label in false_drops:
        print(f"    accepted, dropped: {label}")
    for label in kept_refusals:
        print(f"    refused, kept: {label}")


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child(sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON lines of buffer assignments (appended; reruns resume)")
    ap.add_argument("--topologies", default="v5e:2x2,v5e:2x4,v5e:4x4")
    ap.add_argument("--resolutions", default="480p,720p")
    ap.add_argument("--frames", default="21,41,81")
    ap.add_argument("--parallel", type=int, default=2, help="child compiles at once")
    ap.add_argument("--report-only", action="store_true", help="evaluate what --out holds, compile nothing")
    ap.add_argument("--estimates", type=Path, metavar="FILE",
                    help="also write Stage 1's estimate beside libtpu's for every strategy (JSON lines, replaced)")
    args = ap.parse_args()

    from aoizora.models.registry import wan_space
    from aoizora.topology import get_topology

    out = Path(args.out)
    cells = [(t, r, int(f)) for t in args.topologies.split(",") for r in args.resolutions.split(",")
             for f in args.frames.split(",")]
    done = set()
    if out.exists():
        for line in out.read_text().splitlines():
            rec = json.loads(line)
            done.add((rec["topology"], rec["resolution"], rec["frames"], rec["key"]))
    jobs = [(t, r, f, c.key) for t, r, f in cells
            for c in wan_space(MODEL, r, f, generation=get_topology(t).generation)
            .candidates(get_topology(t).num_devices)
            if c.legal and (t, r, f, c.key) not in done]
    if jobs and not args.report_only:
        print(f"{len(jobs)} legal strategies to compile up to the buffer assignment", flush=True)
        collect(jobs, out, args.parallel)
    wanted = {(t, r, f) for t, r, f in cells}
    records = [rec for rec in map(json.loads, out.read_text().splitlines())
               if (rec["topology"], rec["resolution"], rec["frames"]) in wanted] if out.exists() else []
    if args.estimates is not None:
        args.estimates.unlink(missing_ok=True)
    evaluate(records, args.estimates)


if __name__ == "__main__":
    main()
