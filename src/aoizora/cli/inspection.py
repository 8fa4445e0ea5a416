"""Commands that describe a slice or a compiled program: `topology`, `placements`, `hlo`, `rank`,
`validate`."""

from __future__ import annotations

import click

from aoizora.cli.base import (
    _ring_options,
    cli,
    print_json,
)
from aoizora.cli.paths import _read_text


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
    tpu7x:2x2x1 (libtpu accepts tpu7x 2x2x1, 2x2x2, 2x2x4, 2x4x4 and whole 4x4x4 cubes), and the part of
    one host's 2x2x1 chips a process can be given: v5e:1x1, v5e:1x2, tpu7x:1x1x1. Aliases: v5litepod, v5
    (v5p), v6 (v6e), v7x (tpu7x: libtpu itself refuses v7x:...). Cloud accelerator types tpu7x-8, -16,
    -32, -64, -128 (TensorCores) name 2x2x1, 2x2x2, 2x2x4, 2x4x4 and 4x4x4.
    """
    from aoizora.report.tables import print_topology
    from aoizora.topology import get_topology

    topo = get_topology(topology_name, core_ici)
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


@cli.command()
@click.option("--hlo", "hlo_path", required=True, type=click.Path(dir_okay=False),
              help="Compiled HLO text (- for stdin).")
@click.option("--topology", "topology_name", required=True, metavar="TOPO", help="The slice it was compiled for.")
@click.option("--mesh", "mesh_text", required=True, metavar="NAME=SIZE,...", help="The program's logical mesh.")
@_ring_options
@click.option("--no-sim", is_flag=True, help="Skip the reference simulator (Q2 only).")
@click.option("--json", "as_json", is_flag=True, help="Print the ranking as JSON.")
def rank(hlo_path: str, topology_name: str, mesh_text: str, ring_order: str, ring_direction: str, no_sim: bool,
         as_json: bool) -> None:
    """Every distinct placement of a compiled program, scored by Q2 and the simulator, best first."""
    from aoizora.cost import Q2Options
    from aoizora.evaluation.validation.rank import check_program_mesh, rank_placements
    from aoizora.hlo.builder import build_program
    from aoizora.placement import MeshSpec, enumerate_placements
    from aoizora.progress import progress_reporter
    from aoizora.report.tables import print_ranking
    from aoizora.topology import get_topology

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
    from aoizora.evaluation.validation.programs import NamedProgram, default_suite
    from aoizora.evaluation.validation.rank import check_program_mesh
    from aoizora.evaluation.validation.rank import validate as run_validation
    from aoizora.hlo.builder import build_program
    from aoizora.placement import MeshSpec, enumerate_placements
    from aoizora.progress import progress_reporter
    from aoizora.report.tables import print_validation
    from aoizora.topology import get_topology

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
