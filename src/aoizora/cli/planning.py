"""`aoizora plan` and `aoizora demo`: plan a Wan model on a TPU slice."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

import click

from aoizora.cli.base import (
    _libtpu_args_option,
    _ring_options,
    _Seconds,
    _workers_option,
    cli,
    print_json,
)
from aoizora.cli.paths import _check_output_dir, _check_output_file, _check_outputs_apart
from aoizora.defaults import (
    DEFAULT_COMPILE_TIMEOUT_S,
    DEFAULT_COMPILE_WORKERS,
    DEFAULT_MAX_VIDEOS_PER_REPLICA,
    DEFAULT_TOP_K,
    DEFAULT_VERIFY_TOP,
)
from aoizora.errors import ArgumentError, PlanningError


@cli.command()
@click.option("--out", "out_dir", default="demo-out", show_default=True, type=click.Path(file_okay=False))
@click.pass_context
def demo(ctx: click.Context, out_dir: str) -> None:
    """The main job on its embedded default: plan Wan 2.1 14B, 720p, 81 frames on v5e:2x4, and
    export the plan to run with MaxDiffusion."""

    # Top-3 keeps the demo to a few 14B compiles (each takes minutes on a 2-core host);
    # `aoizora plan` itself defaults to the Top-K the recall study chose.
    ctx.invoke(
        plan, model="wan2.1-t2v-14b", topology_name="v5e:2x4", resolution="720p", frames=81, maxdiffusion_command=None,
        kernel_profile=None, program="aoizora",
        export_to=("maxdiffusion", os.path.join(out_dir, "maxdiffusion")), top_k=3,
        out_path=os.path.join(out_dir, "plan.json"), report_dir=os.path.join(out_dir, "report"), as_json=False,
        stage1_only=False, no_cache=False, compile_timeout=DEFAULT_COMPILE_TIMEOUT_S, verify_top=DEFAULT_VERIFY_TOP,
        check_limits=True,
        time_budget=None, workers=DEFAULT_COMPILE_WORKERS, executor="local", ray_cpus_per_compile=None,
        libtpu_args=None, expert_residency="both", vae_decode=True, ring_order="reordering-map",
        ring_direction="auto", objective="latency", max_videos_per_replica=None,
    )


@cli.command()
@click.option("--model", default=None, metavar="MODEL",
              help="wan2.1-t2v-1.3b, wan2.1-t2v-14b, wan2.1-i2v-14b, wan2.2-t2v-a14b, wan2.2-i2v-a14b or "
                   "wan2.2-ti2v-5b (required unless --from-maxdiffusion names its config).")
@click.option("--topology", "topology_name", required=True, metavar="TOPO", help="The TPU slice, e.g. v5e:2x4.")
@click.option("--resolution", default=None, help="480p, 720p or WIDTHxHEIGHT.  [default: 720p]")
@click.option("--frames", type=int, default=None, help="Video frames (4n+1).  [default: 81]")
@click.option("--from-maxdiffusion", "maxdiffusion_command", metavar="COMMAND", default=None,
              help="A MaxDiffusion generate_wan.py command line you run today (with its LIBTPU_INIT_ARGS=...): "
                   "plan its model and video, and compare the plan with it.")
@click.option("--kernel", "kernel_profile", type=click.Choice(["jax-splash", "tokamax-splash", "maxdiffusion-custom",
                                                               "maxdiffusion-custom-fixed-m"]),
              default=None, help="The attention kernel the deployment runs, which costs every candidate's attention "
              "(programs compile with JAX's splash): JAX's splash, tokamax's, or MaxDiffusion's own kernels (plain or "
              "fixed-m softmax). Documented deployments of that kernel are compared.  [default: jax-splash, or the "
              "kernel of --from-maxdiffusion]")
@click.option("--program", type=click.Choice(["aoizora", "maxdiffusion"]), default="aoizora", show_default=True,
              help="The program Stage 2 compiles and costs for each candidate: aoizora's Wan step, or MaxDiffusion's "
                   "own transformer step (Wan 2.1 T2V, Wan 2.2 T2V-A14B) built through its classes with the overrides "
                   "the export writes "
                   "(needs MaxDiffusion importable, or MAXDIFFUSION_DIR naming its checkout). Stage 1 ranks on "
                   "aoizora's program either way.")
@click.option("--export", "export_to", type=(click.Choice(["maxdiffusion"]), click.Path(file_okay=False)),
              default=None, metavar="FRAMEWORK DIR", help="Also export the plan to run with FRAMEWORK into DIR "
              "(as `aoizora export`).")
@click.option("--top-k", type=click.IntRange(min=1), default=DEFAULT_TOP_K, show_default=True,
              help="Strategies Stage 1 passes to Stage 2.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="Write the plan here.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None,
              help="Also write the HTML report here.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan (or, with --stage1-only, Stage 1) as JSON.")
@click.option("--stage1-only", is_flag=True, help="Stop after Stage 1: every strategy with verdict, Q1, memory.")
@click.option("--no-cache", is_flag=True,
              help="Plan again even if an identical request is cached (plan, Stage 1 and compile caches unused).")
@click.option("--compile-timeout", type=_Seconds(), default=DEFAULT_COMPILE_TIMEOUT_S, show_default=True,
              help="CPU seconds per TPU compile (its process's, so a busy host changes no plan; on Ray: seconds).")
@click.option("--limit-check/--no-limit-check", "check_limits", default=True, show_default=True,
              help="Before the plan keeps a scoped-VMEM limit its candidates were compiled without (one "
                   "raised by the tile search), compile the leading pair at it and keep whichever is faster by "
                   "Q2: one compile at the raised limit, several times slower than the others on v5e. "
                   "--no-limit-check plans from the default-limit compiles alone.")
@click.option("--verify-top", type=click.IntRange(min=0), default=DEFAULT_VERIFY_TOP, show_default=True,
              help="Best pairs recompiled with their own device order before choosing.")
@click.option("--time-budget", type=_Seconds(), default=None,
              help="Answer within about this many seconds with the best plan found by then (Stage 1's best, "
                   "marked not compiled, if no compile finished); the plan says what was not compiled or "
                   "verified, and is not cached.  [default: plan fully]")
@_workers_option
@_libtpu_args_option
@click.option("--expert-residency", type=click.Choice(["both", "swap"]), default="both", show_default=True,
              help="Two-expert models (Wan 2.2 A14B): both experts in HBM, or one with the other "
                   "copied in from host memory at the boundary.")
@click.option("--vae-decode/--no-vae-decode", default=True, show_default=True,
              help="Compile the model's VAE decode for the slice and cost it, for the plan's video time (one "
                   "compile per slice and video shape, beside Stage 2's, kept in the compile cache); without it "
                   "the video time says the decode was not costed.")
@click.option("--objective", type=click.Choice(["latency", "throughput"]), default="latency", show_default=True,
              help="latency: one video's time on the whole slice. throughput: split the slice into equal replicas "
                   "(sub-slices libtpu accepts, sharing no link), each with its own plan and batch, for the most "
                   "videos per hour.")
@click.option("--max-videos-per-replica", type=click.IntRange(min=1), default=None,
              help="With --objective throughput: the largest batch per replica tried (videos per run).  "
                   f"[default: {DEFAULT_MAX_VIDEOS_PER_REPLICA}]")
@_ring_options
def plan(model: str | None, topology_name: str, resolution: str | None, frames: int | None,
         maxdiffusion_command: str | None, kernel_profile: str | None, program: str,
         export_to: tuple[str, str] | None, top_k: int, out_path: str | None,
         report_dir: str | None, as_json: bool, stage1_only: bool, no_cache: bool, compile_timeout: float,
         check_limits: bool, verify_top: int, time_budget: float | None, workers: int, executor: str,
         ray_cpus_per_compile: float | None,
         libtpu_args: str | None, expert_residency: str, vae_decode: bool, ring_order: str,
         ring_direction: str, objective: str = "latency", max_videos_per_replica: int | None = None) -> None:
    """Plan a Wan model on a TPU slice: Stage 1 (lower, Q1) -> compile Top-K -> placements x Q2."""
    # Over 60 lines (this docstring is the command's --help, so the reason lives here): the checks of
    # the options against each other, then the dispatch to Stage 1 only, a MaxDiffusion deployment,
    # or a plan with its outputs, in the order --help lists them.
    from rich.console import Console

    from aoizora.api import wan_request_space
    from aoizora.cost import Q2Options
    from aoizora.plan import plan_space
    from aoizora.plan.planner import planning_flags
    from aoizora.report.tables import print_plan
    from aoizora.stage2 import executor_from_spec
    from aoizora.topology import get_topology

    if stage1_only and (out_path or report_dir or export_to):
        raise click.UsageError("--stage1-only makes no plan to write; drop --out, --report and --export, "
                               "or drop --stage1-only")
    from aoizora.export import exported_files
    from aoizora.report.html import report_files

    export_dir = export_to[1] if export_to else None
    _check_output_file(out_path, "--out")
    _check_output_dir(report_dir, "--report", report_files(report_dir) if report_dir else ())
    _check_output_dir(export_dir, "--export", exported_files(export_dir) if export_dir else ())
    _check_outputs_apart([("--out", out_path, [Path(out_path)] if out_path else []),
                          ("--report", report_dir, report_files(report_dir) if report_dir else []),
                          ("--export", export_dir, exported_files(export_dir) if export_dir else [])])
    if stage1_only and objective == "throughput":
        raise click.UsageError("--stage1-only ranks one slice's strategies; drop it or drop --objective throughput")
    from aoizora.api import check_objective

    check_objective(objective, maxdiffusion_command, max_videos_per_replica, names=_OPTION_NAMES)
    topo = get_topology(topology_name)
    request = _plan_request(model, resolution, frames, maxdiffusion_command, kernel_profile, topo, program)
    if export_to:
        from aoizora.export import maxdiffusion_config
        from aoizora.models.registry import model_key

        maxdiffusion_config(model_key(request["model"]), field="--model")  # refused before any long work
    space = wan_request_space(request, topo, expert_residency, vae_decode)
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 150)
    k = top_k
    flags = planning_flags(libtpu_args, topo.name)  # checked by libtpu before any long work
    if stage1_only:
        space = space.under_flags(flags)  # as `plan_space` ranks it
        _plan_stage1_only(space, topo, k, as_json, no_cache, console)
        return
    options = Q2Options(ring_order=ring_order, ring_direction=ring_direction)
    try:
        with executor_from_spec(executor, workers, cpus_per_compile=ray_cpus_per_compile) as pool:
            common: dict[str, Any] = dict(
                top_k=k, options=options, compile_timeout_s=compile_timeout, verify_top=verify_top,
                check_limits=check_limits,
                use_cache=not no_cache, progress=not as_json, console=console, libtpu_args=flags, executor=pool,
                time_budget_s=time_budget)
            if objective == "throughput":
                from aoizora.api import plan_wan_throughput

                outcome = plan_wan_throughput(request, topo, expert_residency, vae_decode, max_videos_per_replica,
                                              **common)
            else:
                outcome = plan_space(space, topo, **common)
    except PlanningError:
        _no_fit_hint(space, topo)
        raise
    if out_path:
        outcome.plan.save(out_path)
    if report_dir:
        from aoizora.report.html import write_report

        write_report(outcome.plan, report_dir)
    if export_to:
        from aoizora.export import write_maxdiffusion_export

        write_maxdiffusion_export(outcome.plan, export_to[1])
    if as_json:
        print_json(outcome.plan.data)
    else:
        print_plan(outcome.plan, from_cache=outcome.from_cache, out_path=out_path, report_dir=report_dir)
        if outcome.plan.replicas:
            _replicas_lines(outcome.plan.replicas)
        _user_deployment_line(outcome.plan.data)
        if export_to:
            script = shlex.quote(str(Path(export_to[1], "command.sh")))
            click.echo(f"  exported for MaxDiffusion into {shlex.quote(export_to[1])} (run {script} "
                       "from MaxDiffusion's checkout)")
        if "experts" in outcome.plan.data:
            console.print(_experts_line(outcome.plan.data["experts"]))


def _user_deployment_line(plan: dict) -> None:
    """How the plan compares with the MaxDiffusion command given with --from-maxdiffusion: the
    command's strategy as written (its tile), the verdict, then each note (what was compiled
    otherwise, the keys not modelled)."""
    from aoizora.models.wan.kernels.experts import USER_DEPLOYMENT

    mine = plan.get("workload", {}).get("user_deployment")
    rows = [e for e in plan.get("baselines", {}).get("experts", []) if e.get("name") == USER_DEPLOYMENT]
    for row in rows:
        written = mine["strategy"] if mine else row["strategy"]
        if "step_seconds" in row:
            verdict = (f"predicted {row['step_seconds'] * 1e3:.2f} ms/step; "
                       f"the plan is {row['speedup_of_plan']:.3f}x faster")
        else:
            verdict = f"no time: {row.get('dropped', 'not placed')}"
        click.echo(f"  your MaxDiffusion command ({written}): {verdict}")
        for note in row.get("notes", []):
            click.echo(f"    note: {note}")


def _plan_request(model: str | None, resolution: str | None, frames: int | None, command: str | None,
                  kernel_profile: str | None, topo: Any, program: str = "aoizora") -> dict[str, Any]:
    """wan_space's arguments: the options', or a MaxDiffusion command's (options that disagree refused)."""
    from aoizora.api import wan_request

    if command is None and model is None:
        raise click.UsageError("Missing option '--model' (or give --from-maxdiffusion)")
    try:
        return wan_request(model, resolution, frames, kernel=kernel_profile, from_maxdiffusion=command, topology=topo,
                           names=_OPTION_NAMES, program=program)
    except ArgumentError as exc:  # options that disagree with the command: a usage error, as click's own
        raise click.UsageError(str(exc)) from None


#: how `wan_request` names its arguments here
_OPTION_NAMES = {"model": "--model", "resolution": "--resolution", "frames": "--frames", "kernel": "--kernel",
                 "from_maxdiffusion": "--from-maxdiffusion", "program": "--program", "objective": "--objective",
                 "max_videos_per_replica": "--max-videos-per-replica"}


def _replicas_lines(block: dict) -> None:
    """A throughput plan's choice (split, batch per replica, videos per hour) and every split tried."""
    chips = "; ".join(f"replica {i}: chips {d['chip_ids']}" for i, d in enumerate(block["devices"]))
    click.echo(f"  throughput on {block['slice']}: {block['count']} replica(s) of the plan above, "
               f"{block['videos_per_replica']} video(s) each per run, {block['videos_per_hour']:.2f} videos/h "
               f"({chips})")
    click.echo(f"  splits tried (batch up to {block.get('max_videos_per_replica', '?')} videos per replica):")
    for row in block["splits"]:
        batch = f", {row['videos_per_replica']} video(s)/replica" if "videos_per_replica" in row else ""
        if "not_planned" in row:
            click.echo(f"    {row['split']}{batch}: not planned: {row['not_planned']}")
        else:
            click.echo(f"    {row['split']}{batch}: {row['videos_per_hour']:.2f} videos/h "
                       f"({row['video_seconds']:.1f} s per run; {row['strategy']})")


def _plan_stage1_only(space: Any, topo: Any, top_k: int, as_json: bool, no_cache: bool, console: Any) -> None:
    """`aoizora plan --stage1-only`: Stage 1's ranking (and the space's expert deployments), no compile."""
    from aoizora.plan import cache
    from aoizora.plan.planner import nothing_fits
    from aoizora.stage1 import default_stage1_cache, run_stage1

    result = run_stage1(space, topo, top_k=top_k, progress=not as_json, console=console,
                        cache=None if no_cache or not cache.caches_usable() else default_stage1_cache())
    best = result.ranked[0].candidate.strategy if result.ranked else None
    details = space.plan_details(best, topo) if best is not None else {}
    if as_json:
        print_json({"topology": topo.name, "workload": space.workload(), "counts": result.counts(),
                    "seconds": result.seconds, **details, "strategies": [e.to_json(space) for e in result.entries]})
    elif details:
        console.print(_experts_line(details["experts"]))
    if not result.kept:
        _no_fit_hint(space, topo)
        raise nothing_fits(space, topo, result)


def _experts_line(experts: dict) -> str:
    gib = experts["expert_bytes_per_device"] / 2**30
    if experts["residency"] == "both":
        return f"experts: both resident, {2 * gib:.2f} GiB of weights per device ({gib:.2f} GiB each)"
    swap = experts["swap_seconds_per_video"]
    cost = f"{swap:.2f} s per video ({experts['swaps_per_video']} copies of {gib:.2f} GiB per chip at " \
           f"{experts['host_to_device_Bps'] / 1e9:.0f} GB/s)" if swap is not None else "transfer time unknown " \
           f"({experts['host_to_device_source']})"
    return f"experts: one resident, the other swapped in from host memory: {cost}"


def _no_fit_hint(space, topo) -> None:
    """When both experts do not fit resident, say what swapping one would cost."""
    from aoizora.models.wan.space.pipeline_space import WanPipelineSpace, swap_estimate

    if isinstance(space, WanPipelineSpace) and space.residency == "both" and len(space.pipeline.experts) > 1:
        click.echo(f"note: {swap_estimate(space, topo)}", err=True)
