"""Run Stage 1 over a strategy space: enumerate, reject, lower, predict, filter memory, rank, keep Top-K.

Why this order: each step is cheaper than the next and discards what the next would waste time
on. Legality costs nothing; lowering costs ~0.1 s; the IR walk and Q1 a few ms; compiling (Stage
2) seconds. Every strategy leaves with a verdict and its reason, so a report can say why the
expert's choice was or was not kept. A strategy that differs from a sibling in scheduling alone
(`StrategySpace.analysis_stand_in`, e.g. Ulysses chunking) takes the sibling's analysis instead
of being lowered (its summary names the sibling under "analysed_as").
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import pickle
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import numpy as np

from aoizora.defaults import DEFAULT_TOP_K
from aoizora.interrupts import children_start_with_stop_signals_held, ignore_stop_signals, start_child
from aoizora.progress import progress_reporter
from aoizora.stage1.cache import Stage1Cache, stage1_cache_key
from aoizora.stage1.dag import Prediction
from aoizora.stage1.ir import read_module
from aoizora.stage1.memory import MemoryEstimate, predict_within_hbm
from aoizora.stage1.q1 import Overlap, Q1Result, q1
from aoizora.topology import Topology
from aoizora.workload import LOWERING_LOCK, Candidate, LoweringInputs, StrategySpace, lowering_inputs_on

PARALLEL_MIN_STRATEGIES = 24  # below this, worker start-up costs more than it saves
POOL_RUN = 4  # strategies a worker is handed at once (`_analyse_in_pool`)


class Verdict(StrEnum):
    """What Stage 1 decided for a strategy; the value is the string plans and caches record."""

    ILLEGAL = "illegal"
    LOWERING_FAILED = "lowering-failed"
    OUT_OF_MEMORY = "out-of-memory"
    RANKED = "ranked"
    KEPT = "kept"


ILLEGAL = Verdict.ILLEGAL
LOWERING_FAILED = Verdict.LOWERING_FAILED
OUT_OF_MEMORY = Verdict.OUT_OF_MEMORY
RANKED = Verdict.RANKED
KEPT = Verdict.KEPT


@dataclass
class Entry:
    """One strategy's journey through Stage 1."""

    candidate: Candidate
    verdict: str  # a Verdict (read back from the Stage 1 cache as its string)
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

    def analysis(self) -> tuple[Q1Result, MemoryEstimate]:
        """The Q1 result and memory estimate of a ranked or kept entry (its analysis set both)."""
        assert self.q1 is not None and self.memory is not None, f"{self.key} ({self.verdict}) has no analysis"
        return self.q1, self.memory

    def to_json(self, space: StrategySpace | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key, "verdict": self.verdict, "reasons": list(self.reasons),
                               "rank": self.rank}
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
    timings: dict[str, float] = field(default_factory=dict)  # seconds lowering and analysing, summed
    cached: int = 0  # analyses read from the Stage 1 cache instead of lowered

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


def argument_bytes(inp: LoweringInputs) -> float:
    """Per-device bytes of the abstract arguments under their shardings (before any lowering)."""
    import jax

    total = 0.0
    for leaf in jax.tree.leaves((inp.args, inp.kwargs)):
        shape, dtype = getattr(leaf, "shape", None), getattr(leaf, "dtype", None)
        sharding = getattr(leaf, "sharding", None)
        if shape is None or dtype is None:
            continue
        local = sharding.shard_shape(tuple(shape)) if sharding is not None else tuple(shape)
        total += math.prod(local) * np.dtype(dtype).itemsize
    return total


class ArgumentsDoNotFit(Exception):
    """The arguments alone exceed HBM: no need to lower (the compiler would refuse too)."""


def analyse(space: StrategySpace, strategy: Any, topology: Topology, *, overlap: Overlap = "async",
            memory_slack: float = 1.0) -> tuple[Prediction, Q1Result, MemoryEstimate, float, float]:
    """Lower one strategy and predict it: (prediction, Q1, memory, lowering seconds, analysis seconds).

    Raises `ArgumentsDoNotFit` before lowering when the sharded arguments alone exceed HBM.
    """
    t0 = time.perf_counter()
    with LOWERING_LOCK:
        inp = lowering_inputs_on(space, strategy, topology)
        args = argument_bytes(inp)
        limit = topology.hardware.hbm_usable_bytes * memory_slack
        if args > limit:
            raise ArgumentsDoNotFit(
                f"arguments alone need ~{args / 2**30:.2f} GiB per device > {limit / 2**30:.2f} GiB HBM (not lowered)"
            )
        module = inp.lower().compiler_ir("stablehlo")
    t1 = time.perf_counter()
    pred, mem = predict_within_hbm(read_module(module), topology.hardware,
                                   lambda call: space.kernel_cost(strategy, call), memory_slack)
    result = q1(pred, topology, overlap)
    return pred, result, mem, t1 - t0, time.perf_counter() - t1


@dataclass
class _Analysed:
    """What analysing one strategy produced (picklable, so worker processes can return it)."""

    verdict: str
    reasons: tuple[str, ...] = ()
    q1: Q1Result | None = None
    memory: MemoryEstimate | None = None
    lower_seconds: float = 0.0
    analyse_seconds: float = 0.0
    summary: dict[str, Any] | None = None
    prediction: Prediction | None = None


def _analysed_to_json(a: _Analysed) -> dict[str, Any] | None:
    """`a` as a Stage 1 cache entry, or None when it is not cached (see `aoizora.stage1.cache`)."""
    if a.verdict not in (RANKED, OUT_OF_MEMORY):
        return None
    d = {"verdict": a.verdict, "reasons": list(a.reasons), "q1": a.q1.to_json() if a.q1 else None,
         "memory": a.memory.to_json() if a.memory else None, "summary": a.summary}
    try:
        json.dumps(d, allow_nan=False)
    except (TypeError, ValueError):  # an infinite bound or a value JSON cannot hold: not cached
        return None
    return d


def _analysed_from_json(d: dict[str, Any]) -> _Analysed:
    """A cached analysis (it took no lowering and no analysis time in this run)."""
    return _Analysed(d["verdict"], tuple(d["reasons"]), Q1Result.from_json(d["q1"]) if d["q1"] else None,
                     MemoryEstimate.from_json(d["memory"]) if d["memory"] else None, summary=d["summary"])


def _analyse_one(space: StrategySpace, strategy: Any, topology: Topology, overlap: Overlap, memory_slack: float,
                 keep_prediction: bool) -> _Analysed:
    try:
        pred, res, mem, tl, ta = analyse(space, strategy, topology, overlap=overlap, memory_slack=memory_slack)
    except ArgumentsDoNotFit as exc:
        return _Analysed(OUT_OF_MEMORY, (str(exc),))
    except Exception as exc:  # a strategy the workload cannot lower is reported, not fatal
        return _Analysed(LOWERING_FAILED, (f"{type(exc).__name__}: {exc}".splitlines()[0][:300],))
    verdict, reasons = (RANKED, ()) if mem.fits else (OUT_OF_MEMORY, (mem.reason,))
    return _Analysed(verdict, reasons, res, mem, tl, ta, pred.summary(), pred if keep_prediction else None)


_WORKER: dict[str, Any] = {}


def _init_worker(space_blob: bytes, topology_name: str, overlap: Overlap, memory_slack: float, keep: bool) -> None:
    import signal

    # Ctrl-C and a closing terminal's SIGHUP reach the whole group: the parent stops the workers
    ignore_stop_signals((signal.SIGINT, signal.SIGHUP))
    from aoizora.topology import get_topology

    _WORKER.update(space=pickle.loads(space_blob), topology=get_topology(topology_name), overlap=overlap,
                   memory_slack=memory_slack, keep=keep)


def _worker_analyse(strategies: list[Any]) -> list[_Analysed]:
    w = _WORKER
    return [_analyse_one(w["space"], st, w["topology"], w["overlap"], w["memory_slack"], w["keep"])
            for st in strategies]


def affinity_groups(space: StrategySpace, entries: list[Entry]) -> list[list[Entry]]:
    """Entries grouped by the space's lowering affinity, largest group first (so that the last
    groups to start, on whichever worker is free, are the short ones)."""
    groups: dict[Any, list[Entry]] = {}
    for e in entries:
        groups.setdefault(space.lowering_affinity(e.candidate.strategy), []).append(e)
    return sorted(groups.values(), key=len, reverse=True)


def _pool_blob(space: StrategySpace, entries: list[Entry]) -> bytes | None:
    """The pickled space when it and its strategies can go to worker processes, else None."""
    try:
        blob = pickle.dumps(space)
        for e in entries:
            pickle.dumps(e.candidate.strategy)
    except Exception:  # e.g. a FunctionSpace holding a local function: analyse in-process
        return None
    return blob


def _stand_ins(space: StrategySpace, legal: list[Entry]) -> dict[str, Entry]:
    """Key → the legal entry whose analysis stands for it (one that is analysed itself)."""
    by_key = {e.key: e for e in legal}
    out = {}
    for e in legal:
        stand_in = space.analysis_stand_in(e.candidate.strategy)
        twin = by_key.get(space.key_of(stand_in)) if stand_in is not None else None
        if twin is not None and twin is not e and space.analysis_stand_in(twin.candidate.strategy) is None:
            out[e.key] = twin
    return out


def default_workers(legal: int) -> int:
    """Lowering is single-threaded Python: use the cores when there is enough to amortise the
    workers' start-up (each imports jax and libtpu, ~3 s)."""
    return min(os.cpu_count() or 1, 4) if legal >= PARALLEL_MIN_STRATEGIES else 1


@dataclass(frozen=True)
class _Settings:
    """How each strategy is analysed (the same in every worker)."""

    overlap: Overlap
    memory_slack: float
    keep_predictions: bool


def run_stage1(
    space: StrategySpace,
    topology: Topology,
    *,
    top_k: int = DEFAULT_TOP_K,
    overlap: Overlap = "async",
    memory_slack: float = 1.0,
    progress: bool = True,
    console: Any = None,
    keep_predictions: bool = False,
    workers: int | None = None,
    cache: Stage1Cache | None = None,
) -> Stage1Result:
    """Stage 1 over the whole space on `topology` (see the module docstring).

    `workers` processes, this one included, lower strategies in parallel (default: the cores, for
    spaces of at least `PARALLEL_MIN_STRATEGIES` legal strategies whose space can be pickled).
    `cache`: analyses of this space on this slice stored by an earlier run are taken from it and
    new ones added to it (`aoizora.stage1.cache`); not used with `keep_predictions`, which the
    cache does not hold.

    Just over 60 lines: Stage 1's steps in order (the cache, lowering and analysis serially or in
    workers, memory, Q1, the ranking), each one call.
    """
    t_start = time.perf_counter()
    candidates = list(space.candidates(topology.num_devices))
    entries = [Entry(c, ILLEGAL, c.reasons) if not c.legal else Entry(c, RANKED) for c in candidates]
    legal = [e for e in entries if e.verdict != ILLEGAL]
    # strategies whose analysis a sibling's stands for (`StrategySpace.analysis_stand_in`) are not lowered
    stand_ins = _stand_ins(space, legal)
    own = [e for e in legal if e.key not in stand_ins]
    timings = {"lower": 0.0, "analyse": 0.0}
    cache_key = None if cache is None or keep_predictions else _cache_key(space, topology, overlap, memory_slack)
    fresh: dict[str, dict[str, Any]] = {}  # analyses to add to the cache

    if cache is not None and cache_key is not None:
        stored = cache.load(cache_key)
        for e in (e for e in own if e.key in stored):
            _apply(e, _analysed_from_json(stored[e.key]), timings)
        own = [e for e in own if e.key not in stored]

    def analysed(e: Entry, a: _Analysed) -> None:
        _apply(e, a, timings)
        if cache_key is not None and (d := _analysed_to_json(a)) is not None:
            fresh[e.key] = d

    n_workers = default_workers(len(own)) if workers is None else max(1, workers)
    blob = _pool_blob(space, own) if n_workers > 1 else None
    settings = _Settings(overlap, memory_slack, keep_predictions)
    groups = affinity_groups(space, own)
    try:
        label = f"Stage 1 ({space.name} on {topology.name}{f', {n_workers} workers' if blob else ''})"
        with progress_reporter(label, len(own), console=console, quiet=not progress) as bar:
            _analyse_groups(space, topology, groups, settings, n_workers, blob, analysed, bar.advance)
    finally:  # an interrupted Stage 1 keeps what it analysed
        if cache is not None and cache_key is not None:
            cache.store(cache_key, fresh)
    _share_stand_in_analyses(legal, stand_ins)
    _rank(entries, top_k)
    cached = len(legal) - len(stand_ins) - len(own)
    result = Stage1Result(topology, entries, top_k, time.perf_counter() - t_start, timings, cached)
    if progress:
        print_summary(result, console)
    return result


def _apply(e: Entry, a: _Analysed, timings: dict[str, float]) -> None:
    """Record a strategy's analysis on its entry and add its seconds to Stage 1's."""
    e.verdict, e.reasons = a.verdict, a.reasons
    e.q1, e.memory, e.lower_seconds, e.analyse_seconds = a.q1, a.memory, a.lower_seconds, a.analyse_seconds
    e.summary, e.prediction = a.summary, a.prediction
    timings["lower"] += a.lower_seconds
    timings["analyse"] += a.analyse_seconds


def _cache_key(space: StrategySpace, topology: Topology, overlap: Overlap, memory_slack: float) -> str:
    from aoizora.toolchain import source_fingerprint, toolchain_versions

    return stage1_cache_key(space.workload(), topology.name, toolchain_versions(), source_fingerprint(),
                            {"overlap": overlap, "memory_slack": memory_slack})


def _analyse_groups(space: StrategySpace, topology: Topology, groups: list[list[Entry]], settings: _Settings,
                    n_workers: int, blob: bytes | None, apply: Callable[[Entry, _Analysed], None],
                    advance: Callable[[], None]) -> None:
    """Analyse every entry of `groups`: here, or (with a pickled space `blob`) in a worker pool."""
    if blob is None:
        for e in (e for g in groups for e in g):
            apply(e, _analyse_one(space, e.candidate.strategy, topology, settings.overlap, settings.memory_slack,
                                  settings.keep_predictions))
            advance()
        return
    _analyse_in_pool(space, topology, groups, settings, n_workers, blob, apply, advance)


def hand_out(pending: deque[Entry], n_workers: int) -> list[Entry]:
    """The next strategies a worker is handed, from the front of `pending`: up to `POOL_RUN`, fewer
    as the end nears, one at a time for the last 4 per process."""
    run = max(1, min(POOL_RUN, len(pending) // (4 * n_workers)))
    return [pending.popleft() for _ in range(min(run, len(pending)))]


def _analyse_in_pool(space: StrategySpace, topology: Topology, groups: list[list[Entry]], settings: _Settings,
                     n_workers: int, blob: bytes, apply: Callable[[Entry, _Analysed], None],
                     advance: Callable[[], None]) -> None:
    """`n_workers - 1` spawned workers and this process analyse the groups.

    This process is one of the workers: it lowers while the others start (each imports jax and
    libtpu for ~4 s) and keeps them fed, two hand-outs ahead, between its own lowerings."""
    context = multiprocessing.get_context("spawn")
    # the strategies in group order: the workers take the large groups' from the front, this process
    # the small ones' from the back, each lowering a group's strategies one after another. A worker
    # is handed up to POOL_RUN at once, one at a time near the end: it holds two hand-outs, which
    # this process waits for once nothing is left (whole groups: 3 s of the demo's 28 s)
    pending = deque(e for g in groups for e in g)
    running: dict[Future, list[Entry]] = {}

    def collect(block: bool) -> None:
        done = [f for f in running if f.done()] if not block else [next(as_completed(running))]
        for fut in done:
            for e, a in zip(running.pop(fut), fut.result(), strict=True):
                apply(e, a)
                advance()

    def feed(pool: ProcessPoolExecutor) -> None:
        while pending and len(running) < 2 * (n_workers - 1):
            g = hand_out(pending, n_workers)
            with children_start_with_stop_signals_held():  # a submit may start a worker
                running[pool.submit(_worker_analyse, [e.candidate.strategy for e in g])] = g

    # the workers die with this process, even SIGKILLed; started by this thread, which outlives them
    pool = ProcessPoolExecutor(n_workers - 1, mp_context=context, initializer=start_child,
                               initargs=(os.getpid(), f"{__name__}:_init_worker", blob, topology.name,
                                         settings.overlap, settings.memory_slack, settings.keep_predictions))
    try:
        feed(pool)
        while pending:
            e = pending.pop()  # of the smallest group left: the workers take the large ones
            apply(e, _analyse_one(space, e.candidate.strategy, topology, settings.overlap, settings.memory_slack,
                                  settings.keep_predictions))
            advance()
            collect(block=False)
            feed(pool)
        while running:
            collect(block=True)
    except BaseException:
        # Ctrl-C or an error: stop the workers now rather than wait for the lowerings they hold
        # (the executor's own shutdown waits for them, and hangs when a worker was interrupted).
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.kill()  # SIGKILL: libtpu prints a crash report on SIGTERM
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def _share_stand_in_analyses(legal: list[Entry], stand_ins: dict[str, Entry]) -> None:
    """Each entry analysed as a sibling (`stand_ins`) takes that sibling's verdict, Q1 and memory."""
    for e in legal:
        if e.key in stand_ins:
            twin = stand_ins[e.key]
            e.verdict, e.reasons, e.q1 = twin.verdict, twin.reasons, twin.q1
            e.memory, e.prediction = twin.memory, twin.prediction
            # a twin never lowered (over HBM on its arguments alone) has no summary to share
            e.summary = {**twin.summary, "analysed_as": twin.key} if twin.summary is not None else None


def _rank(entries: list[Entry], top_k: int) -> None:
    """Rank the entries that fit by Q1 (ties: serial time, then key) and keep the first `top_k`."""
    fitting = sorted((e for e in entries if e.verdict == RANKED),
                     key=lambda e: (e.analysis()[0].seconds, e.analysis()[0].serial_seconds, e.key))
    for r, e in enumerate(fitting):
        e.rank = r + 1
        if r < top_k:
            e.verdict = KEPT


def _cached_note(result: Stage1Result) -> str:
    return f"; {result.cached} analyses from the Stage 1 cache" if result.cached else ""


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
        f"{c['kept']} kept ({result.seconds:.1f} s{_cached_note(result)})"
    )
    table = Table()
    table.add_column("rank")
    table.add_column("strategy", no_wrap=True)
    for col in ("Q1 (ms)", "compute (ms)", "comm (ms)", "memory (GiB)"):
        table.add_column(col, justify="right")
    for e in result.ranked[: max(result.top_k, 1) * 2]:
        q1, memory = e.analysis()
        table.add_row(
            f"{e.rank}{'*' if e.verdict == KEPT else ''}", e.key, f"{q1.seconds * 1e3:.3f}",
            f"{q1.compute_seconds * 1e3:.3f}", f"{q1.comm_seconds * 1e3:.3f}",
            f"{memory.total_bytes / 2**30:.2f}",
        )
    console.print(table)
