"""The bench's outputs: a markdown table (stdout and table.md), CSV, JSON and plots.

A report may hold cells computed by another version of aoizora (published per-cell data read by
`aoizora bench --report-only`): each cell records the fingerprint of the source that computed it
(`aoizora_source`), and the table and CSV say which cells another source computed. Their metrics
are recomputed from their raw results by this code; their latencies are that code's."""

from __future__ import annotations

import csv
import json
import math
import os
from pathlib import Path
from typing import Any

from aoizora.stage2.outcomes import refused_for_memory

COLUMNS = [
    ("cell", "cell"), ("model", "model"), ("expert_ms", "expert ms"), ("logical_ms", "logical ms"),
    ("aoizora_ms", "aoizora ms"), ("oracle_ms", "oracle ms"), ("vs_expert", "× expert"), ("vs_logical", "× logical"),
    ("oracle_gap", "aoizora/oracle"), ("spread", "placement spread"), ("recall", "top-1 recall (rank, K)"),
    ("rho", "ρ Q2~sim"), ("pairs", "pairs"), ("stage1_s", "stage 1 s"), ("compile_s", "compile s"),
    ("score_s", "score s"), ("verify_s", "verify s"),
]


def _ms(x: float | None) -> str:
    return f"{x * 1e3:,.1f}" if x is not None else "–"


def _x(x: float | None, digits: int = 3) -> str:
    return f"{x:.{digits}f}" if x is not None else "–"


def current_source() -> str:
    """The fingerprint of the aoizora source running now (what a cell's `aoizora_source` is compared with)."""
    from aoizora.toolchain import source_fingerprint

    return source_fingerprint()


def other_code(doc: dict[str, Any], current: str) -> bool:
    """Whether another version of aoizora (another source fingerprint) computed this cell."""
    return doc.get("aoizora_source") != current


OTHER_CODE_MARK = " †"


def row(doc: dict[str, Any], current: str | None = None) -> dict[str, str]:
    """One table row, formatted for reading; `current`: the running source's fingerprint, to mark
    cells another version computed (None: not marked)."""
    m, c, t = doc["metrics"], doc["cell"], doc["planning_seconds"]
    lat = m["latency_seconds"]
    if m["top1_recall"] is None:
        # no recall without the full oracle; Stage 1's rank of the strategy aoizora chose still tells
        # how close to the Top-K edge the choice was
        rank = doc.get("stage1", {}).get("ranks", {}).get(doc["aoizora"]["strategy"])
        recall = f"– (oracle partial; pick at {rank}, K {doc['top_k']})" if rank else "– (oracle partial)"
    else:
        recall = f"{'yes' if m['top1_recall'] else 'no'} (rank {m['oracle']['stage1_rank']}, K {doc['top_k']})"
    model = c["model"].replace("wan2.1-t2v-", "")
    if doc.get("fallback_reason"):
        model += " (14B does not fit)"
    def contender(role: str) -> str:
        if lat[role] is not None:
            return _ms(lat[role])
        dropped = doc["strategies"].get(doc[role]["strategy"] or "", {}).get("dropped")
        if dropped is None:
            return "–"
        return "does not fit" if refused_for_memory(dropped) else "did not compile"

    return {
        "cell": f"{c['topology']} {c['resolution']} {c['frames']}f"
                + (OTHER_CODE_MARK if current is not None and other_code(doc, current) else ""),
        "model": model,
        "expert_ms": contender("expert"), "logical_ms": contender("logical"), "aoizora_ms": _ms(lat["aoizora"]),
        "oracle_ms": _ms(lat["oracle"]) + ("" if m["oracle"]["complete"] else "*"),
        "vs_expert": _x(m["speedup_over_expert"]), "vs_logical": _x(m["speedup_over_logical"]),
        "oracle_gap": _x(m["oracle_over_aoizora"]), "spread": _x(m["placement_spread"]), "recall": recall,
        "rho": _x(m["spearman_q2_sim"]), "pairs": str(m["pairs_scored"]),
        "stage1_s": f"{t.get('stage1', 0):.1f}",
        "compile_s": f"{t.get('compile', 0) + t.get('compile_cached', 0):.0f}",
        "score_s": f"{t.get('score', 0):.1f}", "verify_s": f"{t.get('verify', 0) + t.get('verify_cached', 0):.0f}",
    }


def _geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Geometric-mean and maximum speedups, recall over cells with a complete oracle, pooled ρ."""
    from scipy.stats import spearmanr

    ex = [d["metrics"]["speedup_over_expert"] for d in docs]
    alone = [d["metrics"].get("speedup_over_expert_search_only") for d in docs]
    lo = [d["metrics"]["speedup_over_logical"] for d in docs]
    gap = [d["metrics"]["oracle_over_aoizora"] for d in docs]
    recalls = [d["metrics"]["top1_recall"] for d in docs if d["metrics"]["top1_recall"] is not None]
    q2 = [p["q2_seconds"] for d in docs for p in d["pairs"]]
    sim = [p["sim_seconds"] for d in docs for p in d["pairs"]]
    return {
        "cells": len(docs),
        "speedup_over_expert": {"geomean": _geomean(ex), "max": max((x for x in ex if x), default=None)},
        # the search without the expert among its candidates (cells that recorded it)
        "speedup_over_expert_search_only": {"geomean": _geomean(alone),
                                            "max": max((x for x in alone if x), default=None),
                                            "min": min((x for x in alone if x), default=None)},
        "speedup_over_logical": {"geomean": _geomean(lo), "max": max((x for x in lo if x), default=None)},
        "aoizora_over_oracle": {"geomean": _geomean(gap), "max": max((x for x in gap if x), default=None)},
        "top1_recall": (sum(recalls) / len(recalls)) if recalls else None,
        "cells_with_complete_oracle": len(recalls),
        "max_k_for_full_recall": max((d["metrics"]["k_for_full_recall"] for d in docs
                                      if d["metrics"]["k_for_full_recall"] is not None), default=None),
        "within_cell_spearman_q2_sim": [d["metrics"]["spearman_q2_sim"] for d in docs],
        "pooled_spearman_q2_sim": _finite_or_none(float(spearmanr(q2, sim).statistic)) if len(q2) >= 3 else None,
    }


def _finite_or_none(x: float) -> float | None:
    """A statistic for JSON: None where it is undefined (NaN, e.g. every value ties)."""
    return x if math.isfinite(x) else None


#: results.csv: identifiers and categories in the text columns, numbers (or empty) in every other
#: column; milliseconds, ratios, counts and seconds as plain numbers, booleans as 0/1.
CSV_TEXT_COLUMNS = ["cell", "topology", "resolution", "model", "source", "aoizora_source", "expert_status",
                    "logical_status", "aoizora_strategy", "aoizora_placement", "oracle_strategy", "oracle_placement"]
CSV_NUMERIC_COLUMNS = [
    "frames", "fallback_to_1_3b", "other_code", "top_k", "oracle_complete", "oracle_bounded",
    "expert_ms", "logical_ms", "aoizora_ms", "oracle_ms", "speedup_over_expert", "speedup_over_logical",
    "aoizora_over_oracle", "placement_spread", "top1_recall", "oracle_stage1_rank", "aoizora_stage1_rank",
    "spearman_q2_sim", "spearman_q1_best_sim", "pairs_scored", "strategies_compiled", "strategies_pruned_by_q1",
    "strategies_failed_to_compile", "q1_bound_violations", "memory_estimate_max_rel_error",
    "stage1_s", "compile_s", "score_s", "verify_s",
]
CSV_COLUMNS = (CSV_TEXT_COLUMNS[:3] + ["frames"] + CSV_TEXT_COLUMNS[3:]
               + [c for c in CSV_NUMERIC_COLUMNS if c != "frames"])


def _status(doc: dict[str, Any], role: str) -> str:
    """Whether a contender has a latency: ok, does not fit (refused for HBM), did not compile, absent."""
    if doc["metrics"]["latency_seconds"][role] is not None:
        return "ok"
    dropped = doc["strategies"].get(doc[role]["strategy"] or "", {}).get("dropped")
    if dropped is None:
        return "absent"
    return "does not fit" if refused_for_memory(dropped) else "did not compile"


def csv_row(doc: dict[str, Any], current: str) -> dict[str, Any]:
    """One CSV row: numbers as numbers (None: empty), no units or notes in numeric columns."""
    m, c, t = doc["metrics"], doc["cell"], doc["planning_seconds"]
    lat = m["latency_seconds"]

    def ms(x: float | None) -> float | None:
        return x * 1e3 if x is not None else None

    def flag(x: bool | None) -> int | None:
        return None if x is None else int(bool(x))

    ranks = doc.get("stage1", {}).get("ranks", {})
    return {
        "cell": f"{c['topology']}/{c['resolution']}/{c['frames']}", "topology": c["topology"],
        "resolution": c["resolution"], "frames": c["frames"], "model": c["model"], "source": doc["source"],
        "aoizora_source": doc.get("aoizora_source", ""),
        "expert_status": _status(doc, "expert"), "logical_status": _status(doc, "logical"),
        "aoizora_strategy": doc["aoizora"]["strategy"], "aoizora_placement": doc["aoizora"]["placement"],
        "oracle_strategy": m["oracle"]["strategy"] or "", "oracle_placement": m["oracle"]["placement"] or "",
        "fallback_to_1_3b": flag(bool(doc.get("fallback_reason"))), "other_code": flag(other_code(doc, current)),
        "top_k": doc["top_k"], "oracle_complete": flag(m["oracle"]["complete"]),
        "oracle_bounded": flag(doc.get("oracle_bounded", False)),
        "expert_ms": ms(lat["expert"]), "logical_ms": ms(lat["logical"]), "aoizora_ms": ms(lat["aoizora"]),
        "oracle_ms": ms(lat["oracle"]), "speedup_over_expert": m["speedup_over_expert"],
        "speedup_over_logical": m["speedup_over_logical"], "aoizora_over_oracle": m["oracle_over_aoizora"],
        "placement_spread": m["placement_spread"], "top1_recall": flag(m["top1_recall"]),
        "oracle_stage1_rank": m["oracle"]["stage1_rank"], "aoizora_stage1_rank": ranks.get(doc["aoizora"]["strategy"]),
        "spearman_q2_sim": m["spearman_q2_sim"], "spearman_q1_best_sim": m.get("spearman_q1_best_sim"),
        "pairs_scored": m["pairs_scored"], "strategies_compiled": m["strategies_compiled"],
        "strategies_pruned_by_q1": m.get("strategies_pruned_by_q1", 0),
        "strategies_failed_to_compile": len(m.get("strategies_failed_to_compile", [])),
        "q1_bound_violations": len(m.get("q1_bound_violations", [])),
        "memory_estimate_max_rel_error": m.get("memory_estimate_max_rel_error"),
        "stage1_s": t.get("stage1", 0.0), "compile_s": t.get("compile", 0.0) + t.get("compile_cached", 0.0),
        "score_s": t.get("score", 0.0), "verify_s": t.get("verify", 0.0) + t.get("verify_cached", 0.0),
    }


def markdown(docs: list[dict[str, Any]], current: str | None = None) -> str:
    """The table and its summary; cells computed by a source other than `current` (default: the
    running one) are marked and named below the table."""
    current = current or current_source()
    source = {d["source"] for d in docs}
    lines = [
        "| " + " | ".join(h for _, h in COLUMNS) + " |",
        "|" + "|".join("---" for _ in COLUMNS) + "|",
    ]
    for d in docs:
        r = row(d, current)
        lines.append("| " + " | ".join(r[k] for k, _ in COLUMNS) + " |")
    s = summary(docs)
    lines.append("")
    lines.append(
        f"Latencies: {'/'.join(sorted(source))}. Speedups over the expert: geomean "
        f"{_x(s['speedup_over_expert']['geomean'])}, "
        f"max {_x(s['speedup_over_expert']['max'])} (the shipped planner, which adds the expert to its Stage 2 "
        f"candidates; the search alone: geomean {_x(s['speedup_over_expert_search_only']['geomean'])}, min "
        f"{_x(s['speedup_over_expert_search_only']['min'])}); over the logical search: geomean "
        f"{_x(s['speedup_over_logical']['geomean'])}, max {_x(s['speedup_over_logical']['max'])}; "
        "aoizora/oracle geomean "
        f"{_x(s['aoizora_over_oracle']['geomean'])}, worst {_x(s['aoizora_over_oracle']['max'])}. "
        f"Top-1 recall {_x(s['top1_recall'], 2)} over {s['cells_with_complete_oracle']} cells with a complete oracle; "
        f"pooled ρ(Q2, sim) {_x(s['pooled_spearman_q2_sim'])}."
    )
    lines.append("Planning time: stage 1 and score are wall seconds of this run; compile and verify are libtpu's "
                 "seconds for the programs the planner compiled, counted at their original cost when the compile "
                 "cache already held them (the oracle shares that cache).")
    pruned = sum(len(d.get("pruned_by_q1", {})) for d in docs)
    if pruned:
        lines.append(f"The oracle did not compile {pruned} strategies whose Q1 (a lower bound on their step time "
                     "for every placement) was already above the best simulated pair of their cell; in those cells Q1 "
                     "stayed below the simulated latency of every compiled strategy (else nothing is pruned).")
    failed = sum(len(d["metrics"].get("strategies_failed_to_compile", [])) for d in docs)
    if failed:
        lines.append(f"{failed} {'strategy' if failed == 1 else 'strategies'} did not compile (timeout or compiler "
                     "error, not HBM): the oracle of their "
                     "cells is marked partial (`*`) and no recall is claimed there.")
    if any(not d["oracle_complete"] for d in docs):
        lines.append("`*` oracle over the strategies compiled anyway (aoizora's Top-K, expert, logical), not every "
                     "legal strategy: recall is not measured in such cells; \"pick at r\" is Stage 1's rank of the "
                     "strategy aoizora chose.")
    others = sorted({d.get("aoizora_source") or "unrecorded" for d in docs if other_code(d, current)})
    if others:
        lines.append(f"`†` computed by another version of aoizora (source fingerprint {', '.join(others)}; this "
                     f"code is {current}): the latencies, choices and timings are that version's, the metrics are "
                     "recomputed from its raw results by this code.")
    if any(d["source"] == "measured" and not all(m.get("on_planned_slice") for m in d.get("measured", {}).values())
           for d in docs):
        lines.append("**Measured on devices that are not the planned TPU slice (a small CPU stand-in config): "
                     "these timings say nothing about a TPU.**")
    return "\n".join(lines)


#: The files `write_outputs` writes into the bench folder (beside the cells/ folder of cell results).
OUTPUT_FILES: tuple[str, ...] = ("results.json", "results.csv", "table.md", "speedups.png", "q2_vs_sim.png")


def output_files(out_dir: str | Path) -> list[Path]:
    """The files `write_outputs` writes into `out_dir`."""
    return [Path(out_dir, name) for name in OUTPUT_FILES]


def write_outputs(docs: list[dict[str, Any]], out_dir: str | os.PathLike[str]) -> list[Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    path = out / "results.json"
    path.write_text(json.dumps({"summary": summary(docs), "cells": docs}, indent=1))
    written.append(path)
    current = current_source()
    path = out / "results.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_COLUMNS)
        w.writeheader()
        for d in docs:
            w.writerow(csv_row(d, current))
    written.append(path)
    path = out / "table.md"
    path.write_text(markdown(docs, current) + "\n")
    written.append(path)
    written += plots(docs, out)
    return written


def plots(docs: list[dict[str, Any]], out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    current = current_source()
    labels = [row(d, current)["cell"] for d in docs]
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(docs) + 2), 4))
    xs = range(len(docs))
    w = 0.38
    ax.bar([x - w / 2 for x in xs], [d["metrics"]["speedup_over_expert"] or 0 for d in docs], w, label="over expert")
    ax.bar([x + w / 2 for x in xs], [d["metrics"]["speedup_over_logical"] or 0 for d in docs], w,
           label="over logical search")
    ax.axhline(1.0, color="black", lw=0.8)
    ax.set_xticks(list(xs), labels, rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("speedup of aoizora's plan")
    ax.legend()
    fig.tight_layout()
    path = out / "speedups.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)

    fig, ax = plt.subplots(figsize=(5, 5))
    for d, label in zip(docs, labels, strict=True):
        ax.scatter([p["sim_seconds"] * 1e3 for p in d["pairs"]], [p["q2_seconds"] * 1e3 for p in d["pairs"]], s=8,
                   label=label)
    lim = [p for d in docs for p in d["pairs"]]
    if lim:
        lo = min(min(p["sim_seconds"], p["q2_seconds"]) for p in lim) * 1e3
        hi = max(max(p["sim_seconds"], p["q2_seconds"]) for p in lim) * 1e3
        ax.plot([lo, hi], [lo, hi], color="grey", lw=0.8, label="Q2 = simulator")
    ax.set_xlabel("simulator step time (ms)")
    ax.set_ylabel("Q2 step time (ms)")
    ax.legend(fontsize=6)
    fig.tight_layout()
    path = out / "q2_vs_sim.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    written.append(path)
    return written
