"""Command line: `aoizora topology`, `aoizora placements`, `aoizora demo`.

Library code raises `AoizoraError`s; here they become one line on stderr and exit code 2.
libtpu's no-TPU host-detection noise is filtered from stderr (see `_stderr`).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from aoizora.errors import AoizoraError

EXIT_BAD_INPUT = 2


class _Group(click.Group):
    """Turns aoizora's typed errors into one-line messages with exit code 2."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except AoizoraError as exc:
            click.echo(f"aoizora: error: {exc}", err=True)
            ctx.exit(EXIT_BAD_INPUT)


def _print_json(obj: Any) -> None:
    click.echo(json.dumps(obj, indent=2))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="aoizora")
def cli() -> None:
    """Topology-aware planning of diffusion-transformer inference on TPU slices."""


@cli.command()
@click.argument("topology_name", metavar="TOPO")
@click.option("--json", "as_json", is_flag=True, help="Print the full description as JSON.")
def topology(topology_name: str, as_json: bool) -> None:
    """Chips, directed ICI links and hardware profile of a TPU slice (e.g. v5e:2x4)."""
    from aoizora.report.tables import print_topology
    from aoizora.topology import get_topology

    topo = get_topology(topology_name)
    if as_json:
        _print_json(topo.to_json())
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
        _print_json([p.to_json(topo) for p in space.placements])
    else:
        print_placements(space)


@cli.command()
def demo() -> None:
    """The main job on an embedded default: v5e:2x4, its links and the placements of sp=2,tp=4."""
    from aoizora.placement import MeshSpec, enumerate_placements
    from aoizora.report.tables import print_placements, print_topology
    from aoizora.topology import get_topology

    topo = get_topology("v5e:2x4")
    print_topology(topo)
    print_placements(enumerate_placements(topo, MeshSpec.parse("sp=2,tp=4")))


@cli.command()
@click.argument("file", metavar="FILE", type=click.Path(allow_dash=True, dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="Print the full report as JSON.")
def hlo(file: str, as_json: bool) -> None:
    """Collectives, FLOPs and opaque kernels of a compiled HLO text file ('-' for stdin)."""
    from aoizora.hlo import analyze, summarize

    report = summarize(analyze(_read_text(file)))
    if as_json:
        _print_json(report)
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
    from aoizora.report.tables import print_ranking, progress_bar
    from aoizora.topology import get_topology
    from aoizora.validation.rank import rank_placements

    text = _read_text(hlo_path)
    program = build_program(text)
    topo = get_topology(topology_name)
    space = enumerate_placements(topo, MeshSpec.parse(mesh_text))
    options = Q2Options(ring_order=ring_order, ring_direction=ring_direction)
    with progress_bar("scoring placements", len(space.placements), quiet=as_json) as advance:
        rows = rank_placements(program, topo, space.placements, options=options, simulate=not no_sim, progress=advance)
    if as_json:
        _print_json({"topology": topo.name, "mesh": str(space.mesh), "placements": [r.to_json(topo) for r in rows]})
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
    from aoizora.report.tables import print_validation, progress_bar
    from aoizora.topology import get_topology
    from aoizora.validation.programs import NamedProgram, default_suite
    from aoizora.validation.rank import validate as run_validation

    topo = get_topology(topology_name)
    spec = MeshSpec.parse(mesh_text)
    space = enumerate_placements(topo, spec)
    if hlo_paths:
        programs = [NamedProgram(path, build_program(_read_text(path))) for path in hlo_paths]
    else:
        programs = default_suite(topo, spec, suite)
    options = Q2Options(ring_order=ring_order, ring_direction=ring_direction)
    total = len(programs) * len(space.placements)
    with progress_bar("Q2 and simulator", total, quiet=as_json) as advance:
        report = run_validation(programs, topo, space.placements, options=options, progress=advance)
    if as_json:
        _print_json(report.to_json())
    else:
        print_validation(report, title=f"Q2 vs simulator on {topo.name}, mesh {spec}")


@cli.command()
@click.argument("plan_path", metavar="PLAN", type=click.Path(dir_okay=False))
@click.option("--out", "out_dir", required=True, type=click.Path(file_okay=False), help="Directory for index.html.")
def explain(plan_path: str, out_dir: str) -> None:
    """An HTML report of a plan: link-load heatmaps, strategies and placements, a step timeline."""
    from aoizora.plan import load_plan
    from aoizora.report.html import write_report

    path = write_report(load_plan(plan_path), out_dir)
    click.echo(f"wrote {path}")


def _read_text(path: str) -> str:
    from aoizora.errors import AoizoraError

    if path == "-":
        return sys.stdin.read()
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise AoizoraError(f"cannot read {path}: {reason}; pass an existing HLO text file") from exc


def main() -> None:
    """Console entry point."""
    from aoizora._stderr import StderrFilter

    with StderrFilter():
        try:
            cli.main(standalone_mode=True)
        except SystemExit as exc:
            code = exc.code
    sys.exit(code)


if __name__ == "__main__":
    main()
