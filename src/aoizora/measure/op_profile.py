"""Each operation of a program timed on the chip, beside the compiler's estimate for it.

`profile_ops` runs a program on the chip under JAX's profiler and reads the trace's TPU device
plane: its "XLA Ops" line holds one event per executed HLO instruction, named by the
instruction's text in the compiled module (an instruction inside a loop body once per trip). `device_op_times` sums them
per name and per run. `op_rows` joins them with the compiled module's nodes (`aoizora.hlo`):
each node's measured time beside its predicted one (the compiler's cycle estimate at the
generation's clock, or the hook's cost of an opaque kernel, times its trips), with what the
calibration of the fusions' estimate groups it by: opcode, fusion kind, and what bounds it on its
roofline (`per_device.fusion_bound`). An event no node names is kept as a row of its own.
`by_kind` sums a program's rows per kind of estimate (`aoizora.hlo.program.estimate_kind`).
"""

from __future__ import annotations

import glob
import os
import tempfile
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aoizora.errors import MeasureError

if TYPE_CHECKING:
    from aoizora.hlo.program import OpaqueCost, OpaqueOp
    from aoizora.topology import HardwareProfile

#: the trace line of a TPU device plane that holds one event per executed HLO instruction
OPS_LINE = "XLA Ops"
#: the device plane read: the first TPU (the one `chip.tpu_device` measures on)
DEVICE_PLANE = "/device:TPU:0"


@dataclass(frozen=True)
class OpTime:
    """One instruction's time on the chip per run of its program, and its events per run."""

    seconds: float
    count: float


def device_op_times(planes: Iterable[Any], runs: int, plane: str = DEVICE_PLANE,
                    line: str = OPS_LINE) -> dict[str, OpTime]:
    """Per instruction name, the summed duration and count of `line`'s events on `plane`,
    divided by `runs`. `planes` are profiler planes (`jax.profiler.ProfileData.planes`: each with
    `name` and `lines`, a line with `name` and `events`, an event with `name` and `duration_ns`).
    MeasureError where the trace has no such line (a profiler that recorded no device ops)."""
    if runs < 1:
        raise MeasureError(f"a profile covers at least one run, not {runs}")
    for p in planes:
        if p.name != plane:
            continue
        for ln in p.lines:
            if ln.name != line:
                continue
            totals: dict[str, list[float]] = {}
            for event in ln.events:
                entry = totals.setdefault(instruction_name(event.name), [0.0, 0.0])
                entry[0] += float(event.duration_ns)
                entry[1] += 1
            return {name: OpTime(seconds=ns * 1e-9 / runs, count=n / runs) for name, (ns, n) in totals.items()}
    raise MeasureError(f"the profile has no {line!r} line on {plane}: the profiler recorded no operations of the "
                       "chip (is the program running on a TPU?)")


def instruction_name(event_name: str) -> str:
    """The instruction an event of the ops line ran: libtpu names each event by the
    instruction's text (`%fusion.3 = bf16[...] fusion(...), kind=kOutput, ...`), others by its
    name alone."""
    if event_name.startswith("%") and " = " in event_name:
        return event_name[1:event_name.index(" = ")]
    return event_name


def profile_ops(run: Callable[[], Any], runs: int = 2) -> dict[str, OpTime]:
    """Run `run` (a dispatch returning arrays; warmed up already) `runs` times under JAX's
    profiler and return each instruction's time per run on the chip (`device_op_times`)."""
    import jax
    from jax.profiler import ProfileData

    with tempfile.TemporaryDirectory(prefix="aoizora-profile-") as folder:
        with jax.profiler.trace(folder):
            for _ in range(runs):
                jax.block_until_ready(run())
        traces = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
        if not traces:
            raise MeasureError("JAX's profiler wrote no trace; per-operation times need its device tracer")
        return device_op_times(ProfileData.from_file(traces[0]).planes, runs)


def op_rows(compiled_text: str, times: dict[str, OpTime], hardware: HardwareProfile,
            opaque_cost: Callable[[OpaqueOp], OpaqueCost | None] | None = None) -> list[dict[str, Any]]:
    """One row per costed node of the compiled module (loops and collectives' halves aside) and
    per measured event no node names: `name`, `opcode`, `fusion_kind`, `bound` (`mxu`/`hbm`, for
    fusions), `trips`, `flops` and `hbm_bytes` per trip, `estimated_cycles` (the compiler's, per
    trip), `estimated_s` (Q2's compute of the node times its trips; None where the compiler
    printed no estimate and no hook costs it), `measured_s` and `events` per run (0 where the chip
    ran it in no event of its own)."""
    from aoizora.hlo import build_program
    from aoizora.hlo.program import NodeKind
    from aoizora.measure.per_device import fusion_bound

    program = build_program(compiled_text, opaque_cost=opaque_cost)
    rows, named = [], set()
    for node in program.nodes:
        if node.kind == NodeKind.LOOP:
            continue
        named.add(node.name)
        costed = (node.seconds is not None or node.estimated_cycles is not None
                  or (node.kind == NodeKind.OPAQUE and node.kernel is not None))
        measured = times.get(node.name, OpTime(0.0, 0.0))
        rows.append({"name": node.name, "opcode": node.opcode, "kind": node.kind.value,
                     "fusion_kind": node.fusion_kind,
                     "bound": fusion_bound(node.flops, node.hbm_bytes, hardware) if node.opcode == "fusion" else None,
                     "trips": node.multiplicity, "flops": node.flops, "hbm_bytes": node.hbm_bytes,
                     "estimated_cycles": node.estimated_cycles,
                     "estimated_s": node.compute_seconds(hardware) * node.multiplicity if costed else None,
                     "measured_s": measured.seconds, "events": measured.count})
    rows += [{"name": name, "opcode": None, "kind": "unnamed", "fusion_kind": None, "bound": None, "trips": None,
              "flops": None, "hbm_bytes": None, "estimated_cycles": None, "estimated_s": None,
              "measured_s": t.seconds, "events": t.count}
             for name, t in sorted(times.items()) if name not in named]
    return rows


def by_kind(ops: list[dict[str, Any]], estimate: Callable[[dict[str, Any]], float | None] | None = None
            ) -> dict[str, tuple[float, float]]:
    """A program's `op_rows` summed per kind: kind -> (predicted seconds, chip seconds) per run.
    Kinds are `estimate_kind`'s for instructions with a prediction, `kernel` for opaque calls (the
    splash calls) and `unestimated` for the rest, whose chip time Q2 leaves out. `estimate` reads
    a row's prediction (default: its `estimated_s`, Q2's time)."""
    from aoizora.hlo import estimate_kind

    read = estimate or (lambda op: op["estimated_s"])
    sums: dict[str, list[float]] = {}
    for op in ops:
        predicted = read(op)
        kind = ("kernel" if op["kind"] == "opaque" else "unestimated" if predicted is None
                else estimate_kind(op["opcode"], op["fusion_kind"]))
        entry = sums.setdefault(kind, [0.0, 0.0])
        entry[0] += predicted or 0.0
        entry[1] += op["measured_s"]
    return {kind: (p, m) for kind, (p, m) in sorted(sums.items())}
