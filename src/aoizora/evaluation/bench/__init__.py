"""`aoizora bench`: aoizora against the expert deployment, a logical-only search and the oracle."""

from aoizora.evaluation.bench.baselines import AlphaBeta, LogicalChoice, logical_search
from aoizora.evaluation.bench.grid import GRIDS, Cell, full_grid, held_out_grid, parse_cell, quick_grid
from aoizora.evaluation.bench.grid_run import run_bench
from aoizora.evaluation.bench.harness import BenchOptions, NoStrategyFits, cell_metrics, run_cell
from aoizora.evaluation.bench.report import markdown, output_files, summary, write_outputs

__all__ = [
    "GRIDS", "AlphaBeta", "BenchOptions", "Cell", "LogicalChoice", "NoStrategyFits", "cell_metrics", "full_grid",
    "held_out_grid", "logical_search", "markdown", "output_files", "parse_cell", "quick_grid", "run_bench",
    "run_cell", "summary", "write_outputs",
]
