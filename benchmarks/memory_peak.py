"""Where Stage 1's memory estimate of one strategy falls short of libtpu's: the estimate's parts
beside the buffer assignment's, the assignment's live peak and the temp buffers live at it.

    .venv/bin/python benchmarks/memory_peak.py --topology v5e:4x4 --resolution 720p --frames 41 \\
        --strategy "fsdp=2,context=8 | weights=gathered | attn=allgather | blocks=1280/2048/1024"

libtpu's `memory_analysis()` temp is its buffer assignment's temp (what its out-of-HBM check
counts) plus what it holds outside the assignment; Stage 1 estimates both (`temp_bytes`, of which
`outside_bytes`). The assignment's temp is the span of the offsets it placed its buffers at, which
can exceed the most bytes live at one point of the schedule (the live peak): the difference is
how tightly libtpu packs them. Printed beside it: libtpu's own live ranges packed by Stage 1's
rule (`aoizora.stage1.heap`: best fit, in the order buffers are born), which gives its temp
where the rule describes the allocation. The strategy is compiled (splash blocks fitted to the slice, as
`aoizora plan` searches) only until libtpu has written its buffer assignment, a few seconds.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from assignment_watch import compile_until_assignment
from strategy_args import add_cell_and_strategy, chosen_strategy

GIB = 2**30
MIB = 2**20


def live_peak(buffers) -> tuple[int, list]:
    """(schedule position, buffers live there) where the temp buffers' live bytes are largest."""
    starts = sorted({b.start for b in buffers})
    at = max(starts, key=lambda t: sum(b.size for b in buffers if b.start <= t <= b.end))
    return at, sorted((b for b in buffers if b.start <= at <= b.end), key=lambda b: -b.size)


def replayed_bytes(buffers) -> float:
    """libtpu's temp buffers packed by Stage 1's rule: best fit, each placed when it is born."""
    from aoizora.stage1.heap import Timeline

    timeline = Timeline()
    for b in buffers:
        timeline.ends[timeline.open(b.size, start=b.start)] = b.end
    return timeline.packed_bytes()


def main() -> None:
    from aoizora.hlo.buffer_dump import read_buffer_assignment
    from aoizora.stage1.search import analyse
    from aoizora.workload import lowering_inputs_on

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cell_and_strategy(ap)
    ap.add_argument("--buffers", type=int, default=12, metavar="N", help="temp buffers listed at the live peak")
    args = ap.parse_args()

    topo, space, strategy = chosen_strategy(args)
    est = analyse(space, strategy, topo)[2]
    print(f"Stage 1: arguments {est.argument_bytes / GIB:.3f} GiB, outputs {est.output_bytes / GIB:.3f}, temp "
          f"{est.temp_bytes / GIB:.3f} (in the assignment {(est.temp_bytes - est.outside_bytes) / GIB:.3f}, "
          f"outside it {est.outside_bytes / GIB:.3f}); total {est.total_bytes / GIB:.3f} GiB")

    lowered = lowering_inputs_on(space, strategy, topo).lower()

    def read(dump: str) -> None:
        a = read_buffer_assignment(dump, with_buffers=True)
        at, live = live_peak(a.temp_buffers)
        print(f"libtpu's assignment: parameters {a.parameter_bytes / GIB:.3f} GiB, outputs {a.output_bytes / GIB:.3f}, "
              f"temp {a.temp_bytes / GIB:.3f}; live peak of the temp {sum(b.size for b in live) / GIB:.3f} GiB "
              f"at schedule position {at}, {len(live)} buffers; its buffers packed best fit in birth order "
              f"{replayed_bytes(a.temp_buffers) / GIB:.3f} GiB; the largest at the peak:")
        for b in live[:args.buffers]:
            print(f"  {b.size / MIB:9.1f} MiB  live {b.start}-{b.end}  {', '.join(b.values[:3])}")
        shapes = _shapes(dump, [v for b in live[:args.buffers] for v in b.values[:1]])
        for name, shape in shapes.items():
            print(f"  {name} = {shape}")

    raise SystemExit(compile_until_assignment(lowered, read))


def _shapes(dump: str, names: list[str]) -> dict[str, str]:
    """The result shape and producer of each named instruction in the optimized module."""
    text = next(Path(dump).glob("*after_optimizations.txt")).read_text()
    found = {}
    for name in names:
        base = name.split("{")[0]
        marker = f"%{base} = "
        i = text.find(marker)
        if i >= 0:
            line = text[i + len(marker):text.find("\n", i)]
            found[base] = line.split(", metadata=")[0][:160]
    return found


if __name__ == "__main__":
    main()
