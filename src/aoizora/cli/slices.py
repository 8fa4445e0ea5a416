"""`aoizora compare`: which slice to rent, by planning one Wan video on each."""

from __future__ import annotations

import sys
from typing import Any

import click

from aoizora.cli.base import _Seconds, _workers_option, cli, print_json
from aoizora.cli.paths import _check_output_dir, _check_outputs_apart
from aoizora.compare import MIXED
from aoizora.defaults import DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_TOP_K, DEFAULT_VERIFY_TOP
from aoizora.errors import ArgumentError


@cli.command()
@click.option("--model", required=True, metavar="MODEL",
              help="wan2.1-t2v-1.3b, wan2.1-t2v-14b, wan2.1-i2v-14b, wan2.2-t2v-a14b, wan2.2-i2v-a14b or "
                   "wan2.2-ti2v-5b.")
@click.option("--slices", "slice_names", required=True, metavar="TOPO,TOPO,...",
              help="The slices to compare, separated by commas, e.g. v5e:2x4,v6e:2x4,tpu7x:2x2x1.")
@click.option("--resolution", default=None, help="480p, 720p or WIDTHxHEIGHT.  [default: 720p]")
@click.option("--frames", type=int, default=None, help="Video frames (4n+1).  [default: 81]")
@click.option("--prices", "prices_path", type=click.Path(dir_okay=False), default=None, metavar="FILE",
              help="Prices per chip-hour per TPU generation, as JSON in the format of aoizora's own "
                   "(aoizora/data/tpu_prices.json, public on-demand list prices with their source and date).  "
                   "[default: aoizora's]")
@click.option("--max-video-seconds", type=_Seconds(), default=None, metavar="SECONDS",
              help="Latency target: mark the slices that make a video within it and pick the cheapest per "
                   "video among them.  [default: none; the cheapest per video]")
@click.option("--out", "out_dir", type=click.Path(file_okay=False), default=None,
              help="Write compare.json, compare.png (video time against cost per video) and index.html here.")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON.")
@click.option("--top-k", type=click.IntRange(min=1), default=DEFAULT_TOP_K, show_default=True,
              help="Strategies Stage 1 passes to Stage 2, on each slice.")
@click.option("--limit-check/--no-limit-check", "check_limits", default=True, show_default=True,
              help="Before the plan keeps a scoped-VMEM limit its candidates were compiled without (one "
                   "raised by the tile search), compile the leading pair at it and keep whichever is faster by "
                   "Q2: one compile at the raised limit, several times slower than the others on v5e. "
                   "--no-limit-check plans from the default-limit compiles alone.")
@click.option("--verify-top", type=click.IntRange(min=0), default=DEFAULT_VERIFY_TOP, show_default=True,
              help="Best pairs recompiled with their own device order before choosing, on each slice.")
@click.option("--no-cache", is_flag=True, help="Plan every slice again (plan, Stage 1 and compile caches unused).")
@click.option("--no-vae-decode", is_flag=True,
              help="Skip the VAE decode's compile: each video time is then the denoising steps alone, and says so.")
@click.option("--compile-timeout", type=_Seconds(), default=DEFAULT_COMPILE_TIMEOUT_S, show_default=True,
              help="CPU seconds per TPU compile (its process's, so a busy host changes no plan; on Ray: seconds).")
@_workers_option
def compare(model: str, slice_names: str, resolution: str | None, frames: int | None, prices_path: str | None,
            max_video_seconds: float | None, out_dir: str | None, as_json: bool, top_k: int, check_limits: bool,
            verify_top: int,
            no_cache: bool, no_vae_decode: bool, compile_timeout: float, workers: int, executor: str,
            ray_cpus_per_compile: float | None) -> None:
    """Plan a Wan video on each slice and compare them: per slice the chosen strategy, the video time,
    videos per hour, chip-hours and cost per video; the cheapest slice within --max-video-seconds."""
    from rich.console import Console

    from aoizora.compare import compare_wan, load_prices, parse_slices
    from aoizora.report.comparison import comparison_files, write_comparison
    from aoizora.stage2 import executor_from_spec

    written = comparison_files(out_dir) if out_dir else []
    _check_output_dir(out_dir, "--out", written)
    _check_outputs_apart([("--out", out_dir, written)], (("--prices", prices_path),) if prices_path else ())
    prices = load_prices(prices_path)  # a bad file is refused before any planning
    try:
        topologies = parse_slices(slice_names, "--slices")
    except ArgumentError as exc:
        raise click.UsageError(str(exc)) from None
    console = Console(stderr=True, width=None if sys.stderr.isatty() else 150)

    def announce(i: int, topo: Any) -> None:
        if not as_json:
            console.print(f"[bold]{topo.name}[/bold] ({i + 1} of {len(topologies)})")

    with executor_from_spec(executor, workers, cpus_per_compile=ray_cpus_per_compile) as pool:
        result = compare_wan(model, [t.name for t in topologies], resolution, frames, prices=prices,
                             max_video_seconds=max_video_seconds, on_slice=announce, top_k=top_k,
                             vae_decode=not no_vae_decode,
                             verify_top=verify_top, check_limits=check_limits, use_cache=not no_cache,
                             compile_timeout_s=compile_timeout,
                             progress=not as_json, console=console, executor=pool)
    doc = result.to_json()
    if out_dir:
        write_comparison(doc, out_dir)
    if as_json:
        print_json(doc)
    else:
        _print_comparison(doc, out_dir)


def _print_comparison(doc: dict[str, Any], out_dir: str | None) -> None:
    """The comparison as a table, then what the video time includes, the prices and the pick."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from aoizora.report.comparison import amount

    currency = doc["prices"]["currency"]
    target = doc["max_video_seconds"]
    table = Table(title=f"{doc['workload']['model']} {doc['workload']['resolution']} "
                        f"{doc['workload']['frames']} frames")
    for column in ("slice", "chips", "strategy", "video s", "videos/hour", "chip-h/video",
                   f"{currency}/chip-h", f"{currency}/video", *(["meets target"] if target is not None else [])):
        table.add_column(column, overflow="fold")
    for r in doc["slices"]:
        if r["video_seconds"] is None:
            cells = [escape(f"no plan: {r['error']}"), "-", "-", "-", "-", "-"]
        else:
            cells = [escape(r["strategy"]), f"{r['video_seconds']:,.1f}", f"{r['videos_per_hour']:,.2f}",
                     amount(r["chip_hours_per_video"]), amount(r["price"]["price_per_chip_hour"], currency),
                     amount(r["cost_per_video"], currency)]
        meets = [{True: "yes", False: "no", None: "-"}[r["meets_target"]]] if target is not None else []
        table.add_row(r["topology"], str(r["chips"]), *cells, *meets)
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    click.echo(f"video time: {doc['video_time_includes']}")
    if doc["video_time_includes"] == MIXED:
        for r in doc["slices"]:
            if r["video_time_includes"] is not None:
                click.echo(f"  {r['topology']}: {r['video_time_includes']}")
    prices = doc["prices"]
    missing = sorted({r["topology"] for r in doc["slices"] if r["price"]["price_per_chip_hour"] is None})
    click.echo(f"prices: {prices['origin']}, read {prices['read']}, {currency} per chip-hour"
               + (f"; no price for {', '.join(missing)} (pass --prices FILE)" if missing else ""))
    pick = doc["pick"]
    if pick["topology"] is not None:
        click.echo(f"pick: {pick['topology']}: {pick['reason']}")
    else:
        click.echo(f"pick: none: {pick['reason']}")
    if out_dir:
        click.echo(f"  wrote compare.json, compare.png and index.html into {out_dir}")
