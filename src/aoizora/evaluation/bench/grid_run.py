"""A bench run: every cell computed (or reused from an earlier run), then the tables and plots."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aoizora.evaluation.bench.grid import Cell
from aoizora.evaluation.bench.harness import BenchOptions, cell_metrics, run_cell_with_fallback
from aoizora.evaluation.bench.report import write_outputs
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compile_workers import CompileExecutor
from aoizora.store import write_json_atomic


def run_bench(cells: list[Cell] | None, opts: BenchOptions, out_dir: str | os.PathLike[str], *,
              compile_cache: CompileCache | None = None, resume: bool = True, progress: bool = True,
              console: Any = None, log: Callable[[str], None] = lambda _: None,
              run_missing: bool = True, executor: CompileExecutor | None = None) -> list[dict[str, Any]]:
    """Run every cell (each written to `out_dir/cells/` as it finishes; finished cells with the same
    options are reused when `resume`), then the table, CSV, JSON and plots in `out_dir`.

    `run_missing=False` only reports the cells already finished (e.g. while a long grid runs, or
    published per-cell data), whichever version of aoizora computed them; `cells=None` then reports
    every cell in `out_dir/cells/`. A run needs the cells it is to compute. `executor`: where the
    compiles run (default: local child processes, see `run_cell`)."""
    cell_dir = Path(out_dir) / "cells"
    if run_missing:
        if cells is None:
            from aoizora.errors import BenchError

            raise BenchError("a bench run needs its cells (cells=None only reports finished cells)")
        cell_dir.mkdir(parents=True, exist_ok=True)
    paths = (sorted(cell_dir.glob("*.json"), key=_grid_order) if cells is None
             else [cell_dir / f"{cell.id}.json" for cell in cells])
    docs = []
    todo: list[Cell | None] = list(cells) if cells is not None else [None] * len(paths)
    for cell, path in zip(todo, paths, strict=True):
        # --report-only tabulates what was computed, by whichever version of aoizora (each cell
        # records its source fingerprint); a run recomputes cells from other code
        doc = _read_cell(path, opts, same_source=run_missing) if resume or not run_missing else None
        if doc is None and not run_missing:
            continue
        if doc is None:
            assert cell is not None  # a run has its cells (checked above)
            from aoizora.stage2.compile_cache import default_compile_cache

            compile_cache = compile_cache or default_compile_cache()
            doc = run_cell_with_fallback(cell, opts, compile_cache, progress=progress, console=console, log=log,
                                         executor=executor)
            # written as Python's json writes it (the reader, `_read_cell`, is Python's json too)
            write_json_atomic(path, doc, indent=1, strict=False)
        else:
            log(f"reused {path}")
        docs.append(doc)
    if not docs:
        from aoizora.errors import BenchError

        raise BenchError(f"no finished cell with these options in {out_dir}; run without --report-only first")
    write_outputs(docs, out_dir)
    return docs


def _read_cell(path: Path, opts: BenchOptions, same_source: bool = True) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    from aoizora.toolchain import source_fingerprint

    # a cell computed by other code is stale (recomputing it reuses the compile cache); a report
    # (`same_source=False`) takes finished cells whatever their oracle sweep and K (the table says which)
    same = doc.get("source") == ("measured" if opts.measure else "simulated")
    if same_source:
        same = (same and doc.get("top_k") == opts.top_k and doc.get("oracle_complete") == opts.oracle
                and doc.get("libtpu_args", "") == str(opts.flags)
                # an exhaustive oracle answers a bounded request, not the other way round
                and (not opts.oracle or opts.oracle_bound or not doc.get("oracle_bounded", False))
                and doc.get("aoizora_source") == source_fingerprint())
    if not same or "metrics" not in doc:
        return None
    doc["metrics"] = cell_metrics(doc)  # recomputed: metrics follow the code, the raw results do not change
    return doc


def _grid_order(path: Path) -> tuple[str, int, int, str]:
    """Cell files in the grid's order: topology, resolution, frames (ids are TOPO_RESp_Ff_MODEL)."""
    parts = path.stem.split("_", 3)
    if len(parts) != 4 or not parts[1][:-1].isdigit() or not parts[2][:-1].isdigit():
        return (path.stem, 0, 0, "")
    return (parts[0], int(parts[1][:-1]), int(parts[2][:-1]), parts[3])
