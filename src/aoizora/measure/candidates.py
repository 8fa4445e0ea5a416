"""`aoizora measure --per-device` and `--splash`: a request's or plan's candidates timed on the chip
present, each beside what aoizora predicts for it.

For each strategy, `per_device_rows` times one device's program (`per_device`: the step with
`layers` blocks at the slice's local shapes, collectives replaced by local operations) compiled
for the attached chip at the strategy's own flags, and predicts it with Q2's compute of the very
module the chip's compiler produced; `splash_rows` times every splash call of the strategies at
every tile and limit the tile search weighs (`splash_calls`). Both need a TPU on this host
(`chip.tpu_device` refuses otherwise); the slice is only described (compile-only devices), so a
host with one chip measures plans made for any slice of its generation.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aoizora.errors import MeasureError
from aoizora.measure import chip
from aoizora.measure.local_program import LocalProgram
from aoizora.measure.op_profile import OpTime, by_kind, op_rows, profile_ops
from aoizora.measure.per_device import (
    kernel_cost_hook,
    per_device_program,
    predicted_compute_seconds,
    strategy_flags,
    with_layers,
)
from aoizora.measure.splash_calls import SplashCase, splash_cases

if TYPE_CHECKING:
    from aoizora.models.wan.space.space import WanSpace
    from aoizora.models.wan.transformer.strategy import Strategy
    from aoizora.toolchain import CompilerFlags
    from aoizora.topology import HardwareProfile, Topology

Say = Callable[[str], None]


def check_generation(topology: Topology) -> None:
    """Refuse (MeasureError) a slice of another generation than the attached chip's."""
    device = chip.tpu_device()
    kinds = topology.hardware.device_kinds
    if kinds and device.device_kind not in kinds:
        raise MeasureError(f"the attached chip is a {device.device_kind!r}, but the plan is for {topology.name} "
                           f"({'/'.join(kinds)}); measure on a chip of the slice's generation")


def per_device_rows(space: WanSpace, topology: Topology, strategies: list[Strategy], *, layers: int = 1,
                    runs: int = 3, flags: CompilerFlags | None = None, workers: int = 1, say: Say = print,
                    on_row: Callable[[list[dict[str, Any]]], None] | None = None,
                    op_profile: bool = False) -> list[dict[str, Any]]:
    """One row per strategy: its per-device program with `layers` blocks, measured and predicted
    (`on_row` sees the rows so far after each, e.g. to keep a partial file). `workers` programs are
    made and compiled at once (`chip.compiled_in_order`), then timed one by one. With
    `op_profile`, each row also has `ops`: every operation timed on the chip under the profiler
    beside its predicted time (`op_profile.op_rows`)."""
    check_generation(topology)
    device = chip.tpu_device()
    small = with_layers(space, layers)
    hw = topology.hardware

    def compile_one(st: Strategy) -> Callable[[], tuple[dict[str, str], LocalProgram, chip.ChipProgram]]:
        def job() -> tuple[dict[str, str], LocalProgram, chip.ChipProgram]:
            options = strategy_flags(small, st, flags).compiler_options()
            local = per_device_program(small, st, topology, flags)
            return options, local, chip.compile_module(local.text, options, device)
        return job

    rows = []
    compiled = chip.compiled_in_order([compile_one(st) for st in strategies], workers)
    for i, (st, (options, local, program)) in enumerate(zip(strategies, compiled, strict=True)):
        timing, op_times = _timed(program, runs, op_profile)
        hook = kernel_cost_hook(small, st, topology)
        predicted = predicted_compute_seconds(program.text, hw, hook) if program.text is not None else None
        row = {"key": st.key(), "layers": layers, "compiler_options": options,
               "replaced": local.replaced_json(), "predicted": predicted, **timing.to_json()}
        if isinstance(op_times, str):
            row["ops_error"] = op_times
        elif op_times is not None and program.text is not None:
            row["ops"] = op_rows(program.text, op_times, hw, hook)
            row["ops_by_kind"] = {kind: {"predicted_s": predicted_s, "measured_s": measured_s}
                                  for kind, (predicted_s, measured_s) in by_kind(row["ops"]).items()}
        del program
        rows.append(row)
        med = timing.median_seconds
        say(f"[{i + 1}/{len(strategies)}] {st.key()}: "
            + (f"refused ({timing.refused})" if med is None else
               f"{med * 1e3:.2f} ms measured, {predicted['seconds'] * 1e3:.2f} ms predicted" if predicted else ""))
        if on_row is not None:
            on_row(rows)
    return rows


def _timed(program: chip.ChipProgram, runs: int, op_profile: bool
           ) -> tuple[chip.Timing, dict[str, OpTime] | str | None]:
    """The program's timing on the chip and, with `op_profile`, its operations' times per run
    (profiled after the timed runs, on the same inputs), or why the profile could not be read
    (the timing stands without it)."""
    if not op_profile or program.make_run is None:
        return chip.time_compiled(program, runs), None
    run = program.make_run()
    timing = chip.time_runs(run, runs, warmup=1)
    timing.compile_seconds = program.compile_seconds
    try:
        return timing, profile_ops(run)
    except MeasureError as exc:
        return timing, str(exc)


def splash_rows(space: WanSpace, topology: Topology, strategies: list[Strategy], *, runs: int = 5,
                workers: int = 1, say: Say = print, on_row: Callable[[list[dict[str, Any]]], None] | None = None
                ) -> list[dict[str, Any]]:
    """One row per distinct splash call, tile and limit the strategies' tile search weighs
    (`workers` compiled at once, then timed one by one)."""
    check_generation(topology)
    return time_splash_cases(splash_cases(space, strategies), topology.hardware, runs=runs, workers=workers,
                             say=say, on_row=on_row)


def time_splash_cases(cases: list[SplashCase], hw: HardwareProfile, *, runs: int = 5, workers: int = 1,
                      say: Say = print, on_row: Callable[[list[dict[str, Any]]], None] | None = None
                      ) -> list[dict[str, Any]]:
    """One row per splash case: measured on the chip (compiled `workers` at a time), predicted by
    `hw`'s splash model."""
    device = chip.tpu_device()
    jobs = [lambda case=case: chip.compile_splash_case(case, device) for case in cases]
    rows = []
    for i, (case, program) in enumerate(zip(cases, chip.compiled_in_order(jobs, workers), strict=True)):
        timing = chip.time_compiled(program, runs)
        del program
        rows.append({**case.to_json(), "predicted_seconds": case.predicted_seconds(hw), **timing.to_json()})
        med = timing.median_seconds
        say(f"[{i + 1}/{len(cases)}] {case.call.label()} {case.blocks.describe()} limit {case.limit_kib}: "
            + ("refused" if med is None else f"{med * 1e3:.2f} ms measured, "
                                              f"{case.predicted_seconds(hw) * 1e3:.2f} ms predicted"))
        if on_row is not None:
            on_row(rows)
    return rows
