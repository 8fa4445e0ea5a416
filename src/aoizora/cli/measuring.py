"""`aoizora measure --per-device/--splash`: a plan's or a request's candidates timed on the chip present."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from aoizora.cli.base import print_json
from aoizora.cli.paths import _check_output_dir, _check_output_file
from aoizora.errors import MeasureError


def _space_and_strategies(plan_path: str | None, model: str | None, topology_name: str | None,
                          resolution: str | None, frames: int | None, top_k: int,
                          strategy_keys: tuple[str, ...]) -> tuple[Any, Any, list[Any], str]:
    """(space, topology, strategies, plan flags) of a plan (its strategy, then the Stage 1 Top-K it
    kept) or of a request (the given strategies, else Stage 1's Top-K)."""
    from aoizora.api import wan_request, wan_request_space
    from aoizora.models.wan.transformer.strategy import Strategy
    from aoizora.topology import get_topology

    flags = ""
    if plan_path is not None:
        if model or topology_name or resolution or frames:
            raise click.UsageError("--plan says the model, slice and video; drop --model, --topology, --resolution "
                                   "and --frames, or drop --plan")
        from aoizora.plan import load_plan

        plan = load_plan(plan_path)
        workload = plan.data["workload"]
        if "mesh" not in plan.strategy:
            raise MeasureError("this plan is not of a Wan model; `aoizora measure --per-device` measures Wan plans")
        shapes = workload["shapes"]
        model, topology_name = workload["name"], plan.data["topology"]["name"]
        resolution, frames = f"{shapes['width']}x{shapes['height']}", int(shapes["frames"])
        flags = plan.data.get("compiler", {}).get("libtpu_args", "") or ""
        kept = sorted((e for e in plan.data.get("stage1", {}).get("entries", []) if e.get("rank")),
                      key=lambda e: e["rank"])
        keys = list(strategy_keys) or [plan.strategy["key"], *[e["key"] for e in kept][:top_k]]
    elif model is None or topology_name is None:
        raise click.UsageError("give --plan PLAN, or --model and --topology (a request)")
    else:
        keys = list(strategy_keys)
    topo = get_topology(topology_name)
    request = wan_request(model, resolution, frames, kernel=None, from_maxdiffusion=None, topology=topo)
    space = wan_request_space(request, topo, vae_decode=False)
    if not keys:
        from aoizora.stage1 import default_stage1_cache, run_stage1

        keys = [e.key for e in run_stage1(space, topo, top_k=top_k, cache=default_stage1_cache()).ranked[:top_k]]
    strategies = list(dict.fromkeys(Strategy.from_key(k) for k in keys))
    return space, topo, strategies, flags


def measure_candidates(*, plan_path: str | None, model: str | None, topology_name: str | None,
                       resolution: str | None, frames: int | None, top_k: int, strategy_keys: tuple[str, ...],
                       per_device: bool, splash: bool, layers: int, runs: int, workers: int, out_path: str | None,
                       report_dir: str | None, as_json: bool, libtpu_args: str | None,
                       op_profile: bool = False) -> None:
    from aoizora.measure import chip
    from aoizora.measure.candidates import per_device_rows, splash_rows
    from aoizora.measure.records import document, write_document
    from aoizora.report.measured import PAGE, write_measured_page
    from aoizora.toolchain import CompilerFlags

    if plan_path is None and (model is None or topology_name is None):
        raise click.UsageError("give --plan PLAN, or --model and --topology (a request)")
    _check_output_file(out_path, "--out")
    _check_output_dir(report_dir, "--report", [Path(report_dir) / PAGE] if report_dir else ())
    chip.tpu_device()  # refuses at once on a host without a TPU, before any lowering
    space, topo, strategies, plan_flags = _space_and_strategies(plan_path, model, topology_name, resolution,
                                                                frames, top_k, strategy_keys)
    flags = CompilerFlags.parse(plan_flags).merged(CompilerFlags.parse(libtpu_args))
    say = (lambda _text: None) if as_json else click.echo
    common = {"topology": topo.name, "workload": space.workload(), "strategies": [s.key() for s in strategies]}
    docs: list[dict[str, Any]] = []

    def partial(kind: str) -> Any:  # the rows so far, kept in --out as an incomplete document
        if out_path is None:
            return None
        return lambda rows: write_document({"kind": "measure", "complete": False,
                                            "documents": [*docs, document(kind, rows, **common)]}, out_path)

    if per_device:
        rows = per_device_rows(space, topo, strategies, layers=layers, runs=runs, flags=flags, workers=workers, say=say,
                               on_row=partial("per-device"), op_profile=op_profile)
        docs.append(document("per-device", rows, **common))
    if splash:
        rows = splash_rows(space, topo, strategies, runs=runs, workers=workers, say=say, on_row=partial("splash"))
        docs.append(document("splash", rows, **common))
    result: dict[str, Any] = docs[0] if len(docs) == 1 else {"kind": "measure", "documents": docs}
    if out_path:
        write_document(result, out_path)
    if report_dir:
        write_measured_page(docs, report_dir)
    if as_json:
        print_json(result)
