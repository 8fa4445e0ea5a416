"""The HTML page of a chip measurement (`aoizora measure --per-device/--splash --report DIR`)."""

from __future__ import annotations

import html
import statistics
from pathlib import Path
from typing import Any

from aoizora.report.html import _ms, _table

PAGE = "measured.html"


def measured_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """(headers, rows) of a measurement document: each program's median against its prediction."""
    if doc["kind"] == "per-device":
        headers = ["strategy", "layers", "measured ms", "predicted ms", "measured / predicted", "replaced"]
        rows = [[r["key"], r["layers"], _ms(r["median_seconds"]),
                 _ms(r["predicted"]["seconds"] if r.get("predicted") else None), _ratio(r, "per-device"),
                 ", ".join(f"{k} x{n}" for k, n in r["replaced"].items()) or "-"] for r in doc["rows"]]
    else:
        headers = ["call", "tile", "limit KiB", "measured ms", "predicted ms", "measured / predicted"]
        rows = [[f"b{r['batch']} h{r['heads']} q{r['lq']} k{r['lk']}{' lse' if r['residuals'] else ''}", r["blocks"],
                 r["limit_kib"] or "default", _ms(r["median_seconds"]) if r["refused"] is None else "refused",
                 _ms(r["predicted_seconds"]), _ratio(r, "splash")] for r in doc["rows"]]
    return headers, rows


def kind_rows(doc: dict[str, Any]) -> tuple[list[str], list[list[Any]]]:
    """(headers, rows) of a per-device document measured with `--op-profile`: per program and kind
    of operation, the chip's time against Q2's (each row's `ops_by_kind`); none without profiles."""
    headers = ["strategy", "kind", "measured ms", "predicted ms", "measured / predicted"]
    rows = []
    for r in doc["rows"]:
        for kind, part in (r.get("ops_by_kind") or {}).items():
            predicted, measured = part["predicted_s"], part["measured_s"]
            rows.append([r["key"], kind, _ms(measured), _ms(predicted) if predicted else "-",
                         f"{measured / predicted:.3f}" if predicted else "-"])
    return headers, rows


def _ratio(row: dict[str, Any], kind: str) -> str:
    predicted = (row["predicted"] or {}).get("seconds") if kind == "per-device" else row["predicted_seconds"]
    if row["median_seconds"] is None or not predicted:
        return "-"
    return f"{row['median_seconds'] / predicted:.3f}"


def write_measured_page(docs: list[dict[str, Any]], out_dir: str | Path) -> Path:
    """Write the page of `docs` (one per kind measured) into `out_dir`; its path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    parts = []
    for doc in docs:
        headers, rows = measured_rows(doc)
        ratios = [float(r[headers.index("measured / predicted")]) for r in rows
                  if r[headers.index("measured / predicted")] != "-"]
        chip = doc.get("measured_on", {}).get("device_kind", "?")
        summary = (f"median measured / predicted {statistics.median(ratios):.3f} over {len(ratios)} programs"
                   if ratios else "nothing ran")
        parts.append(f"<h2>{html.escape(doc['kind'])}: measured on a {html.escape(chip)}</h2>"
                     f"<p>{html.escape(summary)}; toolchain {html.escape(str(doc.get('toolchain')))}, "
                     f"{html.escape(doc.get('date', ''))}</p>" + _table(headers, rows))
        if doc["kind"] == "per-device":
            kind_headers, by_kind = kind_rows(doc)
            if by_kind:
                parts.append("<h3>each operation on the chip, by kind (--op-profile)</h3>"
                             "<p>splash calls (kernel) against the splash model, the rest against the compiler's "
                             "estimate as Q2 costs it; unestimated operations are in no prediction</p>"
                             + _table(kind_headers, by_kind))
    page = out / PAGE
    tmp = page.with_name(PAGE + ".partial")
    tmp.write_text("<!doctype html><html><head><meta charset='utf-8'><title>aoizora: measured on a chip</title>"
                   "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;border-bottom:1px solid #ddd}"
                   "</style></head><body><h1>Measured against predicted</h1>" + "".join(parts) + "</body></html>\n")
    tmp.replace(page)
    return page
