"""What Stage 2 produces for a strategy (`StrategyOutcome`: its `Compiled` program and `Scored`
pairs, or why it was dropped) and the drop reasons: the compiler's refusal for memory (`MemoryKind`),
a timeout, or another compile failure."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from aoizora.cost import CostModel, Q2Result
from aoizora.hlo.program import Program
from aoizora.placement import JAX_DEFAULT, Placement
from aoizora.stage2.budget import OutOfBudget
from aoizora.stage2.compile_workers import CompileTimeout


@dataclass
class Compiled:
    """A strategy compiled for the slice (over one device order)."""

    key: str
    program: Program
    memory_bytes: int | None
    compile_seconds: float  # libtpu's time for this program (when it was compiled, if from the cache)
    placement_name: str
    from_cache: bool = False


@dataclass
class Scored:
    """One (strategy, placement) pair and its Q2 prediction."""

    key: str
    placement: Placement
    q2: Q2Result
    program: Program  # the compiled program it was scored on
    verified: bool = False  # scored on a program compiled with this placement's own device order


@dataclass
class StrategyOutcome:
    key: str
    strategy: Any
    compiled: Compiled | None = None
    dropped: str | None = None  # reason, when the compiler refused or timed out
    scored: list[Scored] = field(default_factory=list)

    @property
    def best(self) -> Scored | None:
        return min(self.scored, key=lambda s: s.q2.step_seconds) if self.scored else None

    @property
    def jax_default(self) -> Scored | None:
        return next((s for s in self.scored if s.placement.name == JAX_DEFAULT), None)


def scored_on_every_placement(model: CostModel, mesh_placements: Iterable[Placement], key: str,
                              compiled: Compiled, *, verify_own: bool = False) -> list[Scored]:
    """`compiled` scored by Q2 on each placement; with `verify_own`, the pair on the placement it was
    compiled over (its own device order) is marked verified."""
    return [Scored(key, p, model.evaluate(compiled.program, p), compiled.program,
                   verified=verify_own and p.name == compiled.placement_name) for p in mesh_placements]


def lowest_pair(outcomes: Iterable[StrategyOutcome]) -> tuple[StrategyOutcome, Scored] | None:
    """The outcome and pair with the lowest Q2, a verified pair first on a tie (None: nothing scored)."""
    pairs = [(o, s) for o in outcomes for s in o.scored]
    return min(pairs, key=lambda p: (p[1].q2.step_seconds, not p[1].verified)) if pairs else None


class CachedCompileError(Exception):
    """The compiler refused this program before (recorded in the compile cache); the message is its reason."""


def is_out_of_memory(exc: BaseException) -> bool:
    text = str(exc)
    return "RESOURCE_EXHAUSTED" in text or "Ran out of memory" in text


# How `drop_reason` starts when the compiler refuses a program for memory (cached refusals too):
# the program's buffers overflow HBM, or a kernel's working set overflows the scoped VMEM
# ("CompileTimeScopedVmemOom", e.g. splash blocks too large for the chip). Either way it cannot run.
OUT_OF_HBM = "out of HBM at compile"
OUT_OF_VMEM = "out of scoped VMEM at compile"


class MemoryKind(StrEnum):
    """The memory the compiler refused a program for; the value is how notes and reports name it."""

    HBM = "HBM"
    SCOPED_VMEM = "scoped VMEM"


def memory_kind(dropped: str) -> MemoryKind | None:
    """The memory a drop reason says the compiler refused the program for, else None."""
    if dropped.startswith(OUT_OF_VMEM):
        return MemoryKind.SCOPED_VMEM
    if dropped.startswith(OUT_OF_HBM):
        return MemoryKind.HBM
    return None


def refused_for_memory(dropped: str) -> bool:
    """Whether a drop reason is the compiler's refusal for HBM or scoped VMEM."""
    return memory_kind(dropped) is not None


def _memory_label(text: str) -> str:
    return OUT_OF_VMEM if "vmem" in text.lower() else OUT_OF_HBM


def drop_reason(exc: BaseException) -> str:
    text = str(exc)
    if isinstance(exc, CachedCompileError):
        # refusals cached before the VMEM label existed all start with the HBM one
        if text.startswith(f"{OUT_OF_HBM}: "):
            return f"{_memory_label(text)}: {text[len(OUT_OF_HBM) + 2:]}"
        return text
    first = text.strip().splitlines()[0][:240] if text.strip() else type(exc).__name__
    if is_out_of_memory(exc):
        return f"{_memory_label(first)}: {first}"
    if isinstance(exc, CompileTimeout | OutOfBudget):
        return first
    return f"compile failed: {getattr(exc, 'original_type', type(exc).__name__)}: {first}"
