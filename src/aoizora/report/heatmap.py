"""Chip-grid pictures: every directed ICI link coloured by the bytes it carries in one step."""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import Normalize  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from aoizora.topology import Topology  # noqa: E402


def link_heatmaps(
    topology: Topology,
    panels: Sequence[tuple[str, np.ndarray, np.ndarray]],
) -> Figure:
    """One panel per (title, link_bytes, device_coords-in-mesh-shape), on a shared colour scale.

    Chips sit at (x, y) (x to the right, y downwards); each neighbour pair shows two arrows, one
    per direction, slightly apart; wraparound links are stubs leaving the edge. Chips are
    labelled with the logical mesh position of their device(s). 3-D slices show one grid per z.
    """
    zs = topology.shape[2] if len(topology.shape) == 3 else 1
    nx, ny = topology.shape[0], topology.shape[1]
    vmax = max(float(np.max(b)) if len(b) else 0.0 for _, b, _ in panels) or 1.0
    norm = Normalize(vmin=0.0, vmax=vmax)
    cmap = plt.get_cmap("inferno_r")
    fig, axes = plt.subplots(
        zs, len(panels), figsize=(max(3.2, 1.3 * nx + 1.2) * len(panels), max(3.0, 1.3 * ny + 0.8) * zs), squeeze=False
    )
    for col, (title, link_bytes, coords) in enumerate(panels):
        labels = _position_labels(coords)
        for z in range(zs):
            ax = axes[z][col]
            ax.set_title(title if zs == 1 else f"{title} (z={z})", fontsize=9)
            ax.set_xlim(-0.7, nx - 0.3)
            ax.set_ylim(ny - 0.3, -0.7)
            ax.set_aspect("equal")
            ax.axis("off")
            for chip in topology.chips:
                if len(chip.coords) == 3 and chip.coords[2] != z:
                    continue
                x, y = chip.coords[0], chip.coords[1]
                ax.add_patch(plt.Rectangle((x - 0.22, y - 0.22), 0.44, 0.44, fc="#e8eef7", ec="#4a5a70", lw=0.8))
                ax.text(x, y, labels.get(tuple(chip.coords), ""), ha="center", va="center", fontsize=6)
            for link in topology.links:
                if link.dim > 1 or (len(link.src) == 3 and link.src[2] != z):
                    continue
                _draw_link(ax, link, float(link_bytes[link.index]), cmap, norm)
    fig.colorbar(plt.cm.ScalarMappable(norm=norm, cmap=cmap), ax=axes, shrink=0.7, label="bytes per step")
    return fig


def _position_labels(coords: np.ndarray) -> dict[tuple[int, ...], str]:
    """Chip coordinates -> the mesh positions placed on it."""
    out: dict[tuple[int, ...], list[str]] = {}
    for idx in np.ndindex(*coords.shape[:-1]):
        chip = tuple(int(v) for v in coords[idx])
        key = chip if coords.shape[-1] <= 3 else chip[:-1]
        out.setdefault(key[: coords.shape[-1]], []).append(",".join(map(str, idx)))
    return {k: "\n".join(v) for k, v in out.items()}


def _draw_link(ax, link, load: float, cmap, norm) -> None:
    (x0, y0), (x1, y1) = link.src[:2], link.dst[:2]
    if link.wraparound:  # a stub leaving the grid in the link's direction
        dx, dy = (link.direction, 0) if link.dim == 0 else (0, link.direction)
        x1, y1 = x0 + 0.45 * dx, y0 + 0.45 * dy
    dx, dy = x1 - x0, y1 - y0
    length = max(abs(dx), abs(dy)) or 1.0
    ux, uy = dx / length, dy / length
    off = 0.07  # keep the two directions apart
    px, py = -uy * off, ux * off
    start = (x0 + 0.24 * ux + px, y0 + 0.24 * uy + py)
    end = (x1 - (0 if link.wraparound else 0.24) * ux + px, y1 - (0 if link.wraparound else 0.24) * uy + py)
    color = cmap(norm(load)) if load > 0 else "#cfd6df"
    ax.annotate("", xy=end, xytext=start, arrowprops={"arrowstyle": "-|>", "color": color, "lw": 2.2 if load > 0 else 0.8})
