"""Chip-grid pictures: every directed link coloured by how long it is busy in one step."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from aoizora.topology import Link, Topology  # noqa: E402

_HALF = 0.22  # half the height of a chip's box (grid pitch 1)
_HALF_WIDE = 0.32  # half the width of a two-core chip's box (room for both cores' labels)
_IDLE = "#cfd6df"


def link_heatmaps(
    topology: Topology,
    panels: Sequence[tuple[str, np.ndarray, np.ndarray]],
    axis_names: Sequence[str] | None = None,
) -> Figure:
    """One panel per (title, link_bytes, device_coords-in-mesh-shape), on a shared colour scale.

    A link's colour is its busy time in one step, bytes over the link's own bandwidth, so a fast
    die-to-die (D2D) link and an ICI link carrying the same bytes differ. Chips sit at (x, y)
    (x to the right, y downwards); each neighbour pair shows two arrows, one per direction,
    slightly apart; wraparound links are stubs leaving the edge. 3-D slices show one grid per z,
    the z links as short diagonal stubs at a chip's corners (+z up-right, -z down-left). A chip
    with two cores is split into its cores (left: core 0), its D2D links drawn dashed inside it.
    The chips' coordinates label the columns (x) and rows (y); each chip is labelled inside (per
    core on two-core chips) with the mesh position of the device placed there, as a tuple over the
    mesh axes longer than 1 (a placement only moves those); the panel's title names those axes.

    Over 60 lines of matplotlib: one figure, a panel per link kind, with its labels and legend.
    """
    zs = topology.shape[2] if len(topology.shape) == 3 else 1
    nx, ny = topology.shape[0], topology.shape[1]
    bandwidth = np.array([l.bandwidth_Bps for l in topology.links], dtype=float)
    busy = [np.asarray(b, dtype=float) / bandwidth if len(b) else np.zeros(0) for _, b, _ in panels]
    vmax = max((float(np.max(s)) if s.size else 0.0) for s in busy) or 1.0
    scale, unit = (1e6, "us") if vmax < 1e-3 else (1e3, "ms") if vmax < 1.0 else (1.0, "s")
    norm = Normalize(vmin=0.0, vmax=vmax * scale)
    cmap = plt.get_cmap("inferno_r")
    fig, axes = plt.subplots(
        zs, len(panels), figsize=(max(4.0, 1.4 * nx + 1.2) * len(panels), max(3.0, 1.3 * ny + 0.9) * zs), squeeze=False
    )
    two_cores = topology.cores_per_chip == 2
    half_w = _HALF_WIDE if two_cores else _HALF
    for col, ((title, _, coords), seconds) in enumerate(zip(panels, busy, strict=True)):
        shown = _shown_axes(coords.shape[:-1], axis_names)
        labels = _position_labels(topology, coords, [i for i, _ in shown])
        key = f"in each chip: its device's\n({', '.join(n for _, n in shown)})" if shown else "one device"
        for z in range(zs):
            ax = axes[z][col]
            ax.set_title(f"{title}{'' if zs == 1 else f' (z={z})'}\n{key}", fontsize=9)
            ax.set_xlim(-0.75, nx - 0.25)
            ax.set_ylim(ny - 0.25, -0.75)
            ax.set_aspect("equal")
            ax.axis("off")
            _draw_coordinates(ax, nx, ny)
            for chip in topology.chips:
                if len(chip.coords) == 3 and chip.coords[2] != z:
                    continue
                _draw_chip(ax, chip.coords, labels, two_cores, half_w)
            for link in topology.links:
                if len(link.src) == 3 and link.src[2] != z:
                    continue
                load = float(seconds[link.index]) * scale
                if link.kind == "d2d":
                    _draw_d2d(ax, link, load, cmap, norm, half_w)
                elif link.dim == 2:
                    _draw_z_stub(ax, link, load, cmap, norm, half_w)
                else:
                    _draw_link(ax, link, load, cmap, norm, half_w)
    fig.colorbar(
        plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes, shrink=0.7, label=f"link busy time per step ({unit})"
    )
    if topology.has_d2d:
        handles = [Line2D([], [], color="#555", lw=2), Line2D([], [], color="#555", lw=2, ls=(0, (2, 1)))]
        fig.legend(handles, ["ICI link", "die-to-die link (core 0 | core 1)"], loc="lower left", fontsize=7,
                   frameon=False)
    return fig


def _shown_axes(sizes: tuple[int, ...], axis_names: Sequence[str] | None) -> list[tuple[int, str]]:
    """(index, name) of the mesh axes a label shows: those longer than 1, which a placement moves."""
    names = list(axis_names) if axis_names is not None else [f"axis {i}" for i in range(len(sizes))]
    if len(names) != len(sizes):
        raise ValueError(f"{len(names)} axis names for a mesh of {len(sizes)} axes")
    return [(i, n) for i, (n, size) in enumerate(zip(names, sizes, strict=True)) if size > 1]


def _position_labels(topology: Topology, coords: np.ndarray, shown: Sequence[int]) -> dict[tuple[int, ...], str]:
    """Chip coordinates (plus the core, on two-core chips) -> the mesh positions placed there, over
    the axes `shown`."""
    dims = len(topology.shape)
    with_core = topology.cores_per_chip == 2 and coords.shape[-1] > dims
    out: dict[tuple[int, ...], list[str]] = {}
    for idx in np.ndindex(*coords.shape[:-1]):
        where = tuple(int(v) for v in coords[idx])
        key = where[: dims + 1] if with_core else where[:dims]
        out.setdefault(key, []).append("(" + ",".join(str(idx[i]) for i in shown) + ")" if shown else "")
    return {k: "\n".join(v) for k, v in out.items()}


def _draw_coordinates(ax, nx: int, ny: int) -> None:
    """The chips' x above the columns and y left of the rows."""
    for x in range(nx):
        ax.text(x, -0.6, f"x={x}", ha="center", va="center", fontsize=6, color="#4a5a70")
    for y in range(ny):
        ax.text(-0.62, y, f"y={y}", ha="center", va="center", fontsize=6, color="#4a5a70", rotation=90)


def _draw_chip(ax, coords: tuple[int, ...], labels: dict[tuple[int, ...], str], two_cores: bool, half_w: float) -> None:
    x, y = coords[0], coords[1]
    ax.add_patch(plt.Rectangle((x - half_w, y - _HALF), 2 * half_w, 2 * _HALF, fc="#e8eef7", ec="#4a5a70", lw=0.8))
    if not two_cores:
        ax.text(x, y, labels.get(tuple(coords), ""), ha="center", va="center", fontsize=6)
        return
    ax.plot([x, x], [y - _HALF, y + 0.06], color="#4a5a70", lw=0.5)
    for core, dx in ((0, -half_w / 2), (1, half_w / 2)):
        ax.text(x + dx, y - 0.08, labels.get((*coords, core), ""), ha="center", va="center", fontsize=5)


def _arrow(ax, start, end, load: float, cmap, norm, dashed: bool = False) -> None:
    color = cmap(norm(load)) if load > 0 else _IDLE
    props = {"arrowstyle": "-|>", "color": color, "lw": 2.2 if load > 0 else 0.8, "shrinkA": 0, "shrinkB": 0}
    if dashed:
        props["linestyle"] = (0, (2, 1))
    ax.annotate("", xy=end, xytext=start, arrowprops=props)


def _draw_link(ax, link: Link, load: float, cmap, norm, half_w: float) -> None:
    x1: float
    y1: float
    dx: float
    dy: float
    (x0, y0), (x1, y1) = link.src[:2], link.dst[:2]
    if link.wraparound:  # a stub leaving the grid in the link's direction
        dx, dy = (link.direction, 0) if link.dim == 0 else (0, link.direction)
        x1, y1 = x0 + (half_w + 0.23) * dx, y0 + 0.45 * dy
    dx, dy = x1 - x0, y1 - y0
    length = max(abs(dx), abs(dy)) or 1.0
    ux, uy = dx / length, dy / length
    off = 0.07  # keep the two directions apart
    px, py = -uy * off, ux * off
    edge = (half_w if link.dim == 0 else _HALF) + 0.02
    start = (x0 + edge * ux + px, y0 + edge * uy + py)
    back = 0 if link.wraparound else edge
    end = (x1 - back * ux + px, y1 - back * uy + py)
    _arrow(ax, start, end, load, cmap, norm)


def _draw_z_stub(ax, link: Link, load: float, cmap, norm, half_w: float) -> None:
    """A z link, seen from above: a short diagonal stub, +z from the top-right corner, -z from the bottom-left."""
    x, y = link.src[0], link.src[1]
    s = link.direction
    corner = (x + s * half_w, y - s * _HALF)
    _arrow(ax, corner, (corner[0] + s * 0.2, corner[1] - s * 0.2), load, cmap, norm)
    ax.text(corner[0] + s * 0.24, corner[1] - s * 0.24, "+z" if s > 0 else "-z", fontsize=5, ha="center", va="center")


def _draw_d2d(ax, link: Link, load: float, cmap, norm, half_w: float) -> None:
    """A die-to-die link inside its chip, core 0 (left) to core 1 (right) or back, dashed."""
    x, y = link.src[0], link.src[1]
    row = y + (0.1 if link.direction > 0 else 0.17)
    left, right = x - half_w + 0.05, x + half_w - 0.05
    start, end = ((left, row), (right, row)) if link.direction > 0 else ((right, row), (left, row))
    _arrow(ax, start, end, load, cmap, norm, dashed=True)
