"""The slice comparison's outputs (`aoizora compare --out DIR`): video time against cost per video
and against chip-hours per video, one labelled point per slice, in a PNG and a self-contained HTML
page, beside the data as JSON.

They are drawn from the comparison's JSON document (`Comparison.to_json()`), the same data the
folder's `compare.json` holds, so the picture and the data cannot disagree.
"""

from __future__ import annotations

import html
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib.figure import Figure  # noqa: E402

from aoizora.report.html import _move_into, _png, _staging_parent, _table  # noqa: E402

#: The files `write_comparison` writes into its folder.
COMPARISON_FILES: tuple[str, ...] = ("index.html", "compare.png", "compare.json")


def comparison_files(out_dir: str | Path) -> list[Path]:
    """The files `write_comparison` writes into `out_dir`."""
    return [Path(out_dir, name) for name in COMPARISON_FILES]


def _plotted(doc: dict[str, Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """The slices with both a video time and a cost (the points), and the names of the others with why."""
    points, left_out = [], []
    for row in doc["slices"]:
        if row["video_seconds"] is None:
            left_out.append(f"{row['topology']} (no plan)")
        elif row["cost_per_video"] is None:
            left_out.append(f"{row['topology']} (no price; {row['video_seconds']:.1f} s per video)")
        else:
            points.append(row)
    return points, left_out


def comparison_figure(doc: dict[str, Any]) -> Figure:
    """Two panels, one labelled point per slice: video time (x) against cost per video (y) for
    the priced slices, and against chip-hours per video for every planned slice (what the cost is
    made of, which needs no price: a slice without one is still compared). The latency target as
    a dashed line, the slices that meet it filled, the pick ringed. Slices without a plan or a
    price are named under the plot."""
    import matplotlib.pyplot as plt

    points, left_out = _plotted(doc)
    planned = [r for r in doc["slices"] if r["video_seconds"] is not None]
    fig, (cost_ax, hours_ax) = plt.subplots(1, 2, figsize=(11.0, 4.6))
    _panel(cost_ax, doc, points, "cost_per_video", f"cost per video, {doc['prices']['currency']}")
    if not points:
        cost_ax.text(0.5, 0.5, "no slice has both a video time and a price", transform=cost_ax.transAxes,
                     ha="center")
    _panel(hours_ax, doc, planned, "chip_hours_per_video", "chip-hours per video (every chip of the slice)")
    w = doc["workload"]
    fig.suptitle(f"{w['model']} {w['resolution']} {w['frames']} frames: one point per slice", fontsize=10)
    if left_out:
        fig.text(0.01, -0.02, "cost not plotted: " + "; ".join(left_out), fontsize=8, ha="left", va="top",
                 wrap=True)
    fig.tight_layout()
    return fig


def _panel(ax: Any, doc: dict[str, Any], rows: list[dict[str, Any]], key: str, label: str) -> None:
    """One panel of `comparison_figure`: video time against `key` of each row."""
    target = doc.get("max_video_seconds")
    for row in rows:
        meets = row["meets_target"] is not False
        ax.scatter([row["video_seconds"]], [row[key]], s=60, zorder=3,
                   color="#3b6fb6" if meets else "white", edgecolors="#3b6fb6")
        if row["topology"] == doc["pick"]["topology"]:
            ax.scatter([row["video_seconds"]], [row[key]], s=260, zorder=2, facecolors="none",
                       edgecolors="#d1495b", linewidths=1.6)
        ax.annotate(row["topology"], (row["video_seconds"], row[key]), textcoords="offset points",
                    xytext=(7, 5), fontsize=9)
    if target is not None:
        ax.axvline(target, color="#888888", linestyle="--", linewidth=1)
        ax.annotate(f"target {target:g} s", (target, 1), xycoords=("data", "axes fraction"), xytext=(4, -12),
                    textcoords="offset points", fontsize=8, color="#555555")
    ax.set_xlabel(f"video time, s ({doc['video_time_includes'].split(':')[0]})")
    ax.set_ylabel(label)
    if rows:  # from zero, with room for the labels of the points at the edges
        ax.set_xlim(0, 1.15 * max([r["video_seconds"] for r in rows] + [target or 0]))
        ax.set_ylim(0, 1.25 * max(r[key] for r in rows))
    ax.grid(True, alpha=0.3)


def amount(value: float | None, unit: str = "") -> str:
    """A chip-hour or money amount: three decimals, or two significant digits under 0.1 (a small
    model's cost per video); "-" for none."""
    if value is None:
        return "-"
    return (f"{value:,.3f}" if value >= 0.1 else f"{value:.2g}") + (f" {unit}" if unit else "")


def _cell(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def write_comparison(doc: dict[str, Any], out_dir: str | Path) -> Path:
    """Write `compare.json` (strict JSON), `compare.png` and `index.html` into `out_dir`; returns the
    HTML path. Staged in a temporary folder and moved in when complete, as `write_report` does."""
    out = Path(out_dir)
    text = json.dumps(doc, indent=2, allow_nan=False)  # refused before anything is written
    staging = Path(tempfile.mkdtemp(prefix=".aoizora-compare-", dir=_staging_parent(out)))
    try:
        (staging / "compare.json").write_text(text + "\n", encoding="utf-8")
        fig = comparison_figure(doc)
        fig.savefig(staging / "compare.png", dpi=110, bbox_inches="tight")
        (staging / "index.html").write_text(_page(doc, _png(fig)), encoding="utf-8")
        _move_into(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out / "index.html"


def _page(doc: dict[str, Any], image: str) -> str:
    currency = doc["prices"]["currency"]
    rows = [[r["topology"], r["chips"], r["strategy"] or f"no plan: {r['error']}", _cell(r["video_seconds"], ".1f"),
             _cell(r["videos_per_hour"], ",.2f"), amount(r["chip_hours_per_video"]),
             amount(r["price"]["price_per_chip_hour"]), amount(r["cost_per_video"]),
             {True: "yes", False: "no", None: "-"}[r["meets_target"]]] for r in doc["slices"]]
    table = _table(["slice", "chips", "strategy", "video s", "videos/hour", "chip-hours/video",
                    f"{currency}/chip-hour", f"{currency}/video", "meets target"], rows)
    prices = doc["prices"]
    sources = "".join(f"<li>{html.escape(g)}: " + html.escape(
        f"{p['price_per_chip_hour']:g} {currency}/chip-hour, {p.get('region', 'region not stated')}, "
        f"source {p['source']}" if p["price_per_chip_hour"] is not None else f"no price ({p['absent']})")
        + "</li>" for g, p in prices["generations"].items())
    w = doc["workload"]
    heading = html.escape(f"{w['model']} {w['resolution']} {w['frames']} frames: which slice?")
    target = doc["max_video_seconds"]
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>aoizora compare — {heading}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}\
table{{border-collapse:collapse;margin:0.5em 0 1.5em}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}}th{{background:#f0f3f7}}\
img{{max-width:100%}}</style></head><body>
<h1>{heading}</h1>
<p><b>Pick:</b> {html.escape(doc['pick']['topology'] or 'none')} — {html.escape(doc['pick']['reason'])}.
{'' if target is None else f'Latency target: {target:g} s per video.'}</p>
<p>Video time: {html.escape(doc['video_time_includes'])}.</p>
{table}
<img src="{image}" alt="video time against cost and chip-hours per video">
<h2>Prices</h2><p>{html.escape(prices['origin'])}, read {html.escape(prices['read'])}:</p><ul>{sources}</ul>
</body></html>"""
