"""Rich tables for the terminal."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from aoizora.placement import PlacementSet
from aoizora.topology import Topology


def print_topology(topo: Topology, console: Console | None = None) -> None:
    console = console or Console()
    chip, dev = topo.chip_hardware, topo.hardware
    wrap = ", ".join(f"axis {i} ({n})" for i, (n, w) in enumerate(zip(topo.shape, topo.wrap, strict=True))
                     if w) or "none"
    n_d2d = sum(1 for l in topo.links if l.kind == "d2d")
    d2d = f" + {n_d2d} directed die-to-die links (cores to ICI: {topo.core_ici})" if n_d2d else ""
    console.print(
        f"[bold]{topo.name}[/bold]: {topo.num_chips} chips x {topo.cores_per_chip} device(s), "
        f"{len(topo.links) - n_d2d} directed ICI links{d2d}, wraparound: {wrap}"
    )
    per_device = topo.cores_per_chip > 1
    table = Table(title="hardware profile"
                  + (f" (per chip; per device: 1/{topo.cores_per_chip})" if per_device else " (per chip)"))
    table.add_column("field")
    table.add_column("per chip", justify="right")
    if per_device:
        table.add_column("per device", justify="right")
    rows = [
        ("ICI link bandwidth, one way", f"{chip.link_bandwidth_Bps / 1e9:.0f} GB/s", ""),
        ("HBM", f"{chip.hbm_bytes / 2**30:.0f} GiB at {chip.hbm_bandwidth_Bps / 1e9:.0f} GB/s",
         f"{dev.hbm_bytes / 2**30:.0f} GiB at {dev.hbm_bandwidth_Bps / 1e9:.0f} GB/s"),
        ("HBM usable by a program (per device)", "", f"{dev.hbm_usable_bytes / 2**30:.2f} GiB"),
        ("peak bf16", f"{chip.peak_bf16_flops / 1e12:.0f} TFLOP/s", f"{dev.peak_bf16_flops / 1e12:.1f} TFLOP/s"),
        ("clock", f"{chip.clock_hz / 1e9:.2f} GHz", ""),
        ("per-hop latency", f"{chip.hop_latency_s * 1e6:.1f} us", ""),
    ]
    if chip.d2d_bandwidth_Bps is not None:
        rows.insert(1, ("die-to-die bandwidth, one way", f"{chip.d2d_bandwidth_Bps / 1e9:.0f} GB/s", ""))
    for key, per_chip, one_device in rows:
        if per_device:
            table.add_row(key, per_chip, one_device)
        else:
            table.add_row(key, per_chip or one_device)
    console.print(table)


def print_placements(space: PlacementSet, console: Console | None = None) -> None:
    """One row per distinct placement: its axis layout and, per mesh axis, each group's chips."""
    console = console or Console()
    topo = space.topology
    console.print(
        f"[bold]{escape(str(space.mesh))}[/bold] on [bold]{topo.name}[/bold]: {space.generated} placements generated, "
        f"{space.distinct} distinct after symmetry dedup"
    )
    table = Table(show_lines=False)
    table.add_column("placement")
    table.add_column("device order (mesh row-major, physical coords)")
    table.add_column("description")
    for p in space.placements:
        coords = p.coords(topo).reshape(-1, p.coords(topo).shape[-1])
        order = " ".join("".join(str(int(v)) for v in c) for c in coords)
        table.add_row(escape(p.name), order, escape(p.description))
    console.print(table)
    for note in space.notes:
        console.print(f"note: {note}")


def _us(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e6:,.1f}"


def print_ranking(rows: list[Any], title: str, console: Console | None = None) -> None:
    """Placements best first: Q2 and simulator latency (us) and exposed communication."""
    console = console or Console()
    table = Table(title=title)
    table.add_column("#", justify="right")
    table.add_column("placement", no_wrap=True)
    for col in ("Q2 us", "Q2 exposed us", "sim us", "sim exposed us"):
        table.add_column(col, justify="right")
    for i, r in enumerate(rows, 1):
        name = r.placement.name + ("  (jax-default)" if r.is_jax_default and r.placement.name != "jax-default" else "")
        style = "bold" if r.is_jax_default else None
        table.add_row(
            str(i), escape(name), _us(r.q2.step_seconds), _us(r.q2.exposed_comm_seconds),
            _us(r.sim.step_seconds if r.sim else None), _us(r.sim.exposed_comm_seconds if r.sim else None),
            style=style,
        )
    console.print(table)


def print_validation(report: Any, title: str, console: Console | None = None) -> None:
    console = console or Console()
    table = Table(title=title)
    table.add_column("program", no_wrap=True, min_width=22)
    for col in ("placements", "Spearman", "Kendall", "top-1", "regret", "sim spread"):
        table.add_column(col, justify="right")
    for name, row in report.per_program.items():
        table.add_row(
            escape(name), str(row["placements"]), f"{row['spearman']:.3f}", f"{row['kendall']:.3f}",
            "yes" if row["top1"] else "no", f"{row['regret']:.1%}", f"{row['reference_spread']:.2f}x",
        )
    console.print(table)
    console.print(
        f"pooled over {len(report.pairs)} pairs: Spearman {report.spearman:.3f}, Kendall {report.kendall:.3f}; "
        f"top-1 agreement {report.top1_agreement:.0%}, worst regret {report.max_regret:.1%}"
    )


def video_time_line(vt: dict[str, Any]) -> str:
    """One line for a plan's `video_time`: the total beside its parts, and MaxDiffusion's figure."""
    sec = lambda s: "unknown" if s is None else f"{s:,.1f} s"  # noqa: E731
    d = vt["denoise"]
    videos = f" ({vt['videos']} videos)" if vt["videos"] > 1 else ""
    text = vt["text_encode"]
    return (f"video{videos}: {sec(vt['total_seconds'])} end to end = text encode {sec(text['seconds'])} "
            f"({text['device']}, estimated) + {d['steps']} steps x {d['step_seconds'] * 1e3:,.1f} ms "
            f"{sec(d['seconds'])} + expert swap {sec(vt['expert_swap']['seconds'])} + VAE decode "
            f"{sec(vt['vae_decode']['seconds'])}; MaxDiffusion's generation_time "
            f"{sec(vt['maxdiffusion_generation_seconds'])}"
            + "".join(f" ({name} {vt[key]['basis']})" for key, name in (("expert_swap", "expert swap"),
                                                                        ("vae_decode", "VAE decode"))
                      if vt[key]["seconds"] is None))


def video_time_rows(vt: dict[str, Any]) -> list[list[str]]:
    """(part, seconds, basis) of a plan's `video_time`, the totals last."""
    sec = lambda s: "unknown" if s is None else f"{s:,.2f}"  # noqa: E731
    d, text = vt["denoise"], vt["text_encode"]
    return [
        ["text encode", sec(text["seconds"]), text["basis"]],
        ["denoising", sec(d["seconds"]), f"{d['steps']} steps x {d['step_seconds'] * 1e3:,.2f} ms (the plan's "
                                        "step, both CFG halves)"],
        ["expert swap", sec(vt["expert_swap"]["seconds"]), vt["expert_swap"]["basis"]],
        ["VAE decode", sec(vt["vae_decode"]["seconds"]), vt["vae_decode"]["basis"]],
        ["total", sec(vt["total_seconds"]), f"{vt['videos']} video(s), a new prompt"],
        ["MaxDiffusion's generation_time", sec(vt["maxdiffusion_generation_seconds"]),
         "the total without the text encoding, which its timed run reads from its warmup's cache"
         if not text.get("in_generation_time", True) else "the total"],
    ]


def print_plan(plan: Any, *, from_cache: bool = False, out_path: str | None = None, report_dir: str | None = None,
               console: Console | None = None) -> None:
    """Strategies x best placement, the choice, and its speedups over the baselines."""
    import sys

    console = console or Console(width=None if sys.stdout.isatty() else 150)
    d = plan.data
    ms = lambda s: "-" if s is None else f"{s * 1e3:,.2f}"  # noqa: E731
    table = Table(title=f"{escape(d['workload']['name'])} on {escape(d['topology']['name'])}: strategies (Stage 2)")
    # long keys (an expert deployment's names its flags) wrap; the numbers never do
    table.add_column("strategy", overflow="fold", min_width=24)
    table.add_column("best placement", overflow="fold", min_width=16)
    for col in ("step ms", "exposed comm ms", "jax-default ms", "GiB/device"):
        table.add_column(col, justify="right", no_wrap=True)
    table.add_column("note")
    chosen = d["strategy"]["key"]
    for a in d["alternatives"]:
        mem = a.get("memory_bytes_per_device")
        table.add_row(
            escape(a["strategy"]), escape(a.get("placement") or "-"), ms(a.get("step_seconds")),
            ms(a.get("exposed_comm_seconds")), ms(a.get("jax_default_step_seconds")),
            "-" if mem is None else f"{mem / 2**30:.2f}",
            escape(a.get("dropped") or ("chosen" if a["strategy"] == chosen else "")),
            style="bold" if a["strategy"] == chosen else None,
        )
    console.print(table)
    pred = d["prediction"]
    console.print(
        f"[bold]plan[/bold]: {escape(chosen)} on placement {escape(d['placement']['name'])}: predicted step "
        f"{ms(pred['step_seconds'])} ms (compute {ms(pred['compute_seconds'])} ms, exposed communication "
        f"{ms(pred['exposed_comm_seconds'])} ms)"
        + (" (not compiled: Stage 1's Q1 bound; see the note)" if pred.get("basis") == "q1" else "")
        + (" [from cache]" if from_cache else "")
    )
    if "video_time" in d:
        console.print(f"  {escape(video_time_line(d['video_time']))}")
    for name, label in (("same_strategy_jax_default", "same strategy on jax-default"), ("expert", "expert deployment")):
        base = d.get("baselines", {}).get(name)
        if base and "speedup_of_plan" in base:
            console.print(f"  speedup over {label} ({escape(base['strategy'])}): {base['speedup_of_plan']:.3f}x "
                          f"({ms(base['step_seconds'])} ms)")
        elif base:
            console.print(f"  {label}: {escape(str(base.get('dropped')))}")
    flags = d.get("compiler", {}).get("libtpu_args", "")
    console.print(f"  compiler flags: {escape(flags) if flags else 'none (libtpu defaults)'}")
    t = d["timings"]
    console.print("  planning time: " + ", ".join(f"{k} {v:.1f} s" for k, v in t.items()))
    for note in d.get("notes", []):
        console.print(f"  note: {escape(note)}")
    if out_path:
        console.print(f"  wrote {escape(out_path)}")
    if report_dir:
        console.print(f"  report in {escape(report_dir)}/index.html")
