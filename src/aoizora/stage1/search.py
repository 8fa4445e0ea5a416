"""Run Stage 1 over a strategy space: enumerate, reject, lower, predict, filter memory, rank, keep Top-K.

Why this order: each step is cheaper than the next and discards what the next would waste time
on. Legality costs nothing; lowering costs ~0.1 s; the IR walk and Q1 a few ms; compiling (Stage
2) seconds. Every strategy leaves with a verdict and its reason, so a report can say why the
expert's choice was or was not kept.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aoizora.stage1.dag import Prediction, predict
from aoizora.stage1.ir import read_module
from aoizora.stage1.memory import MemoryEstimate, estimate_memory
from aoizora.stage1.q1 import Overlap, Q1Result, q1
from aoizora.stage1.space import Candidate, LoweringInputs, StrategySpace
from aoizora.topology import Topology

DEFAULT_TOP_K = 6

ILLEGAL = "illegal"
LOWERING_FAILED = "lowering-failed"
OUT_OF_MEMORY = "out-of-memory"
RANKED = "ranked"
KEPT = "kept"


@dataclass
class Entry:
    """One strategy's journey through Stage 1."""

    candidate: Candidate
    verdict: str
    reasons: tuple[str, ...] = ()
    q1: Q1Result | None = None
    memory: MemoryEstimate | None = None
    prediction: Prediction | None = None
    rank: int | None = None
    lower_seconds: float = 0.0
    analyse_seconds: float = 0.0
    summary: dict[str, Any] | None = None  # FLOPs, bytes, communication per axis, collectives

    @property
    def key(self) -> str:
        return self.candidate.key

    def to_json(self, space: StrategySpace | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "verdict": self.verdict, "reasons": list(self.reasons), "rank": self.rank}
        if space is not None:
            out["strategy"] = space.describe(self.candidate.strategy)
        if self.q1 is not None:
            out["q1"] = self.q1.to_json()
        if self.memory is not None:
            out["memory"] = self.memory.to_json()
        if self.summary is not None:
            out["comm_bytes_per_axis"] = self.summary["comm_per_axis"]
            out["collectives"] = self.summary["collectives"]
            out["flops"] = self.summary["flops"]
        return out


@dataclass
class Stage1Result:
    topology: Topology
    entries: list[Entry]
    top_k: int
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)

    def count(self, *verdicts: str) -> int:
        return sum(1 for e in self.entries if e.verdict in verdicts)

    @property
    def kept(self) -> list[Entry]:
        return sorted((e for e in self.entries if e.verdict == KEPT), key=lambda e: e.rank or 0)

    @property
    def ranked(self) -> list[Entry]:
        """Every strategy that fits, best Q1 first (kept ones lead)."""
        return sorted((e for e in self.entries if e.rank is not None), key=lambda e: e.rank or 0)

    def counts(self) -> dict[str, int]:
        return {
            "enumerated": len(self.entries),
            "rejected": self.count(ILLEGAL),
            "lowering_failed": self.count(LOWERING_FAILED),
            "out_of_memory": self.count(OUT_OF_MEMORY),
            "ranked": self.count(RANKED, KEPT),
            "kept": self.count(KEPT),
        }


def _inputs(space: StrategySpace, strategy: Any, topology: Topology) -> LoweringInputs:
    from jax.sharding import Mesh

    spec = space.mesh_spec(strategy)
    spec.check_fits(topology.num_devices, topology.name)
    # Lowering does not depend on which device sits where, so any order of the slice's devices will do.
    devices = np.array(topology.devices, dtype=object).reshape(spec.shape)
    return space.lowering_inputs(strategy, Mesh(devices, spec.axis_names))


def _lower(space: StrategySpace, strategy: Any, topology: Topology, inp: LoweringInputs | None = None) -> Any:
    import jax

    inp = inp or _inputs(space, strategy, topology)
    return jax.jit(inp.fn, **inp.jit_kwargs).lower(*inp.args, **inp.kwargs)


def argument_bytes(inp: LoweringInputs) -> float:
    """Per-device bytes of the abstract arguments under their shardings (before any lowering)."""
    import jax

    total = 0.0
    for leaf in jax.tree.leaves((inp.args, inp.kwargs)):
        shape, dtype, sharding = getattr(leaf, "shape", None), getattr(leaf, "dtype", None), getattr(leaf, "sharding", None)
        if shape is None or dtype is None:
            continue
        local = sharding.shard_shape(tuple(shape)) if sharding is not None else tuple(shape)
        total += math.prod(local) * np.dtype(dtype).itemsize
    return total


class ArgumentsDoNotFit(Exception):
    """The arguments alone exceed HBM: no need to lower (the compiler would refuse too)."""


def analyse(space: StrategySpace, strategy: Any, topology: Topology, *, overlap: Overlap = "prefetch",
            memory_slack: float = 1.0) -> tuple[Prediction, Q1Result, MemoryEstimate, float, float]:
    """Lower one strategy and predict it: (prediction, Q1, memory, lowering seconds, analysis seconds).

    Raises `ArgumentsDoNotFit` before lowering when the sharded arguments alone exceed HBM.
    """
    t0 = time.perf_counter()
    inp = _inputs(space, strategy, topology)
    args = argument_bytes(inp)
    limit = topology.hardware.hbm_bytes * memory_slack
    if args > limit:
        raise ArgumentsDoNotFit(
            f"arguments alone need ~{args / 2**30:.2f} GiB per device > {limit / 2**30:.2f} GiB HBM (not lowered)"
        )
    lowered = _lower(space, strategy, topology, inp)
    module = lowered.compiler_ir("stablehlo")
    t1 = time.perf_counter()
    pred = predict(read_module(module), lambda call: space.kernel_cost(strategy, call))
    result = q1(pred, topology, overlap)
    mem = estimate_memory(pred, topology.hardware, memory_slack)
    return pred, result, mem, t1 - t0, time.perf_counter() - t1


def run_stage1(
    space: StrategySpace,
    topology: Topology,
    *,
    top_k: int = DEFAULT_TOP_K,
    overlap: Overlap = "prefetch",
    memory_slack: float = 1.0,
    progress: bool = True,
    console: Any = None,
    keep_predictions: bool = False,
) -> Stage1Result:
    """Stage 1 over the whole space on `topology` (see the module docstring)."""
    t_start = time.perf_counter()
    candidates = list(space.candidates(topology.num_devices))
    entries = [Entry(c, ILLEGAL, c.reasons) if not c.legal else Entry(c, RANKED) for c in candidates]
    legal = [e for e in entries if e.verdict != ILLEGAL]
    timings = {"lower": 0.0, "analyse": 0.0}

    def step(e: Entry) -> None:
        try:
            pred, res, mem, tl, ta = analyse(space, e.candidate.strategy, topology, overlap=overlap, memory_slack=memory_slack)
        except ArgumentsDoNotFit as exc:
            e.verdict, e.reasons = OUT_OF_MEMORY, (str(exc),)
            return
        except Exception as exc:  # a strategy the workload cannot lower is reported, not fatal
            e.verdict, e.reasons = LOWERING_FAILED, (f"{type(exc).__name__}: {exc}".splitlines()[0][:300],)
            return
        e.q1, e.memory, e.lower_seconds, e.analyse_seconds = res, mem, tl, ta
        e.prediction = pred if keep_predictions else None
        e.summary = pred.summary()
        timings["lower"] += tl
        timings["analyse"] += ta
        if not mem.fits:
            e.verdict, e.reasons = OUT_OF_MEMORY, (mem.reason,)

    if progress:
        from rich.progress import Progress

        with Progress(console=console, transient=True) as bar:
            task = bar.add_task(f"Stage 1 ({space.name} on {topology.name})", total=len(legal))
            for e in legal:
                step(e)
                bar.advance(task)
    else:
        for e in legal:
            step(e)

    fitting = sorted((e for e in entries if e.verdict == RANKED), key=lambda e: (e.q1.seconds, e.q1.serial_seconds, e.key))
    for r, e in enumerate(fitting):
        e.rank = r + 1
        if r < top_k:
            e.verdict = KEPT
    result = Stage1Result(topology, entries, top_k, time.perf_counter() - t_start, timings)
    if progress:
        print_summary(result, console)
    return result


def print_summary(result: Stage1Result, console: Any = None) -> None:
    """Counts and the Top-K as a table."""
    from rich.console import Console
    from rich.table import Table

    if console is None:
        console = Console()
        console.width = max(console.width, 150)  # strategy keys are long; do not squeeze the table
    c = result.counts()
    console.print(
        f"Stage 1 on {result.topology.name}: {c['enumerated']} enumerated, {c['rejected']} rejected as illegal, "
        f"{c['lowering_failed']} failed to lower, {c['out_of_memory']} out of memory, {c['ranked']} ranked, "
        f"{c['kept']} kept ({result.seconds:.1f} s)"
    )
    table = Table()
    table.add_column("rank")
    table.add_column("strategy", no_wrap=True)
    for col in ("Q1 (ms)", "compute (ms)", "comm (ms)", "memory (GiB)"):
        table.add_column(col, justify="right")
    for e in result.ranked[: max(result.top_k, 1) * 2]:
        table.add_row(
            f"{e.rank}{'*' if e.verdict == KEPT else ''}", e.key, f"{e.q1.seconds * 1e3:.3f}",
            f"{e.q1.compute_seconds * 1e3:.3f}", f"{e.q1.comm_seconds * 1e3:.3f}", f"{e.memory.total_bytes / 2**30:.2f}",
        )
    console.print(table)
