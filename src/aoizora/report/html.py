"""`aoizora explain`: a self-contained HTML report of a plan (images embedded)."""

from __future__ import annotations

import base64
import html
import io
import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from aoizora.errors import PlanFormatError
from aoizora.plan.plan import Plan
from aoizora.report.heatmap import link_heatmaps
from aoizora.report.timeline import timeline_figure
from aoizora.topology import get_topology


def _png(fig: Any) -> str:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _ms(seconds: Any) -> str:
    return "-" if seconds is None else f"{float(seconds) * 1e3:,.3f}"


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers) if any(headers) else ""
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in r) + "</tr>" for r in rows)
    thead = f"<thead><tr>{head}</tr></thead>" if head else ""
    return f"<table>{thead}<tbody>{body}</tbody></table>"


def _video_section(d: dict[str, Any]) -> str:
    """The plan's `video_time` as a table of its parts (none for a plan without one)."""
    from aoizora.report.tables import video_time_rows

    vt = d.get("video_time")
    if vt is None:
        return ""
    return "<h2>One generation, end to end</h2>" + _table(["part", "seconds", "basis"], video_time_rows(vt))


def mesh_summary(names: Sequence[str], sizes: Sequence[int]) -> str:
    """The mesh as the strategy key names it (axes longer than 1), and the axes of size 1 it also has."""
    used = ",".join(f"{n}={s}" for n, s in zip(names, sizes, strict=True) if s > 1) or "one device"
    unit = [n for n, s in zip(names, sizes, strict=True) if s == 1]
    return used + (f" (axes of size 1: {', '.join(unit)})" if unit else "")


# Stage 1's verdict counts (`Stage1Result.counts`), in the order a reader follows them
_STAGE1_COUNTS = (
    ("rejected", "illegal on this slice"),
    ("lowering_failed", "failed to lower"),
    ("out_of_memory", "do not fit in HBM"),
    ("ranked", "ranked by Q1"),
)


def stage1_summary(counts: dict[str, int]) -> str:
    """One sentence from Stage 1's counts, e.g. "Stage 1: of 460 strategies, 361 illegal on this
    slice, …; the first 3 went to Stage 2"."""
    if not counts:
        return "Stage 1: no counts recorded."
    parts = [f"{counts[k]} {words}" for k, words in _STAGE1_COUNTS if k in counts]
    known = {k for k, _ in _STAGE1_COUNTS} | {"enumerated", "kept"}
    parts += [f"{v} {k.replace('_', ' ')}" for k, v in counts.items() if k not in known]
    head = f"Stage 1: of {counts['enumerated']} strategies, " if "enumerated" in counts else "Stage 1: "
    tail = f"; its first {counts['kept']} went to Stage 2" if "kept" in counts else ""
    return head + ", ".join(parts) + tail + "."


def toolchain_summary(toolchain: dict[str, Any]) -> str:
    return ", ".join(f"{k} {v}" for k, v in toolchain.items())


#: The files `write_report` writes into its folder.
REPORT_FILES: tuple[str, ...] = ("index.html", "links.png", "timeline.png")


def report_files(out_dir: str | Path) -> list[Path]:
    """The files `write_report` writes into `out_dir`."""
    return [Path(out_dir, name) for name in REPORT_FILES]


def write_report(plan: Plan, out_dir: str | Path) -> Path:
    """Write `index.html` (and the same images as PNG files) into `out_dir`; returns the HTML path.

    The files are written into a temporary directory first and moved into `out_dir` only when all
    are complete (`index.html` last): an error or Ctrl-C leaves `out_dir` as it was (not created,
    or holding the previous report).
    """
    out = Path(out_dir)
    d = plan.data
    topo = get_topology(d["topology"]["name"])
    pred = d["prediction"]
    same = d.get("baselines", {}).get("same_strategy_jax_default", {})
    panels = [(f"plan: {d['placement']['name']}", _link_bytes(pred, topo, "prediction"), plan.device_coords)]
    if "link_bytes" in same and "device_coords" in same:
        panels.append(("same strategy, jax-default", _link_bytes(same, topo, "baselines.same_strategy_jax_default"),
                       np.asarray(same["device_coords"])))
    staging = Path(tempfile.mkdtemp(prefix=".aoizora-report-", dir=_staging_parent(out)))
    try:
        _write_files(plan, topo, panels, staging)
        _move_into(staging, out)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out / "index.html"


def _link_bytes(section: dict[str, Any], topo: Any, where: str) -> np.ndarray:
    """The per-link byte loads of a prediction, checked against the slice's links."""
    try:
        loads = np.asarray(section.get("link_bytes", []), dtype=float)
    except (TypeError, ValueError):
        loads = np.asarray([np.nan])
    if loads.shape != (len(topo.links),) or not np.isfinite(loads).all() or (loads < 0).any():
        raise PlanFormatError(
            f"plan {where}.link_bytes holds {loads.size} values but {topo.name} has {len(topo.links)} links "
            "(or some are negative or not finite); re-run `aoizora plan`"
        )
    return loads


def _staging_parent(out: Path) -> Path:
    """Where to stage the files: inside `out` if it exists (same file system), else beside it."""
    if out.is_dir():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    return out.parent


def _move_into(staging: Path, out: Path) -> None:
    """Move the finished files into `out`: one rename of the folder when `out` is new, else file by
    file with `index.html` last."""
    if not out.exists():
        umask = os.umask(0)
        os.umask(umask)
        staging.chmod(0o777 & ~umask)  # as a folder made by mkdir, not mkdtemp's owner-only mode
        staging.rename(out)
        return
    files = sorted(staging.iterdir(), key=lambda f: f.name == "index.html")
    for f in files:
        os.replace(f, out / f.name)


def _write_files(plan: Plan, topo: Any, panels: list[tuple[str, np.ndarray, np.ndarray]], out: Path) -> None:
    d = plan.data
    pred = d["prediction"]
    same = d.get("baselines", {}).get("same_strategy_jax_default", {})
    heat = link_heatmaps(topo, panels, plan.axis_names)
    heat.savefig(out / "links.png", dpi=110, bbox_inches="tight")
    heat_src = _png(heat)

    lanes = [(f"plan ({_ms(pred['step_seconds'])} ms)", pred.get("timeline") or [])]
    if same.get("timeline"):
        lanes.append((f"jax-default ({_ms(same['step_seconds'])} ms)", same["timeline"]))
    tl = timeline_figure(lanes)
    tl.savefig(out / "timeline.png", dpi=110, bbox_inches="tight")
    tl_src = _png(tl)

    summary = [
        ["strategy", d["strategy"]["key"]],
        ["placement", f"{d['placement']['name']} — {d['placement']['description']}"],
        ["mesh", mesh_summary(plan.axis_names, plan.axis_sizes)],
        ["predicted step", f"{_ms(pred['step_seconds'])} ms (compute {_ms(pred['compute_seconds'])}, "
                           f"exposed communication {_ms(pred['exposed_comm_seconds'])})"],
    ]
    for name, base in d.get("baselines", {}).items():
        if "speedup_of_plan" in base:
            summary.append([f"vs {name.replace('_', ' ')}",
                            f"{base['speedup_of_plan']:.3f}x ({base['strategy']} / {base['placement']}: "
                            f"{_ms(base['step_seconds'])} ms)"])
    alternatives = [
        [a["strategy"], a.get("placement") or "-", _ms(a.get("step_seconds")), _ms(a.get("exposed_comm_seconds")),
         _ms(a.get("jax_default_step_seconds")),
         "-" if a.get("memory_bytes_per_device") is None else f"{a['memory_bytes_per_device'] / 2**30:.2f}",
         a.get("dropped", "")]
        for a in d["alternatives"]
    ]
    chosen: dict[str, Any] = next((a for a in d["alternatives"] if a["strategy"] == d["strategy"]["key"]), {})
    placements = [[p["name"], _ms(p["step_seconds"]), _ms(p["exposed_comm_seconds"])]
                  for p in chosen.get("placements", [])]
    timings = [[k, f"{v:.2f} s"] for k, v in d["timings"].items()]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in d.get("notes", []))
    heading = f"{html.escape(d['workload']['name'])} on {html.escape(topo.name)}"
    strategies = _table(["strategy", "best placement", "step ms", "exposed comm ms", "jax-default ms",
                         "memory GiB/device", "dropped"], alternatives)
    stage1 = html.escape(stage1_summary(d.get("stage1", {}).get("counts", {})))
    doc = f"""<!doctype html><html><head><meta charset="utf-8"><title>aoizora plan — {heading}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}}\
table{{border-collapse:collapse;margin:0.5em 0 1.5em}}
td,th{{border:1px solid #ccc;padding:3px 8px;font-size:13px;text-align:left}}th{{background:#f0f3f7}}\
img{{max-width:100%}}</style></head><body>
<h1>{heading}</h1>
{_table(["", ""], summary)}{_video_section(d)}
<h2>Link loads of one step</h2><p>Each box is a chip at the coordinates its column (x) and row (y) give; inside it, the
mesh position of the device placed on it, over the mesh axes the panel's title names. Each arrow is one direction of a
link, coloured by how long it is busy in one step.</p><img src="{heat_src}" alt="link heatmaps">
<h2>Timeline of one step</h2><img src="{tl_src}" alt="timeline">
<h2>Strategies (Stage 2)</h2>{strategies}
<h2>Placements of the chosen strategy</h2>{_table(["placement", "step ms", "exposed comm ms"], placements)}
<h2>Planning</h2>{_table(["stage", "time"], timings)}<p>{stage1}</p>
<ul>{notes}</ul><p>toolchain: {html.escape(toolchain_summary(d['toolchain']))}</p></body></html>"""
    (out / "index.html").write_text(doc, encoding="utf-8")
