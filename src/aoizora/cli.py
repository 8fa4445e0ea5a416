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
    from aoizora.errors import HloParseError
    from aoizora.hlo import analyze, summarize

    try:
        with click.open_file(file, "r", encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise HloParseError(f"cannot read HLO file {file!r}: {exc}") from exc
    report = summarize(analyze(text))
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
