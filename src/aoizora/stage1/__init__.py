"""Stage 1: lower every legal strategy (no compile), predict it from the IR, keep the Top-K by Q1.

Public API:
- `StrategySpace` (protocol), `Candidate`, `LoweringInputs`: what a workload provides;
- `TransformerSpace`: the generic transformer's space;
- `read_module` (IR reader), `predict` (prediction DAG), `q1`, `estimate_memory`;
- `run_stage1` / `Stage1Result`: the whole stage.
"""

from aoizora.stage1.dag import CommNode, KernelCall, OpNode, Prediction, predict
from aoizora.stage1.ir import IRModule, Sharding, read_module
from aoizora.stage1.memory import MemoryEstimate, estimate_memory
from aoizora.stage1.q1 import Q1Result, best_group_bandwidth, q1
from aoizora.stage1.search import DEFAULT_TOP_K, Entry, Stage1Result, analyse, run_stage1
from aoizora.stage1.space import Candidate, LoweringInputs, StrategySpace, axis_assignments, mesh_of
from aoizora.stage1.transformer_space import TransformerSpace, TransformerStrategy

__all__ = [
    "DEFAULT_TOP_K", "Candidate", "CommNode", "Entry", "IRModule", "KernelCall", "LoweringInputs",
    "MemoryEstimate", "OpNode", "Prediction", "Q1Result", "Sharding", "Stage1Result", "StrategySpace",
    "TransformerSpace", "TransformerStrategy", "analyse", "axis_assignments", "best_group_bandwidth",
    "estimate_memory", "mesh_of", "predict", "q1", "read_module", "run_stage1",
]
