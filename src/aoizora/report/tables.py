"""Rich tables for the terminal."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from aoizora.placement import PlacementSet
from aoizora.topology import Topology


def print_topology(topo: Topology, console: Console | None = None) -> None:
    console = console or Console()
    hw = topo.hardware
    wrap = ", ".join(f"axis {i} ({n})" for i, (n, w) in enumerate(zip(topo.shape, topo.wrap)) if w) or "none"
    console.print(
        f"[bold]{topo.name}[/bold]: {topo.num_chips} chips x {topo.cores_per_chip} device(s), "
        f"{len(topo.links)} directed ICI links, wraparound: {wrap}"
    )
    table = Table(title="hardware profile (per chip)")
    table.add_column("field")
    table.add_column("value", justify="right")
    for key, value in (
        ("link bandwidth, one way", f"{hw.link_bandwidth_Bps / 1e9:.0f} GB/s"),
        ("HBM", f"{hw.hbm_bytes / 2**30:.0f} GiB at {hw.hbm_bandwidth_Bps / 1e9:.0f} GB/s"),
        ("peak bf16", f"{hw.peak_bf16_flops / 1e12:.0f} TFLOP/s"),
        ("clock", f"{hw.clock_hz / 1e9:.2f} GHz"),
        ("per-hop latency", f"{hw.hop_latency_s * 1e6:.1f} us"),
    ):
        table.add_row(key, value)
    console.print(table)


def print_placements(space: PlacementSet, console: Console | None = None) -> None:
    """One row per distinct placement: its axis layout and, per mesh axis, each group's chips."""
    console = console or Console()
    topo = space.topology
    console.print(
        f"[bold]{space.mesh}[/bold] on [bold]{topo.name}[/bold]: {space.generated} placements generated, "
        f"{space.distinct} distinct after symmetry dedup"
    )
    table = Table(show_lines=False)
    table.add_column("placement")
    table.add_column("device order (mesh row-major, physical coords)")
    table.add_column("description")
    for p in space.placements:
        coords = p.coords(topo).reshape(-1, p.coords(topo).shape[-1])
        order = " ".join("".join(str(int(v)) for v in c) for c in coords)
        table.add_row(p.name, order, p.description)
    console.print(table)
    for note in space.notes:
        console.print(f"note: {note}")
