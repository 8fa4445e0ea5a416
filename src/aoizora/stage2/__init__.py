"""Stage 2: compile Stage 1's best strategies with the real TPU compiler, read their collectives
from the compiled HLO, score every placement of each with Q2.

Public API:
- `run_stage2` (`search.py`), its `Stage2Config` and `Stage2Result`, and the outcomes in it
  (`StrategyOutcome`, `Scored`, `Compiled`, and `lowest_pair`, the pair a plan chooses: `outcomes.py`);
- `compile_strategy` (one strategy over one device order, through the compile cache: `compiling.py`),
  `cached_compile` (a one-device lowered program through the compile cache),
  `drop_reason`, `refused_for_memory`, `memory_kind`, `MemoryKind`, `OUT_OF_HBM` and `OUT_OF_VMEM`
  (why a strategy was dropped);
- `BoundedSweep` (`sweep.py`): the compiles in bound order, pruned by Q1;
- `recompile_cannot_change_q2` (`verify.py`): when the leading pairs need no verifying recompile;
- `CompileCache`, `CompileRecord`, `default_compile_cache`: libtpu's output kept on disk;
- `CompileExecutor`, where compiles run: `CompileWorkers` (child processes, killed on timeout or
  Ctrl-C) or a Ray cluster's actors (`aoizora.stage2.ray_executor`); `executor_from_spec` makes one
  from a `--executor` value;
- `EarlyCompiles`: compiles started before Stage 2 (the experts, while Stage 1 lowers);
- `CompanionCompiles`, `ProgramCost`, `program_cost` (`companions.py`): the programs a plan costs
  besides the step (a video's VAE decode), compiled once beside Stage 2 and costed by Q2;
- `CompilePlacements` (`aoizora.stage2.compile_order`): the device order each strategy is compiled
  over, predicted best from Stage 1's collectives where the compiled program depends on it;
- `Stage2Summary`: what Stage 2 compiled, and what Q1 pruned;
- `TimeBudget`, `BudgetRecord` and `compile_timeout` (`budget.py`): a planning time budget, and what it cut.
"""

from aoizora.stage2.budget import NOT_COMPILED, BudgetRecord, TimeBudget, compile_timeout
from aoizora.stage2.companions import CompanionCompiles, ProgramCost, program_cost
from aoizora.stage2.compile_cache import CompileCache, CompileRecord, default_compile_cache
from aoizora.stage2.compile_order import CompilePlacements, predicted_best_placement, predicted_compile_placement
from aoizora.stage2.compile_workers import CompileExecutor, CompileTimeout, CompileWorkers
from aoizora.stage2.compiling import EarlyCompiles, cached_compile, compile_strategy, shared_compile_placement
from aoizora.stage2.executors import executor_from_spec
from aoizora.stage2.outcomes import (
    OUT_OF_HBM,
    OUT_OF_VMEM,
    CachedCompileError,
    Compiled,
    MemoryKind,
    Scored,
    StrategyOutcome,
    drop_reason,
    lowest_pair,
    memory_kind,
    refused_for_memory,
)
from aoizora.stage2.search import Stage2Config, Stage2Result, run_stage2
from aoizora.stage2.sweep import BoundedSweep, Stage2Summary
from aoizora.stage2.verify import recompile_cannot_change_q2

__all__ = [
    "NOT_COMPILED", "OUT_OF_HBM", "OUT_OF_VMEM", "BoundedSweep", "BudgetRecord", "TimeBudget", "compile_timeout",
    "CachedCompileError", "CompanionCompiles", "CompileCache", "CompileExecutor",
    "CompilePlacements", "CompileRecord", "CompileTimeout", "CompileWorkers", "Compiled", "EarlyCompiles", "MemoryKind",
    "ProgramCost", "Scored", "Stage2Config", "Stage2Result", "Stage2Summary", "StrategyOutcome", "cached_compile",
    "compile_strategy",
    "default_compile_cache", "drop_reason",
    "executor_from_spec", "lowest_pair", "memory_kind", "predicted_best_placement", "predicted_compile_placement",
    "program_cost",
    "recompile_cannot_change_q2",
    "refused_for_memory", "run_stage2", "shared_compile_placement",
]
