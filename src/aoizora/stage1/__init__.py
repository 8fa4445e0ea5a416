"""Stage 1: lower every legal strategy (no compile), predict it from the IR, keep the Top-K by Q1.

Public API (the workload interface it reads, `StrategySpace`, is `aoizora.workload`):
- `read_module` (IR reader), `predict` (prediction DAG), `q1`, `estimate_memory`;
- `run_stage1` / `Stage1Result`: the whole stage;
- `Stage1Cache` / `default_stage1_cache`: analyses kept on disk between runs.
"""

from aoizora.stage1.cache import Stage1Cache, default_stage1_cache
from aoizora.stage1.dag import CommNode, OpNode, Prediction
from aoizora.stage1.ir import IRModule, Sharding, read_module
from aoizora.stage1.memory import MemoryEstimate, estimate_memory, predict_within_hbm
from aoizora.stage1.predict import predict
from aoizora.stage1.q1 import Q1Result, best_group_bandwidth, op_seconds, q1
from aoizora.stage1.search import (
    DEFAULT_TOP_K,
    ILLEGAL,
    KEPT,
    LOWERING_FAILED,
    OUT_OF_MEMORY,
    RANKED,
    ArgumentsDoNotFit,
    Entry,
    Stage1Result,
    Verdict,
    analyse,
    run_stage1,
)

__all__ = [
    "DEFAULT_TOP_K", "ILLEGAL", "KEPT", "LOWERING_FAILED", "OUT_OF_MEMORY", "RANKED", "ArgumentsDoNotFit", "CommNode",
    "Entry", "IRModule", "MemoryEstimate", "OpNode", "Prediction", "Q1Result", "Sharding", "Stage1Cache",
    "Stage1Result", "analyse", "default_stage1_cache", "best_group_bandwidth", "estimate_memory", "op_seconds",
    "Verdict", "predict", "predict_within_hbm", "q1", "read_module", "run_stage1",
]
