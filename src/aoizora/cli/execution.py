"""Commands that read a plan or run the grid: `run`, `measure`, `bench`, `explain`, `export`."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

import click

from aoizora.cli.base import (
    MAX_STEPS,
    _libtpu_args_option,
    _Seconds,
    _workers_option,
    cli,
    print_json,
)
from aoizora.cli.paths import _check_output_dir, _check_outputs_apart
from aoizora.defaults import (
    DEFAULT_COMPILE_TIMEOUT_S,
    DEFAULT_TOP_K,
    MEASURE_COMPILE_WORKERS,
)


def _run_report(report, title: str) -> None:
    click.echo(
        f"{title}: {report.steps} step(s) on {report.platform} ({report.config}); warm-up steps with compile "
        f"{report.compile_seconds:.2f} s; median {report.median_step_seconds * 1e3:.2f} ms/step "
        f"(all: {', '.join(f'{t * 1e3:.2f}' for t in report.step_seconds)} ms)"
    )
    if not report.on_planned_slice:
        click.echo("note: no TPU here, so these timings are of a small CPU stand-in, not of a TPU")


@cli.command()
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False), help="A plan from `aoizora plan`.")
@click.option("--steps", type=click.IntRange(min=1, max=MAX_STEPS), default=3, show_default=True)
@click.option("--check", is_flag=True, help="Compare with the same steps on a single device.")
@click.option("--checkpoint", type=click.Path(), default=None, help="diffusers WanTransformer3DModel weights.")
@click.option("--distributed", is_flag=True, help="Call jax.distributed.initialize() (multi-host slices).")
def run(plan_path: str, steps: int, check: bool, checkpoint: str | None, distributed: bool) -> None:
    """Run denoising steps of the planned model with the plan's mesh and report time per step."""
    from aoizora.plan import load_plan
    from aoizora.runtime.plan_run import run_plan

    report = run_plan(load_plan(plan_path), steps=steps, check=check, checkpoint=checkpoint, distributed=distributed)
    _run_report(report, "run")
    if check:
        ok = report.check_relative_error is not None and report.check_relative_error < 1e-4
        click.echo(f"check against a single device: relative error {report.check_relative_error:.2e} "
                   f"({'ok' if ok else 'MISMATCH'})")
        if not ok:
            sys.exit(1)


@cli.command()
@click.option("--plan", "plan_path", default=None, type=click.Path(dir_okay=False),
              help="A plan from `aoizora plan`: its strategy (with --per-device/--splash, also the Stage 1 Top-K "
                   "it kept).")
@click.option("--model", default=None, metavar="MODEL", help="With --per-device/--splash and no --plan: the model of "
              "the request whose Stage 1 Top-K is measured.")
@click.option("--topology", "topology_name", default=None, metavar="TOPO",
              help="The slice the request is planned for, e.g. v5e:2x4 (any slice of the attached chip's generation).")
@click.option("--resolution", default=None, help="480p, 720p or WIDTHxHEIGHT.  [default: 720p]")
@click.option("--frames", type=int, default=None, help="Video frames (4n+1).  [default: 81]")
@click.option("--top-k", type=click.IntRange(min=1), default=8, show_default=True,
              help="With a request: Stage 1's best strategies measured.")
@click.option("--strategy", "strategy_keys", multiple=True, metavar="KEY",
              help="Measure this strategy (its key, as plans name it; repeatable) instead of Stage 1's Top-K.")
@click.option("--per-device", is_flag=True, help="Time each strategy's per-device program (the slice's local shapes, "
              "collectives replaced by local operations) on the attached chip, beside Q2's compute for it.")
@click.option("--splash", is_flag=True, help="Time every splash call of the strategies at each tile and scoped-VMEM "
              "limit the tile search weighs, beside the splash model.")
@click.option("--layers", type=click.IntRange(min=1), default=1, show_default=True,
              help="With --per-device: transformer blocks in each program.")
@click.option("--op-profile", is_flag=True, help="With --per-device: also time each operation of each program "
              "under JAX's profiler, beside the compiler's estimate for it (the JSON's `ops`).")
@click.option("--runs", type=click.IntRange(min=1, max=100), default=3, show_default=True,
              help="With --per-device/--splash: timed runs of each program after a warm-up.")
@click.option("--workers", type=click.IntRange(min=1), default=MEASURE_COMPILE_WORKERS, show_default=True,
              help="With --per-device/--splash: programs compiled at once (threads; each batch is compiled "
                   "before any of it is timed, so no compile runs beside a timing).")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None,
              help="With --per-device/--splash: write measured against predicted here (JSON).")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None,
              help="With --per-device/--splash: also write an HTML page of measured against predicted here.")
@click.option("--steps", type=click.IntRange(min=1, max=MAX_STEPS), default=5, show_default=True,
              help="Without --per-device/--splash: timed steps (after warm-up).")
@click.option("--checkpoint", type=click.Path(), default=None)
@click.option("--distributed", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
@_libtpu_args_option
def measure(plan_path: str | None, model: str | None, topology_name: str | None, resolution: str | None,
            frames: int | None, top_k: int, strategy_keys: tuple[str, ...], per_device: bool, splash: bool,
            layers: int, op_profile: bool, runs: int, workers: int, out_path: str | None, report_dir: str | None,
            steps: int, checkpoint: str | None, distributed: bool, as_json: bool, libtpu_args: str | None) -> None:
    """Time a plan on the devices present: its whole steps (default), or, with --per-device and
    --splash, its candidates' per-device programs and splash calls on the attached chip, which may
    be fewer chips than the slice planned for."""
    if op_profile and not per_device:
        raise click.UsageError("--op-profile times the operations of --per-device programs; add --per-device")
    if not (per_device or splash):
        if plan_path is None:
            raise click.UsageError("give --plan PLAN (or --per-device/--splash with a plan or a request)")
        from aoizora.plan import load_plan
        from aoizora.runtime.plan_run import run_plan

        report = run_plan(load_plan(plan_path), steps=steps, checkpoint=checkpoint, distributed=distributed)
        if as_json:
            print_json({"platform": report.platform, "on_planned_slice": report.on_planned_slice,
                        "config": report.config, "median_step_seconds": report.median_step_seconds,
                        "step_seconds": report.step_seconds, "compile_seconds": report.compile_seconds})
        else:
            _run_report(report, "measure")
        return
    from aoizora.cli.measuring import measure_candidates

    measure_candidates(plan_path=plan_path, model=model, topology_name=topology_name, resolution=resolution,
                       frames=frames, top_k=top_k, strategy_keys=strategy_keys, per_device=per_device, splash=splash,
                       layers=layers, runs=runs, workers=workers, out_path=out_path, report_dir=report_dir,
                       as_json=as_json, libtpu_args=libtpu_args, op_profile=op_profile)


@cli.command()
@click.option("--quick", is_flag=True,
              help="One small cell (v5e:2x2, 480p, 21 frames), Top-2, oracle over the compiled strategies only.")
@click.option("--grid", "grid_name", type=click.Choice(["tuning", "held-out"]), default="tuning", show_default=True,
              help="Which grid: the tuning grid (v5e, where the defaults were chosen) or the held-out grid (v6e 14B, "
                   "v5e 1.3B; nothing was tuned on it).")
@click.option("--cell", "cells", multiple=True, metavar="TOPO/RES/FRAMES[/MODEL]",
              help="Run only these cells, e.g. v5e:2x4/720p/81 (repeatable). Default: the whole grid.")
@click.option("--out", "out_dir", default="bench-out", show_default=True, type=click.Path(file_okay=False),
              help="Directory for cells/*.json, results.json, results.csv, table.md and plots.")
@click.option("--top-k", type=click.IntRange(min=1), default=None,
              help=f"aoizora's Top-K (default {DEFAULT_TOP_K}; 2 with --quick).")
@click.option("--no-oracle", is_flag=True, help="Do not compile every legal strategy (no recall, partial oracle).")
@click.option("--exhaustive-oracle", is_flag=True,
              help="Compile every legal strategy, also those whose Q1 (a lower bound) proves they cannot win.")
@click.option("--measure", is_flag=True, help="Time the plans on the devices present instead of simulating them.")
@click.option("--measure-steps", type=click.IntRange(min=1, max=MAX_STEPS), default=5, show_default=True)
@click.option("--fresh", is_flag=True, help="Recompute cells even if --out holds results with the same options.")
@click.option("--report-only", is_flag=True,
              help="Run nothing: tabulate and plot the cells already in --out/cells (all of them unless --cell or "
                   "--quick), whatever their oracle sweep and K; cells computed by another version of aoizora are "
                   "marked as such.")
@click.option("--compile-timeout", type=_Seconds(), default=DEFAULT_COMPILE_TIMEOUT_S, show_default=True,
              help="CPU seconds per TPU compile (its process's, so a busy host changes no plan; on Ray: seconds).")
@_workers_option
@_libtpu_args_option
def bench(quick: bool, grid_name: str, cells: tuple[str, ...], out_dir: str, top_k: int | None, no_oracle: bool,
          exhaustive_oracle: bool, measure: bool, measure_steps: int, fresh: bool, report_only: bool,
          compile_timeout: float, workers: int, executor: str, ray_cpus_per_compile: float | None,
          libtpu_args: str | None) -> None:
    """aoizora against the expert deployment, a logical-only search and the oracle, over the grid."""
    from rich.console import Console

    if measure:
        from aoizora.runtime.plan_run import ensure_host_devices

        ensure_host_devices(16)  # CPU stand-in for the largest grid slice; ignored on a TPU host
    from aoizora.evaluation.bench import (
        GRIDS,
        BenchOptions,
        Cell,
        markdown,
        output_files,
        parse_cell,
        quick_grid,
        run_bench,
    )
    from aoizora.stage2 import executor_from_spec
    from aoizora.toolchain import CompilerFlags, environment_flags

    _check_output_dir(out_dir, "--out", output_files(out_dir))
    grid: list[Cell] | None = ([parse_cell(c) for c in cells] if cells
                               else (quick_grid() if quick else GRIDS[grid_name]()))
    if report_only and not cells and not quick:
        grid = None  # every finished cell in --out
    opts = BenchOptions(top_k=top_k or (2 if quick else DEFAULT_TOP_K), oracle=not (quick or no_oracle),
                        oracle_bound=not exhaustive_oracle, measure=measure, measure_steps=measure_steps,
                        compile_timeout_s=compile_timeout,
                        flags=environment_flags().merged(CompilerFlags.parse(libtpu_args)))
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 150)
    with executor_from_spec(executor, workers, cpus_per_compile=ray_cpus_per_compile) as pool:
        docs = run_bench(grid, opts, out_dir, resume=not fresh, console=console, log=lambda m: console.print(m),
                         run_missing=not report_only, executor=pool)
    click.echo(markdown(docs))
    click.echo(f"wrote {out_dir}/results.json, results.csv, table.md, speedups.png, q2_vs_sim.png")


@cli.command()
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for index.html.")
def explain(plan_path: str, out_dir: str) -> None:
    """An HTML report of a plan: link-load heatmaps, strategies and placements, a step timeline."""
    from aoizora.plan import load_plan
    from aoizora.report.html import report_files, write_report

    _check_output_dir(out_dir, "--out", report_files(out_dir))
    _check_outputs_apart([("--out", out_dir, report_files(out_dir))], inputs=(("the plan", plan_path),))
    path = write_report(load_plan(plan_path), out_dir)
    click.echo(f"wrote {path}")


@cli.command()
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--to", "framework", type=click.Choice(["maxdiffusion"]), required=True,
              help="The framework to run it with.")
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="Directory for the launcher, its device module, the run's JSON and command.sh.")
@click.option("--json", "as_json", is_flag=True, help="Print what was exported as JSON.")
def export(plan_path: str, framework: str, out_dir: str, as_json: bool) -> None:
    """Export a plan to run with MaxDiffusion: its generate_wan.py overrides, LIBTPU_INIT_ARGS, and a
    launcher that puts the plan's device order into MaxDiffusion's mesh."""
    from aoizora.export import exported_files, write_maxdiffusion_export
    from aoizora.plan import load_plan

    _check_output_dir(out_dir, "--out", exported_files(out_dir))
    _check_outputs_apart([("--out", out_dir, exported_files(out_dir))], inputs=(("the plan", plan_path),))
    plan = load_plan(plan_path)
    run = write_maxdiffusion_export(plan, out_dir)
    folder = shlex.quote(out_dir.rstrip("/") or out_dir)  # safe to copy and paste, whatever the path holds
    if as_json:
        print_json({**run.to_json(), "generate_wan": run.generate_wan_line(), "launcher": run.launcher_line(folder)})
        return
    click.echo(f"wrote {shlex.quote(str(Path(out_dir, 'command.sh')))} "
               f"(MaxDiffusion {run.to_json()['maxdiffusion']['commit'][:8]})")
    click.echo(run.launcher_line(folder))
    for note in run.differences:
        click.echo(f"note: {note}", err=True)
