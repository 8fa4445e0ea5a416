"""Command line: `aoizora topology`, `aoizora placements`, `aoizora demo`.

Library code raises `AoizoraError`s; here they become one line on stderr and exit code 2.
libtpu's no-TPU host-detection noise is filtered from stderr (see `stderr_filter`).
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import click

from aoizora.defaults import (
    DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_COMPILE_WORKERS, DEFAULT_RAY_CPUS_PER_COMPILE, DEFAULT_TOP_K, DEFAULT_VERIFY_TOP,
)
from aoizora.errors import AoizoraError, OutputPathError, PlanningError
from aoizora.interrupts import Terminated, interrupts_not_lost

EXIT_BAD_INPUT = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a command stopped by Ctrl-C
EXIT_TERMINATED = 143  # 128 + SIGTERM, what a job scheduler's stop reports


def _usage_line(exc: click.UsageError) -> str:
    """A click usage error as one line that says where to look."""
    command = exc.ctx.command_path if exc.ctx is not None else "aoizora"
    return f"aoizora: error: {exc.format_message().rstrip('.')}; see `{command} --help`"


class _Group(click.Group):
    """Turns aoizora's typed errors and bad options into one-line messages with exit code 2; Ctrl-C
    into 130, SIGTERM into 143."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:  # the group's own options
            click.echo(_usage_line(exc), err=True)
            raise click.exceptions.Exit(EXIT_BAD_INPUT) from None

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with interrupts_not_lost():
                return super().invoke(ctx)
        except AoizoraError as exc:
            click.echo(f"aoizora: error: {exc}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except click.UsageError as exc:  # a subcommand's options or arguments
            click.echo(_usage_line(exc), err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except Terminated:
            click.echo("aoizora: terminated", err=True)
            ctx.exit(EXIT_TERMINATED)
        except KeyboardInterrupt:
            click.echo("aoizora: interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)


def _finite(obj: Any) -> Any:
    """`obj` with every NaN or infinity replaced by None: JSON has no such numbers."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def print_json(obj: Any) -> None:
    """Strict JSON on stdout (no NaN or Infinity: producers say why a number is undefined)."""
    click.echo(json.dumps(_finite(obj), indent=2, allow_nan=False))


class _Seconds(click.ParamType):
    """A positive, finite number of seconds."""

    name = "SECONDS"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds; use e.g. 900", param, ctx)
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r} is not a positive number of seconds; use e.g. 900", param, ctx)
        return seconds


class _PositiveFinite(click.ParamType):
    """A positive, finite number (click's FloatRange lets NaN and infinity through)."""

    name = "NUMBER"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number; use e.g. 1", param, ctx)
        if not math.isfinite(number) or number <= 0:
            self.fail(f"{value!r} is not a positive finite number; use e.g. 1", param, ctx)
        return number


#: Most denoising steps `run`, `measure` and `bench --measure` time: Wan samples with 50 (40 for
#: Wan 2.2), and the scheduler holds a table of every step, so an absurd count fails inside JAX.
MAX_STEPS = 10_000


def _check_output_file(path: str | None, option: str) -> None:
    """Raise OutputPathError unless a file can be written at `path` (checked before any long work)."""
    if path is None:
        return
    if path.endswith(("/", os.sep)):
        raise OutputPathError(f"{option} {path} ends in '/', which names a folder; pass a file path such as "
                              f"{path}plan.json")
    target = Path(path)
    if target.is_dir():
        raise OutputPathError(f"{option} {path} is a directory; pass a file path such as {target / 'plan.json'}")
    if target.exists() and not target.is_file():
        raise OutputPathError(f"{option} {path} is not a regular file (a device, FIFO or socket), which aoizora "
                              "never replaces; pass a file path")
    if target.exists() and not os.access(target, os.W_OK):
        raise OutputPathError(f"{option} {path} cannot be written (permission denied); pass a writable path")
    _check_writable_dir(target.parent, option, path)


def _check_output_dir(path: str | None, option: str, files: list[Path] | tuple[Path, ...] = ()) -> None:
    """Raise OutputPathError unless `path` is (or can be made) a writable directory in which `files`
    (the command writes them) are regular files or do not exist yet."""
    if path is None:
        return
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise OutputPathError(f"{option} {path} exists and is not a directory; pass a directory path")
    for file in files:
        if file.exists() and not file.is_file():
            raise OutputPathError(f"{option} {path} holds {file.name}, which is not a regular file and which aoizora "
                                  "would replace; pass another directory")
    _check_writable_dir(target, option, path)


def _real(path: str | Path) -> str:
    return os.path.realpath(os.path.abspath(path))


def _check_outputs_apart(outputs: list[tuple[str, str | None, list[Path]]],
                         inputs: tuple[tuple[str, str], ...] = ()) -> None:
    """Raise OutputPathError if one output would overwrite an input or another output.

    `outputs` are (option, path given, files written there): a file option writes the path itself, a
    folder option writes its files into the path. Paths are compared after resolving links.
    """
    given = [(option, path, {_real(f) for f in files}) for option, path, files in outputs if path is not None]
    for option, path, written in given:
        for label, source in inputs:
            if _real(source) in written:
                raise OutputPathError(f"{option} {path} would overwrite {label} {source}; pass another path")
    for i, (option, path, written) in enumerate(given):
        for other, other_path, other_written in given[i + 1:]:
            mine, theirs = _real(path), _real(other_path)
            if written & other_written or mine in other_written or theirs in written \
                    or any(theirs.startswith(f + os.sep) for f in written) \
                    or any(mine.startswith(f + os.sep) for f in other_written):
                raise OutputPathError(f"{option} {path} and {other} {other_path} would overwrite each other; "
                                      "pass separate paths")


def _check_writable_dir(directory: Path, option: str, given: str) -> None:
    """The nearest existing ancestor of `directory` must be a directory in which a file can be made.

    Probed by creating (and removing) a file there: permission bits alone do not tell for root, for
    read-only file systems or for network mounts. Nothing is left behind and no folder is created.
    """
    existing = directory if str(directory) else Path(".")
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise OutputPathError(f"{option} {given}: {existing} is not a directory; pass a path inside a directory")
    try:
        fd, probe = tempfile.mkstemp(prefix=".aoizora-probe-", dir=existing)
    except OSError as exc:
        raise OutputPathError(
            f"{option} {given} cannot be written ({existing}: {exc.strerror}); pass a writable path"
        ) from None
    os.close(fd)
    os.unlink(probe)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="aoizora")
def cli() -> None:
    """Topology-aware planning of diffusion-transformer inference on TPU slices."""


@cli.command()
@click.argument("topology_name", metavar="TOPO")
@click.option("--json", "as_json", is_flag=True, help="Print the full description as JSON.")
@click.option(
    "--core-ici", type=click.Choice(["direct", "via-core0"]), default="direct", show_default=True,
    help="TPU7x: how a chip's two cores reach its ICI links. direct: each core drives them itself; "
    "via-core0: core 1's traffic to other chips crosses the die-to-die link first.",
)
def topology(topology_name: str, as_json: bool, core_ici: str) -> None:
    """Chips, directed ICI and die-to-die links and hardware profile of a TPU slice.

    TOPO is named as JAX names it: GENERATION:SHAPE, e.g. v5e:2x4, v6e:4x4, v4:2x2x2, v5p:2x2x4,
    tpu7x:2x2x1 (libtpu accepts tpu7x 2x2x1, 2x2x2, 2x2x4, 2x4x4 and whole 4x4x4 cubes; it refuses
    1x1x1 and 2x1x1). Aliases: v5litepod, v5 (v5p), v6 (v6e), v7x (tpu7x: libtpu itself refuses
    v7x:...). Cloud accelerator types tpu7x-8, -16, -32, -64, -128 (TensorCores) name 2x2x1, 2x2x2,
    2x2x4, 2x4x4 and 4x4x4.
    """
    from aoizora.report.tables import print_topology
    from aoizora.topology import get_topology

    topo = get_topology(topology_name, core_ici)  # type: ignore[arg-type]
    if as_json:
        print_json(topo.to_json())
    else:
        print_topology(topo)


@cli.command()
@click.argument("topology_name", metavar="TOPO")
@click.option("--mesh", "mesh_text", required=True, metavar="NAME=SIZE,...", help="Logical mesh, e.g. sp=2,tp=4.")
@click.option("--json", "as_json", is_flag=True, help="Print the placements as JSON.")
@click.option(
    "--max-candidates",
    type=click.IntRange(min=1),
    default=None,
    help="Refuse spaces larger than this many candidates (default 200000).",
)
def placements(topology_name: str, mesh_text: str, as_json: bool, max_candidates: int | None) -> None:
    """Distinct physical placements of a logical mesh on a TPU slice, jax-default first."""
    from aoizora.placement import MeshSpec, enumerate_placements
    from aoizora.placement.space import DEFAULT_MAX_CANDIDATES
    from aoizora.report.tables import print_placements
    from aoizora.topology import get_topology

    mesh = MeshSpec.parse(mesh_text)
    topo = get_topology(topology_name)
    space = enumerate_placements(topo, mesh, max_candidates=max_candidates or DEFAULT_MAX_CANDIDATES)
    if as_json:
        print_json([p.to_json(topo) for p in space.placements])
    else:
        print_placements(space)


@cli.command()
@click.option("--out", "out_dir", default="demo-out", show_default=True, type=click.Path(file_okay=False))
@click.pass_context
def demo(ctx: click.Context, out_dir: str) -> None:
    """The main job on its embedded default: plan Wan 2.1 14B, 720p, 81 frames on v5e:2x4, and
    export the plan to run with MaxDiffusion."""
    import os

    # Top-3 keeps the demo to a few 14B compiles (each takes minutes on a 2-core host);
    # `aoizora plan` itself defaults to the Top-K the recall study chose.
    ctx.invoke(
        plan, model="wan2.1-t2v-14b", topology_name="v5e:2x4", resolution="720p", frames=81, maxdiffusion_command=None,
        kernel_profile=None,
        export_to=("maxdiffusion", os.path.join(out_dir, "maxdiffusion")), top_k=3,
        out_path=os.path.join(out_dir, "plan.json"), report_dir=os.path.join(out_dir, "report"), as_json=False,
        stage1_only=False, no_cache=False, compile_timeout=DEFAULT_COMPILE_TIMEOUT_S, verify_top=DEFAULT_VERIFY_TOP,
        workers=DEFAULT_COMPILE_WORKERS, executor="local", ray_cpus_per_compile=None, libtpu_args=None,
        expert_residency="both", ring_order="auto", ring_direction="auto",
    )


@cli.command()
@click.argument("file", metavar="FILE", type=click.Path(allow_dash=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
def hlo(file: str, as_json: bool) -> None:
    """Collectives, FLOPs and opaque kernels of a compiled HLO text file ('-' for stdin)."""
    from aoizora.hlo import analyze, summarize

    report = summarize(analyze(_read_text(file)))
    if as_json:
        print_json(report)
        return
    tot = report["totals"]
    click.echo(f"{report['module']}: {report['num_devices']} devices, {tot['loops']} loops")
    for c in report["collectives"]:
        algo = (c["algorithm"] or {}).get("emitter") or "-"
        n_groups = len(c["groups"]) or len(c["source_target_pairs"])
        click.echo(
            f"  {c['kind']:<18} {c['mode']:<12} x{c['count']:<5} {c['bytes_per_device']:>12} B/device"
            f"  {n_groups} groups/pairs  {algo}"
        )
    click.echo(
        f"  total: {tot['collective_bytes_per_device']} collective B/device, "
        f"{tot['flops']:.4g} FLOPs, {tot['estimated_cycles']} estimated cycles"
    )
    for op in report["opaque"]:
        click.echo(f"  opaque: {op['name']} ({op['target']}) x{op['count']}")
    for name in report["unknown_ops"]:
        click.echo(f"  unknown op: {name}")


_RING_OPTIONS = [
    click.option(
        "--ring-order",
        type=click.Choice(["auto", "listed", "best"]),
        default="auto",
        show_default=True,
        help="Ring order the compiler uses: the group's listed order, the best order over its chips, "
        "or best only where the compiled config reports a reordering map.",
    ),
    click.option(
        "--ring-direction",
        type=click.Choice(["auto", "uni", "bi"]),
        default="auto",
        show_default=True,
        help="Ring direction: from the compiled algorithm config, or forced.",
    ),
]


def _ring_options(fn):
    for option in reversed(_RING_OPTIONS):
        fn = option(fn)
    return fn


_EXECUTOR_OPTIONS = [
    click.option(
        "--workers", type=click.IntRange(min=1), default=DEFAULT_COMPILE_WORKERS, show_default=True,
        help="Compiles run at once, each in its own process (default: the host's cores). The plan is the "
        "one a sequential run makes.",
    ),
    click.option(
        "--executor", default="local", show_default=True, metavar="local|ray|ray://HOST:PORT",
        help="Where compiles run: child processes of this one, a Ray cluster on this machine, or a Ray cluster "
        "through its client server (needs pip install 'aoizora[ray]'; its workers must have the same jax, jaxlib, "
        "libtpu, aoizora and LIBTPU_INIT_ARGS/XLA_FLAGS, which is checked).",
    ),
    click.option(
        "--ray-cpus-per-compile", type=_PositiveFinite(), default=None,
        help=f"CPUs a compile reserves on a Ray cluster (default {DEFAULT_RAY_CPUS_PER_COMPILE:g}: a libtpu "
        "compile keeps about one core busy).",
    ),
]


def _workers_option(fn):
    for option in reversed(_EXECUTOR_OPTIONS):
        fn = option(fn)
    return fn

_libtpu_args_option = click.option(
    "--libtpu-args",
    metavar="FLAGS",
    default=None,
    help="libtpu/XLA flags every compile uses, written as LIBTPU_INIT_ARGS writes them (e.g. "
    "'--xla_tpu_enable_async_collective_fusion=true'), on top of those in LIBTPU_INIT_ARGS; recorded in the "
    "plan. Default: only LIBTPU_INIT_ARGS (empty: libtpu's defaults).",
)


@cli.command()
@click.option("--hlo", "hlo_path", required=True, type=click.Path(dir_okay=False), help="Compiled HLO text (- for stdin).")
@click.option("--topology", "topology_name", required=True, metavar="TOPO", help="The slice it was compiled for.")
@click.option("--mesh", "mesh_text", required=True, metavar="NAME=SIZE,...", help="The program's logical mesh.")
@_ring_options
@click.option("--no-sim", is_flag=True, help="Skip the reference simulator (Q2 only).")
@click.option("--json", "as_json", is_flag=True, help="Print the ranking as JSON.")
def rank(hlo_path: str, topology_name: str, mesh_text: str, ring_order: str, ring_direction: str, no_sim: bool, as_json: bool) -> None:
    """Every distinct placement of a compiled program, scored by Q2 and the simulator, best first."""
    from aoizora.cost import Q2Options
    from aoizora.hlo.builder import build_program
    from aoizora.placement import MeshSpec, enumerate_placements
    from aoizora.progress import progress_reporter
    from aoizora.report.tables import print_ranking
    from aoizora.topology import get_topology
    from aoizora.validation.rank import check_program_mesh, rank_placements

    text = _read_text(hlo_path)
    program = build_program(text)
    topo = get_topology(topology_name)
    mesh = MeshSpec.parse(mesh_text)
    mesh.check_fits(topo.num_devices, topo.name)
    check_program_mesh(program, mesh)
    space = enumerate_placements(topo, mesh)
    options = Q2Options(ring_order=ring_order, ring_direction=ring_direction)
    with progress_reporter("scoring placements", len(space.placements), quiet=as_json) as bar:
        rows = rank_placements(program, topo, space.placements, options=options, simulate=not no_sim,
                               progress=bar.advance)
    if as_json:
        print_json({"topology": topo.name, "mesh": str(space.mesh), "placements": [r.to_json(topo) for r in rows]})
    else:
        print_ranking(rows, title=f"{program.module_name} on {topo.name}, mesh {space.mesh}")


@cli.command()
@click.option("--topology", "topology_name", required=True, metavar="TOPO")
@click.option("--mesh", "mesh_text", required=True, metavar="NAME=SIZE,...")
@click.option("--hlo", "hlo_paths", multiple=True, type=click.Path(dir_okay=False),
              help="Compiled HLO files of that mesh (repeatable). Default: the built-in suite.")
@click.option("--suite", type=click.Choice(["micro", "transformer", "all"]), default="all", show_default=True,
              help="Built-in programs compiled for the slice: collective micro-programs, a transformer block.")
@_ring_options
@click.option("--json", "as_json", is_flag=True)
def validate(topology_name: str, mesh_text: str, hlo_paths: tuple[str, ...], suite: str, ring_order: str,
             ring_direction: str, as_json: bool) -> None:
    """Rank agreement of Q2 with the reference simulator over (program, placement) pairs."""
    from aoizora.cost import Q2Options
    from aoizora.hlo.builder import build_program
    from aoizora.placement import MeshSpec, enumerate_placements
    from aoizora.progress import progress_reporter
    from aoizora.report.tables import print_validation
    from aoizora.topology import get_topology
    from aoizora.validation.programs import NamedProgram, default_suite
    from aoizora.validation.rank import check_program_mesh
    from aoizora.validation.rank import validate as run_validation

    topo = get_topology(topology_name)
    spec = MeshSpec.parse(mesh_text)
    space = enumerate_placements(topo, spec)
    if hlo_paths:
        programs = [NamedProgram(path, build_program(_read_text(path))) for path in hlo_paths]
        for named in programs:
            check_program_mesh(named.program, spec)
    else:
        programs = default_suite(topo, spec, suite)
    options = Q2Options(ring_order=ring_order, ring_direction=ring_direction)
    total = len(programs) * len(space.placements)
    with progress_reporter("Q2 and simulator", total, quiet=as_json) as bar:
        report = run_validation(programs, topo, space.placements, options=options, progress=bar.advance)
    if as_json:
        print_json(report.to_json())
    else:
        print_validation(report, title=f"Q2 vs simulator on {topo.name}, mesh {spec}")


@cli.command()
@click.option("--model", default=None, metavar="MODEL",
              help="wan2.1-t2v-1.3b, wan2.1-t2v-14b, wan2.1-i2v-14b, wan2.2-t2v-a14b, wan2.2-i2v-a14b or wan2.2-ti2v-5b "
                   "(required unless --from-maxdiffusion names its config).")
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
@click.option("--export", "export_to", type=(click.Choice(["maxdiffusion"]), click.Path(file_okay=False)),
              default=None, metavar="FRAMEWORK DIR", help="Also export the plan to run with FRAMEWORK into DIR "
              "(as `aoizora export`).")
@click.option("--top-k", type=click.IntRange(min=1), default=DEFAULT_TOP_K, show_default=True,
              help="Strategies Stage 1 passes to Stage 2.")
@click.option("--out", "out_path", type=click.Path(dir_okay=False), default=None, help="Write the plan here.")
@click.option("--report", "report_dir", type=click.Path(file_okay=False), default=None, help="Also write the HTML report here.")
@click.option("--json", "as_json", is_flag=True, help="Print the plan (or, with --stage1-only, Stage 1) as JSON.")
@click.option("--stage1-only", is_flag=True, help="Stop after Stage 1: every strategy with verdict, Q1, memory.")
@click.option("--no-cache", is_flag=True,
              help="Plan again even if an identical request is cached (plan, Stage 1 and compile caches unused).")
@click.option("--compile-timeout", type=_Seconds(), default=DEFAULT_COMPILE_TIMEOUT_S, show_default=True,
              help="Seconds per TPU compile.")
@click.option("--verify-top", type=click.IntRange(min=0), default=DEFAULT_VERIFY_TOP, show_default=True,
              help="Best pairs recompiled with their own device order before choosing.")
@_workers_option
@_libtpu_args_option
@click.option("--expert-residency", type=click.Choice(["both", "swap"]), default="both", show_default=True,
              help="Two-expert models (Wan 2.2 A14B): both experts in HBM, or one with the other "
                   "copied in from host memory at the boundary.")
@_ring_options
def plan(model: str | None, topology_name: str, resolution: str | None, frames: int | None,
         maxdiffusion_command: str | None, kernel_profile: str | None, export_to: tuple[str, str] | None, top_k: int,
         out_path: str | None,
         report_dir: str | None, as_json: bool, stage1_only: bool, no_cache: bool, compile_timeout: float,
         verify_top: int, workers: int, executor: str, ray_cpus_per_compile: float | None, libtpu_args: str | None,
         expert_residency: str, ring_order: str, ring_direction: str) -> None:
    """Plan a Wan model on a TPU slice: Stage 1 (lower, Q1) -> compile Top-K -> placements x Q2."""
    from rich.console import Console

    from aoizora.cost import Q2Options
    from aoizora.models.registry import wan_space
    from aoizora.plan import plan_space
    from aoizora.plan.planner import planning_flags
    from aoizora.report.tables import print_plan
    from aoizora.stage2.compile_workers import executor_from_spec
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
    topo = get_topology(topology_name)
    request = _plan_request(model, resolution, frames, maxdiffusion_command, kernel_profile, topo)
    if export_to:
        from aoizora.export import maxdiffusion_config
        from aoizora.models.registry import model_key

        maxdiffusion_config(model_key(request["model"]), field="--model")  # refused before any long work
    space = wan_space(request.pop("model"), request.pop("resolution"), request.pop("frames"),
                      expert_residency=expert_residency, generation=topo.generation, **request)
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 150)
    k = top_k
    flags = planning_flags(libtpu_args, topo.name)  # checked by libtpu before any long work
    if stage1_only:
        _plan_stage1_only(space, topo, k, as_json, no_cache, console)
        return
    options = Q2Options(ring_order=ring_order, ring_direction=ring_direction)
    try:
        with executor_from_spec(executor, workers, cpus_per_compile=ray_cpus_per_compile) as pool:
            outcome = plan_space(space, topo, top_k=k, options=options, compile_timeout_s=compile_timeout,
                                 verify_top=verify_top, use_cache=not no_cache, progress=not as_json, console=console,
                                 libtpu_args=flags, executor=pool)
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
        _user_deployment_line(outcome.plan.data)
        if export_to:
            click.echo(f"  exported for MaxDiffusion into {export_to[1]} (run {export_to[1].rstrip('/')}/command.sh "
                       "from MaxDiffusion's checkout)")
        if "experts" in outcome.plan.data:
            console.print(_experts_line(outcome.plan.data["experts"]))


def _user_deployment_line(plan: dict) -> None:
    """How the plan compares with the MaxDiffusion command given with --from-maxdiffusion."""
    rows = [e for e in plan.get("baselines", {}).get("experts", []) if e.get("name") == "your-maxdiffusion-command"]
    for row in rows:
        click.echo(f"  your MaxDiffusion command ({row['strategy']}): predicted {row['step_seconds'] * 1e3:.2f} ms/step; "
                   f"the plan is {row['speedup_of_plan']:.3f}x faster")


def _plan_request(model: str | None, resolution: str | None, frames: int | None, command: str | None,
                  kernel_profile: str | None, topo: Any) -> dict[str, Any]:
    """wan_space's arguments: the options', or a MaxDiffusion command's (options that disagree refused)."""
    if command is None:
        if model is None:
            raise click.UsageError("Missing option '--model' (or give --from-maxdiffusion)")
        return {"model": model, "resolution": "720p" if resolution is None else resolution,
                "frames": 81 if frames is None else frames, "kernel_profile": kernel_profile or "jax-splash"}
    from aoizora.export import read_command
    from aoizora.models.wan.strategy import validate_strategy
    from aoizora.models.registry import model_config, video_shape
    from aoizora.workload import ExpertDeployment

    cmd = read_command(command)
    width, height, cmd_frames = cmd.video()
    strategy = cmd.strategy(topo.num_devices)
    given = {"--model": (model, cmd.model), "--frames": (frames, cmd_frames),
             "--kernel": (kernel_profile, strategy.kernel_profile),
             "--resolution": (resolution and "x".join(map(str, _resolution(resolution, cmd.model))), f"{width}x{height}")}
    for option, (mine, theirs) in given.items():
        if mine is not None and str(mine) != str(theirs):
            raise click.UsageError(f"{option} {mine} disagrees with the MaxDiffusion command's {theirs}; drop {option}")
    batch = 2 * cmd.videos(topo.num_devices)
    config = model_config(cmd.model)
    validate_strategy(strategy, config, video_shape(config, f"{width}x{height}", cmd_frames), batch, topo.num_devices)
    deployment = ExpertDeployment("your-maxdiffusion-command", strategy, tuple(f"--{k}={v}" for k, v in cmd.libtpu_args.items),
                                  source="the MaxDiffusion command given with --from-maxdiffusion",
                                  documented=f"attention={cmd.attention_name} (compiled with JAX's splash kernel, "
                                             f"costed as {strategy.kernel_profile})")
    return {"model": cmd.model, "resolution": f"{width}x{height}", "frames": cmd_frames, "batch": batch,
            "user_deployment": deployment, "kernel_profile": strategy.kernel_profile}


def _resolution(text: str, model: str) -> tuple[int, int]:
    from aoizora.models.registry import model_config, parse_resolution

    return parse_resolution(text, model_config(model))


def _plan_stage1_only(space: Any, topo: Any, top_k: int, as_json: bool, no_cache: bool, console: Any) -> None:
    """`aoizora plan --stage1-only`: Stage 1's ranking (and the space's expert deployments), no compile."""
    from aoizora.plan.planner import nothing_fits
    from aoizora.stage1 import default_stage1_cache, run_stage1

    result = run_stage1(space, topo, top_k=top_k, progress=not as_json, console=console,
                        cache=None if no_cache else default_stage1_cache())
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
    from aoizora.models.wan.pipeline_space import WanPipelineSpace, swap_estimate

    if isinstance(space, WanPipelineSpace) and space.residency == "both" and len(space.pipeline.experts) > 1:
        click.echo(f"note: {swap_estimate(space, topo)}", err=True)


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
    from aoizora.runtime.runner import run_plan

    report = run_plan(load_plan(plan_path), steps=steps, check=check, checkpoint=checkpoint, distributed=distributed)
    _run_report(report, "run")
    if check:
        ok = report.check_relative_error is not None and report.check_relative_error < 1e-4
        click.echo(f"check against a single device: relative error {report.check_relative_error:.2e} "
                   f"({'ok' if ok else 'MISMATCH'})")
        if not ok:
            sys.exit(1)


@cli.command()
@click.option("--plan", "plan_path", required=True, type=click.Path(dir_okay=False))
@click.option("--steps", type=click.IntRange(min=1, max=MAX_STEPS), default=5, show_default=True,
              help="Timed steps (after warm-up).")
@click.option("--checkpoint", type=click.Path(), default=None)
@click.option("--distributed", is_flag=True)
@click.option("--json", "as_json", is_flag=True)
def measure(plan_path: str, steps: int, checkpoint: str | None, distributed: bool, as_json: bool) -> None:
    """Time denoising steps of a plan on the devices present (warm-up excluded, median)."""
    from aoizora.plan import load_plan
    from aoizora.runtime.runner import run_plan

    report = run_plan(load_plan(plan_path), steps=steps, checkpoint=checkpoint, distributed=distributed)
    if as_json:
        print_json({"platform": report.platform, "on_planned_slice": report.on_planned_slice, "config": report.config,
                     "median_step_seconds": report.median_step_seconds, "step_seconds": report.step_seconds,
                     "compile_seconds": report.compile_seconds})
    else:
        _run_report(report, "measure")


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
@click.option("--top-k", type=click.IntRange(min=1), default=None, help=f"aoizora's Top-K (default {DEFAULT_TOP_K}; 2 with --quick).")
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
              help="Seconds per TPU compile.")
@_workers_option
@_libtpu_args_option
def bench(quick: bool, grid_name: str, cells: tuple[str, ...], out_dir: str, top_k: int | None, no_oracle: bool,
          exhaustive_oracle: bool, measure: bool, measure_steps: int, fresh: bool, report_only: bool,
          compile_timeout: float, workers: int, executor: str, ray_cpus_per_compile: float | None,
          libtpu_args: str | None) -> None:
    """aoizora against the expert deployment, a logical-only search and the oracle, over the grid."""
    from rich.console import Console

    if measure:
        from aoizora.runtime.runner import ensure_host_devices

        ensure_host_devices(16)  # CPU stand-in for the largest grid slice; ignored on a TPU host
    from aoizora.bench import GRIDS, BenchOptions, markdown, output_files, parse_cell, quick_grid, run_bench
    from aoizora.stage2.compile_workers import executor_from_spec
    from aoizora.toolchain import CompilerFlags, environment_flags

    _check_output_dir(out_dir, "--out", output_files(out_dir))
    grid = [parse_cell(c) for c in cells] if cells else (quick_grid() if quick else GRIDS[grid_name]())
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
@click.option("--to", "framework", type=click.Choice(["maxdiffusion"]), required=True, help="The framework to run it with.")
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
    if as_json:
        print_json({**run.to_json(), "generate_wan": run.generate_wan_line(),
                    "launcher": run.launcher_line(out_dir.rstrip("/") or ".")})
        return
    click.echo(f"wrote {out_dir.rstrip('/')}/command.sh (MaxDiffusion {run.to_json()['maxdiffusion']['commit'][:8]})")
    click.echo(run.launcher_line(out_dir.rstrip("/") or "."))
    for note in run.differences:
        click.echo(f"note: {note}", err=True)


#: Largest HLO text read. The compiled step of a 14B Wan model prints to a few MiB; the cap keeps
#: a wrong path (a device such as /dev/zero, a checkpoint) from being read whole into memory.
MAX_HLO_BYTES = 256 * 2**20


def _read_text(path: str) -> str:
    from aoizora.errors import AoizoraError

    where = "standard input" if path == "-" else path
    try:
        if path == "-":
            raw = sys.stdin.buffer.read(MAX_HLO_BYTES + 1)
        else:
            with open(path, "rb") as fh:
                raw = fh.read(MAX_HLO_BYTES + 1)
        if len(raw) > MAX_HLO_BYTES:
            raise AoizoraError(f"cannot read {where}: larger than {MAX_HLO_BYTES // 2**20} MiB, far more than "
                               "compiled HLO text; pass an HLO text file")
        return raw.decode("utf-8")
    except (OSError, UnicodeDecodeError, MemoryError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text" if isinstance(
            exc, UnicodeDecodeError) else "it does not fit in memory"
        raise AoizoraError(f"cannot read {where}: {reason}; pass an existing HLO text file") from None


def main() -> None:
    """Console entry point."""
    from aoizora.stderr_filter import StderrFilter

    with StderrFilter():
        try:
            cli.main(standalone_mode=True)
        except SystemExit as exc:
            code = exc.code
    sys.exit(code)


if __name__ == "__main__":
    main()
