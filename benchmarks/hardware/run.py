"""Run the hardware reference suite: published TPU measurements against aoizora's predictions.

    .venv/bin/python benchmarks/hardware/run.py [--json OUT.json] [--only SUBSTRING ...]

For every entry: the published figure, its source, the setup as published, and the predictions
of Q2 and of the reference simulator for the same program compiled by libtpu for the same slice
and device order (compile-only; the compile cache makes reruns fast). Timed entries print
predicted / measured; comparisons print each configuration and the measured and predicted
ratios between them. An entry the tree cannot build yet (a slice or hardware profile it does
not know) is reported as "not runnable: <reason>" and the run goes on.
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import ComparisonEntry, Entry, NotRunnable, PipelineEntry, Prediction, TimedEntry, predict  # noqa: E402

MODULES = ("scaling_book", "marin_ppermute", "ironwood_all_gather", "maxtext_1239", "maxdiffusion_wan",
           "maxdiffusion_custom_kernels", "maxdiffusion_readme_ring", "maxdiffusion_batch_scaling",
           "maxdiffusion_ulysses_fixed_m", "maxdiffusion_ulysses_forms", "gpu_tpu_pedia")


def all_entries() -> list[Entry]:
    found: list[Entry] = []
    for name in MODULES:
        found.extend(importlib.import_module(name).entries())
    return found


def _prediction_json(p: Prediction) -> dict[str, Any]:
    return {
        "q2_seconds": p.q2_s, "sim_seconds": p.sim_s, "q2_comm_seconds": p.q2_comm_s,
        "sim_comm_seconds": p.sim_comm_s, "compute_seconds": p.compute_s, "collectives": p.collectives,
        "compile_seconds": p.compile_seconds, "compile_cached": p.from_cache,
    }


def run_timed(entry: TimedEntry, cache: Any) -> dict[str, Any]:
    p = predict(entry.config, cache)
    return {
        "kind": "timed", "measured_seconds": entry.measured_s, **_prediction_json(p),
        "q2_over_measured": p.q2_s / entry.measured_s, "sim_over_measured": p.sim_s / entry.measured_s,
    }


def run_comparison(entry: ComparisonEntry, cache: Any) -> dict[str, Any]:
    preds = [predict(c, cache) for c in entry.configs]
    configs = []
    for c, m, p in zip(entry.configs, entry.measured, preds, strict=True):
        row: dict[str, Any] = {"name": c.name, "setup": c.setup, "kernel_profile": c.kernel_profile, "measured": m,
                               **_prediction_json(p)}
        if entry.measured_unit == "s":
            row["q2_over_measured"] = p.q2_s / m
            row["sim_over_measured"] = p.sim_s / m
        configs.append(row)
    # speed of each configuration relative to the first (>1: faster), measured and predicted
    def speed(value: float) -> float:
        return value if entry.higher_is_better else 1.0 / value

    base_m = speed(entry.measured[0])
    rel = [{
        "name": c.name,
        "measured": speed(m) / base_m,
        "q2": preds[0].q2_s / p.q2_s,
        "sim": preds[0].sim_s / p.sim_s,
        "q2_comm": preds[0].q2_comm_s / p.q2_comm_s if p.q2_comm_s else math.nan,
        "sim_comm": preds[0].sim_comm_s / p.sim_comm_s if p.sim_comm_s else math.nan,
    } for c, m, p in zip(entry.configs, entry.measured, preds, strict=True)]

    def order(values: list[float]) -> list[str]:
        """Names fastest first; configurations within 0.1 % of each other are one tie ("a = b")."""
        ranked = sorted(range(len(values)), key=lambda i: -values[i])
        out: list[str] = []
        for k, i in enumerate(ranked):
            if k and abs(values[i] - values[ranked[k - 1]]) <= 1e-3 * values[ranked[k - 1]]:
                out[-1] += f" = {entry.configs[i].name}"
            else:
                out.append(entry.configs[i].name)
        return out

    return {
        "kind": "comparison", "unit": entry.measured_unit, "configs": configs, "speed_vs_first": rel,
        "measured_order_fastest_first": order([r["measured"] for r in rel]),
        "q2_order_fastest_first": order([r["q2"] for r in rel]),
        "sim_order_fastest_first": order([r["sim"] for r in rel]),
    }


def run_pipeline(entry: PipelineEntry, cache: Any) -> dict[str, Any]:
    """Step times predicted for each configuration against end-to-end generation times.

    The work outside the steps is the same for every configuration, so the comparison is of
    differences to the fastest configuration: measured (T_i - T_best) / steps against predicted
    s_i - s_best. The predicted step of the measured-fastest configuration also implies how long
    the work outside the steps took (T_best - steps x s_best); with that, the measured step ratio
    to the fastest is 1 + (T_i - T_best) / (steps x s_best), compared with the predicted s_i / s_best.
    """
    preds = [predict(c, cache) for c in entry.configs]
    best = min(range(len(entry.configs)), key=lambda i: entry.measured_total_s[i])
    out: dict[str, Any] = {"kind": "pipeline", "steps": entry.steps, "measured_fastest": entry.configs[best].name,
                           "configs": []}
    for model in ("q2", "sim"):
        step = [getattr(p, f"{model}_s") for p in preds]
        outside = entry.measured_total_s[best] - entry.steps * step[best]
        out[f"{model}_implied_outside_steps_seconds"] = outside
        fastest_first = sorted(range(len(step)), key=step.__getitem__)
        out[f"{model}_order_fastest_first"] = [entry.configs[i].name for i in fastest_first]
    out["measured_order_fastest_first"] = [entry.configs[i].name for i in
                                           sorted(range(len(preds)), key=lambda i: entry.measured_total_s[i])]
    for i, (c, p) in enumerate(zip(entry.configs, preds, strict=True)):
        row: dict[str, Any] = {"name": c.name, "setup": c.setup, "kernel_profile": c.kernel_profile,
                               "measured_total_seconds": entry.measured_total_s[i],
                               **_prediction_json(p),
                               "measured_step_difference_seconds":
                                   (entry.measured_total_s[i] - entry.measured_total_s[best])
                               / entry.steps}
        for model in ("q2", "sim"):
            step_i, step_b = getattr(p, f"{model}_s"), getattr(preds[best], f"{model}_s")
            row[f"{model}_step_difference_seconds"] = step_i - step_b
            row[f"{model}_step_ratio_to_fastest"] = step_i / step_b
            row[f"measured_step_ratio_to_fastest_given_{model}"] = (
                1 + (entry.measured_total_s[i] - entry.measured_total_s[best]) / (entry.steps * step_b))
        out["configs"].append(row)
    return out


def run_entry(entry: Entry, cache: Any) -> dict[str, Any]:
    head: dict[str, Any] = {"key": entry.key, "title": entry.title, "source": entry.source.to_json(),
                            "notes": entry.notes, "basis": entry.basis}
    if isinstance(entry, TimedEntry):
        head.update(setup=entry.config.setup, topology=entry.config.topology, measured_note=entry.measured_note,
                    group=entry.group, kernel_profile=entry.config.kernel_profile)
    try:
        if isinstance(entry, TimedEntry):
            body = run_timed(entry, cache)
        elif isinstance(entry, PipelineEntry):
            body = run_pipeline(entry, cache)
        else:
            body = run_comparison(entry, cache)
    except NotRunnable as exc:
        return {**head, "runnable": False, "reason": str(exc).splitlines()[0]}
    return {**head, "runnable": True, **body}


def _json_safe(value: Any) -> Any:
    """NaN and infinities are not JSON: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:,.1f}"


def print_table(results: list[dict[str, Any]]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="Hardware reference suite: measured vs predicted (Q2, simulator)")
    for col in ("entry", "slice", "measured", "Q2", "sim", "Q2/meas", "sim/meas", "note"):
        table.add_column(col, justify="left" if col in ("entry", "slice", "note") else "right", no_wrap=col != "note")
    for r in results:
        if not r["runnable"]:
            table.add_row(r["key"], r.get("topology", ""), "", "", "", "", "", f"not runnable: {r['reason']}")
            continue
        if r["kind"] == "pipeline":
            _pipeline_rows(table, r)
            continue
        if r["kind"] == "timed":
            table.add_row(r["key"], r["topology"], _us(r["measured_seconds"]) + " us", _us(r["q2_seconds"]) + " us",
                          _us(r["sim_seconds"]) + " us", f"{r['q2_over_measured']:.2f}",
                          f"{r['sim_over_measured']:.2f}",
                          r["measured_note"])
            continue
        for c in r["configs"]:
            measured = (_us(c["measured"]) + " us") if r["unit"] == "s" else f"{c['measured']:g} {r['unit']}"
            ratio_q2 = f"{c['q2_over_measured']:.2f}" if "q2_over_measured" in c else ""
            ratio_sim = f"{c['sim_over_measured']:.2f}" if "sim_over_measured" in c else ""
            table.add_row(f"{r['key']}: {c['name']}", "", measured, _us(c["q2_seconds"]) + " us",
                          _us(c["sim_seconds"]) + " us", ratio_q2, ratio_sim, "")
        first = r["speed_vs_first"][0]["name"]
        for rel in r["speed_vs_first"][1:]:
            table.add_row(
                f"  speed, {rel['name']} / {first}", "", f"x{rel['measured']:.3f}", f"x{rel['q2']:.3f}",
                f"x{rel['sim']:.3f}", "", "",
                f"collectives alone: Q2 x{rel['q2_comm']:.3f}, sim x{rel['sim_comm']:.3f}")
        table.add_row("  fastest first", "", "", "", "", "", "",
                      f"measured: {' > '.join(r['measured_order_fastest_first'])}; "
                      f"Q2: {' > '.join(r['q2_order_fastest_first'])}; sim: {' > '.join(r['sim_order_fastest_first'])}")
    Console(width=230).print(table)


def _pipeline_rows(table: Any, r: dict[str, Any]) -> None:
    """A pipeline entry: per configuration the measured total, the predicted step (Q2, sim), the
    measured and predicted step differences to the fastest and the step ratios."""
    for c in r["configs"]:
        table.add_row(
            f"{r['key']}: {c['name']}", "", f"{c['measured_total_seconds']:.1f} s total",
            f"{c['q2_seconds']:.3f} s/step", f"{c['sim_seconds']:.3f} s/step", "", "",
            f"step - fastest: measured {c['measured_step_difference_seconds']:+.3f} s, Q2 "
            f"{c['q2_step_difference_seconds']:+.3f} s, sim {c['sim_step_difference_seconds']:+.3f} s; step ratio: "
            f"measured {c['measured_step_ratio_to_fastest_given_q2']:.3f} (given Q2's step), Q2 "
            f"{c['q2_step_ratio_to_fastest']:.3f}, sim {c['sim_step_ratio_to_fastest']:.3f}")
    table.add_row("  fastest first", "", "", "", "", "", "",
                  f"measured: {' > '.join(r['measured_order_fastest_first'])}; "
                  f"Q2: {' > '.join(r['q2_order_fastest_first'])}; "
                  f"sim: {' > '.join(r['sim_order_fastest_first'])}; work outside the {r['steps']} steps implied: "
                  f"Q2 {r['q2_implied_outside_steps_seconds']:.1f} s, "
                  f"sim {r['sim_implied_outside_steps_seconds']:.1f} s")


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="also write the results as strict JSON ('-' for stdout)")
    parser.add_argument("--only", nargs="*", default=[], help="run only entries whose key contains one of these")
    args = parser.parse_args(argv)

    from aoizora.stage2.compile_cache import default_compile_cache
    from aoizora.toolchain import toolchain_versions

    cache = default_compile_cache()
    entries = [e for e in all_entries() if not args.only or any(s in e.key for s in args.only)]
    results = []
    for entry in entries:
        print(f"... {entry.key}", file=sys.stderr, flush=True)
        results.append(run_entry(entry, cache))
    doc = {"suite": "aoizora hardware reference suite", "commit": _commit(), "toolchain": toolchain_versions(),
           "command": "python benchmarks/hardware/run.py" + (" --only " + " ".join(args.only) if args.only else ""),
           "entries": results}
    if args.json == "-":
        print(json.dumps(_json_safe(doc), allow_nan=False, separators=(",", ":")))
    else:
        print_table(results)
        if args.json:
            Path(args.json).parent.mkdir(parents=True, exist_ok=True)
            Path(args.json).write_text(json.dumps(_json_safe(doc), allow_nan=False, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
