"""Compiled-HLO analyzer: parse libtpu's HLO text into a loop-aware program graph.

Entry points:

* `parse_hlo(text) -> HloModule` — the syntax tree (computations, instructions, raw attrs);
* `build_program(text_or_module, opaque_cost=..., device_ids=...) -> Program` — the model the
  cost model and the simulator consume (documented in `aoizora.hlo.program`);
* `analyze(obj)` — the same from HLO text, a parsed module or a jax compiled object;
* `summarize(program) -> dict` — the ``aoizora hlo --json`` report;
* what Q2 and the simulator share: the algorithm config (`AlgorithmConfig`, `resolve_direction`)
  and the bandwidth-optimal traffic (`ring_phases`, `all_to_all_chunk`, `bytes_sent_per_device`);
* `ProgramBuilder` — a `Program` written node by node instead of parsed (Stage 2 scores a
  strategy's predicted collectives with it before compiling; tests build programs with it).
"""

from __future__ import annotations

from typing import Any

from aoizora.hlo.algorithm import AlgorithmConfig, RingDirection, RingOrder, parse_algorithm_config, resolve_direction
from aoizora.hlo.builder import build_program, program_from_compiled
from aoizora.hlo.instructions import KNOWN_OPCODES
from aoizora.hlo.parser import Computation, HloModule, Instruction, parse_hlo
from aoizora.hlo.program import (
    ESTIMATE_KINDS,
    Collective,
    CollectiveKind,
    CollectiveMode,
    Loop,
    Node,
    NodeKind,
    OpaqueCost,
    OpaqueCostHook,
    OpaqueOp,
    Program,
    estimate_kind,
)
from aoizora.hlo.shapes import Shape
from aoizora.hlo.summary import summarize
from aoizora.hlo.synthetic import ProgramBuilder
from aoizora.hlo.traffic import RingPhase, all_to_all_chunk, bytes_sent_per_device, ring_phases


def analyze(obj: Any, *, opaque_cost: OpaqueCostHook | None = None) -> Program:
    """A `Program` from HLO text, an `HloModule`, or a compiled jax object (``.as_text()``)."""
    if isinstance(obj, (str, HloModule)):
        return build_program(obj, opaque_cost=opaque_cost)
    if hasattr(obj, "as_text"):
        return program_from_compiled(obj, opaque_cost=opaque_cost)
    from aoizora.errors import HloParseError

    raise HloParseError(
        f"cannot analyze a {type(obj).__name__}: pass HLO text or a compiled jax object"
    )


__all__ = [
    "ESTIMATE_KINDS", "AlgorithmConfig", "Collective", "CollectiveKind", "CollectiveMode", "Computation",
    "HloModule", "Instruction", "KNOWN_OPCODES", "Loop", "Node", "NodeKind", "OpaqueCost",
    "OpaqueCostHook", "OpaqueOp", "Program", "ProgramBuilder", "RingDirection", "RingOrder", "RingPhase", "Shape",
    "all_to_all_chunk", "analyze", "build_program", "bytes_sent_per_device", "estimate_kind", "parse_algorithm_config",
    "parse_hlo", "program_from_compiled", "resolve_direction", "ring_phases", "summarize",
]
