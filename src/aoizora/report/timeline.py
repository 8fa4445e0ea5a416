"""A step's schedule: compute against exposed (sync or waited-for) and overlapped communication."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402

_COLORS = {"compute": "#3b6fb6", "comm": "#d1495b", "wait": "#edae49", "async": "#66a182", "loop": "#bbbbbb"}
_ROW = {"compute": 1, "comm": 1, "wait": 1, "loop": 1, "async": 0}


def timeline_figure(rows: Sequence[tuple[str, Sequence[dict[str, Any]]]]) -> Figure:
    """One pair of lanes per (title, segments): the compute stream and the async collectives.

    A scanned model spends almost the whole step repeating its loop body, so when the schedule
    has a loop the picture zooms on everything up to the end of the first iteration and the
    title says how long the remaining iterations take.
    """
    fig, axes = plt.subplots(len(rows), 1, figsize=(10, 1.6 * len(rows) + 0.6), squeeze=False)
    for ax, (title, segments) in zip(axes[:, 0], rows, strict=True):
        loops = [seg for seg in segments if seg["kind"] == "loop"]
        if loops:
            first = loops[0]
            title += (f" — up to the end of the first loop iteration; then {first['name']} "
                      f"({(first['end'] - first['start']) * 1e3:,.1f} ms)")
            segments = [seg for seg in segments if seg["start"] < first["start"]]
            ax.set_xlim(0, first["start"] * 1e3 * 1.02)
        for seg in segments:
            start, width = seg["start"] * 1e3, (seg["end"] - seg["start"]) * 1e3
            ax.broken_barh(
                [(start, width)], (_ROW[seg["kind"]] - 0.4, 0.8), facecolors=_COLORS[seg["kind"]],
                hatch="//" if seg["kind"] == "loop" else None,
                edgecolor="white" if seg["kind"] != "loop" else "#888888",
                linewidth=0.2,
            )
        ax.set_yticks([0, 1], ["async comm", "stream"])
        ax.set_title(title, fontsize=9, loc="left")
        ax.set_xlabel("ms")
        if not loops:
            ax.set_xlim(left=0)
    handles = [Patch(color=c, label=k if k != "loop" else "remaining loop iterations") for k, c in _COLORS.items()]
    fig.legend(handles=handles, loc="upper right", fontsize=7, ncol=5)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    return fig
