"""The planner end to end: Stage 1 -> compile the Top-K -> placements x Q2 -> a Plan."""

from __future__ import annotations

import contextlib
import datetime
import inspect
import time
from collections.abc import Iterator, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from aoizora.cost import CostModel, Q2Options
from aoizora.defaults import DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_COMPILE_WORKERS, DEFAULT_TOP_K, DEFAULT_VERIFY_TOP
from aoizora.errors import PlanningError
from aoizora.placement import JAX_DEFAULT
from aoizora.plan import cache
from aoizora.plan.consistency import plain_strings
from aoizora.plan.plan import Plan
from aoizora.plan.schema import SCHEMA_VERSION
from aoizora.progress import Counter, estimate_remaining, progress_reporter
from aoizora.stage1 import Stage1Result, default_stage1_cache, run_stage1
from aoizora.stage2 import (
    NOT_COMPILED,
    CompanionCompiles,
    TimeBudget,
    compile_timeout,
    lowest_pair,
    predicted_best_placement,
)
from aoizora.stage2.compile_cache import CompileCache, default_compile_cache
from aoizora.stage2.compile_order import CompilePlacements
from aoizora.stage2.compile_workers import CompileExecutor, CompileWorkers
from aoizora.stage2.compiling import EarlyCompiles
from aoizora.stage2.outcomes import Compiled, Scored, StrategyOutcome
from aoizora.stage2.search import Stage2Config, Stage2Result, run_stage2
from aoizora.stage2.sweep import Stage2Summary
from aoizora.toolchain import (
    CompilerFlags,
    aoizora_version,
    check_compiler_flags,
    environment_flags,
    source_fingerprint,
    toolchain_versions,
)
from aoizora.topology import Topology
from aoizora.workload import ExpertDeployment, S, StrategySpace


@dataclass(frozen=True)
class ExpertEntry:
    """An expert deployment as a Stage 2 entry: compiled with the libtpu flags its source runs it with.

    Its key is the strategy's key, suffixed with the deployment's name when its flags differ from
    the plan's (the same strategy compiled with other flags is another program).
    """

    key: str
    deployment: ExpertDeployment
    flags: CompilerFlags


def expert_entries(space: StrategySpace, topology: Topology, flags: CompilerFlags) -> list[ExpertEntry]:
    """The space's documented expert deployments on `topology`, each with its flags checked by libtpu."""
    entries = []
    for dep in space.expert_deployments(topology):
        dep_flags = environment_flags().merged(CompilerFlags.parse(" ".join(dep.libtpu_args)))
        check_compiler_flags(dep_flags, topology.name)
        key = space.key_of(dep.strategy)
        entries.append(ExpertEntry(key if dep_flags == flags else f"{key} | {dep.name} flags", dep, dep_flags))
    return entries


@dataclass
class PlanResult:
    """A plan and how it was reached (Stage 1 entries and Stage 2 outcomes are None from the cache)."""

    plan: Plan
    from_cache: bool
    stage1: Stage1Result | None = None
    outcomes: list[StrategyOutcome] | None = None
    stage2: Stage2Summary | None = None  # what Stage 2 compiled and what Q1 pruned


def plan_space(
    space: StrategySpace,
    topology: Topology | str,
    *,
    top_k: int = DEFAULT_TOP_K,
    options: Q2Options | None = None,
    compile_timeout_s: float | None = DEFAULT_COMPILE_TIMEOUT_S,
    verify_top: int = DEFAULT_VERIFY_TOP,
    use_cache: bool = True,
    progress: bool = True,
    console: Any = None,
    compile_cache: CompileCache | None = None,
    stage1: Stage1Result | None = None,
    libtpu_args: str | CompilerFlags | None = None,
    include_experts: bool = True,
    executor: CompileExecutor | None = None,
    time_budget_s: float | None = None,
    check_limits: bool = True,
) -> PlanResult:
    """Plan a workload (its strategy space) on a slice (a `Topology` or its name, e.g. "v5e:2x4");
    answers from the cache when it can.

    `include_experts`: the space's documented expert deployments join Stage 2 as candidates (and
    baselines), so a plan is never worse than them; False plans from Stage 1's Top-K alone (what
    the search finds by itself; no expert baseline is reported).

    `use_cache` reads/writes the plan cache, the Stage 1 cache and, unless `compile_cache` is
    given, the default compile cache. `stage1`: a Stage 1 result already computed for this space (as
    `space.under_flags` gives it under the plan's flags), slice and Top-K.
    `libtpu_args`: compiler flags (`LIBTPU_INIT_ARGS` syntax) every Stage 2 compile uses, on top of
    those in the `LIBTPU_INIT_ARGS` environment variable (which libtpu applies anyway); the plan
    records the union, checked with libtpu before any work.
    `executor`: where Stage 2 compiles run, up to its `size` at once (default: `DEFAULT_COMPILE_WORKERS`
    local child processes; `aoizora.stage2.executor_from_spec` makes a Ray one). The
    plan is the one a sequential run makes (see `run_stage2`), so the executor is not part of the
    cached request.
    `time_budget_s`: plan for at most about this many seconds (None: plan fully). Like a solver's
    time limit, Stage 2 stops compiling and verifying when it runs out and the plan is the best pair
    found by then; the plan's `stage2.time_budget` says what was not compiled or verified, and a
    plan anything was cut from is not cached (`aoizora.stage2.budget`). When no compile finished in
    time, the plan is Stage 1's rank 1 on its predicted placement, its step Q1's bound
    (`prediction.basis` "q1", `stage2.time_budget.nothing_compiled`, a note saying so).
    `check_limits`: before the plan keeps a scoped-VMEM limit its candidates were compiled without,
    compile the leading pair at it and keep the faster by Q2 (`aoizora.stage2.limit_check`; one
    compile at the raised limit, the slow kind); False plans from the default-limit compiles alone.

    Over 60 lines for its keyword parameters and their documentation; the body is the pipeline's
    steps in order (cache, expert compiles, Stage 1, Stage 2, the chosen pair, the plan file).
    """
    topology = check_plan_space_arguments(space, topology, dict(
        top_k=top_k, options=options, compile_timeout_s=compile_timeout_s, verify_top=verify_top, use_cache=use_cache,
        progress=progress, compile_cache=compile_cache, stage1=stage1, libtpu_args=libtpu_args,
        include_experts=include_experts, executor=executor, time_budget_s=time_budget_s, check_limits=check_limits))
    options = options or Q2Options()
    budget = TimeBudget(time_budget_s) if time_budget_s is not None else None
    flags = planning_flags(libtpu_args, topology.name)
    space = space.under_flags(flags)
    request = _request(space, topology, flags, options, top_k=top_k, verify_top=verify_top,
                       include_experts=include_experts, check_limits=check_limits)
    programs = space.companion_programs(topology)
    if programs:  # a plan that costs them is not the plan of a request that did not
        request["companions"] = [p.label for p in programs]
    use_cache = use_cache and cache.caches_usable()
    if use_cache:
        hit = cache.lookup(request)
        if hit is not None:
            return PlanResult(hit, from_cache=True)

    if compile_cache is None and use_cache:
        compile_cache = default_compile_cache()
    # before Stage 1: their flags are checked by libtpu too
    experts = expert_entries(space, topology, flags) if include_experts else []
    t_start = time.perf_counter()
    # the experts are compiled whatever Stage 1 ranks: they compile while it lowers
    with _own_executor(executor) as executor, \
            EarlyCompiles(space, topology, compile_timeout(budget, compile_timeout_s), compile_cache,
                          executor) as early, \
            CompanionCompiles(programs, topology, compile_timeout_s, budget, compile_cache, flags,
                              executor) as companions:
        for ex in experts:
            early.start(ex.key, ex.deployment.strategy, ex.flags)
        if stage1 is None:
            stage1 = run_stage1(space, topology, top_k=top_k, progress=progress, console=console,
                                cache=default_stage1_cache() if use_cache else None)
        else:
            t_start -= stage1.seconds  # planning time includes the Stage 1 done beforehand
        # strategy-independent (a video's VAE decode): compiled once, beside Stage 2's compiles. Not
        # beside Stage 1: its lowering (this process) and its compile (minutes of a core) took the
        # cores Stage 1's lowerings run on, which it needs before Stage 2 can start.
        companions.start()
        if not stage1.kept:
            raise nothing_fits(space, topology, stage1)
        kept, extra_notes, reserve, bounds = _stage2_candidates(stage1, experts)
        # Stage 2 compiles each candidate once at the plan's flags (an expert at its own), in its
        # compiled form (`compile_strategy`); the plan records the flags its strategy runs with
        expert_flags = {ex.key: ex.flags for ex in experts}
        flags_by_key = {**candidate_flags(space, stage1, flags), **expert_flags}
        # experts compile over JAX's order (see EarlyCompiles), the others over their predicted best
        placements = CompilePlacements(space, topology, {e.key: e.summary for e in stage1.ranked}, options,
                                       jax_default=[ex.key for ex in experts])
        config = Stage2Config(options=options, compile_timeout_s=compile_timeout_s, verify_top=verify_top,
                              compile_cache=compile_cache, flags=flags, flags_by_key=expert_flags,
                              lower_bounds=bounds, baselines=[ex.key for ex in experts], reserve=reserve,
                              backfill_for=[e.key for e in stage1.kept], compile_placement=placements,
                              budget=budget, check_limits=check_limits)
        stage2 = _stage2(space, kept, topology, config, executor, early.futures, progress, console)
        t_wait = time.perf_counter()
        if progress and companions.waiting():
            _say_waiting(console, companions.waiting())
        companion_costs = companions.costs()
        companion_wait = time.perf_counter() - t_wait
    outcomes, timings, notes, summary = stage2.outcomes, stage2.timings, stage2.notes, stage2.summary
    notes = extra_notes + notes + _compile_order_notes(outcomes, topology) + _budget_notes(budget)
    if programs:  # what waiting for the companion programs (and costing them) added after Stage 2
        timings["companions"] = companion_wait
    timings = {"stage1": stage1.seconds, **timings, "total": time.perf_counter() - t_start}
    if budget is not None and budget.record.cut and not any(o.scored for o in outcomes):
        # like a solver's time limit: an answer all the same, Stage 1's best, never cached (its
        # budget cut Stage 2 short: `cache.degraded`)
        doc = _stage1_document(space, topology, request, stage1, outcomes, experts, timings, notes, options,
                               flags_by_key.get(stage1.kept[0].key, flags), budget, companion_costs)
        doc["stage2"] = {**summary.to_json(), **compile_record(outcomes)}
        doc["stage2"]["time_budget"] = {**budget.record.to_json(), "nothing_compiled": True}
        return PlanResult(Plan(plain_strings(doc)), from_cache=False, stage1=stage1, outcomes=outcomes,
                          stage2=summary)
    best = _best_pair(outcomes, len(kept), topology)
    baselines = _baselines(outcomes, best, experts, topology, options)
    # the plan records the flags its chosen program was compiled with (an expert's own, if it won)
    chosen_flags = flags_by_key.get(best.key, flags)
    doc = _document(space, topology, request, stage1, outcomes, best, baselines, timings, notes, chosen_flags)
    chosen = next(o for o in outcomes if o.key == best.key)
    doc.update(space.plan_totals(chosen.strategy, topology, best.q2.step_seconds, companion_costs))
    doc["stage2"] = {**summary.to_json(), **compile_record(outcomes)}
    if budget is not None:
        doc["stage2"]["time_budget"] = budget.record.to_json()
    plan = Plan(plain_strings(doc))  # a compiler's message in a reason may hold line breaks
    if use_cache:
        cache.store(request, plan)
    return PlanResult(plan, from_cache=False, stage1=stage1, outcomes=outcomes, stage2=summary)


#: `plan_space`'s keyword arguments (what `plan_wan` passes on)
PLAN_SPACE_OPTIONS: tuple[str, ...] = tuple(
    name for name, p in inspect.signature(plan_space).parameters.items() if p.kind is inspect.Parameter.KEYWORD_ONLY)


def _say_waiting(console: Any, labels: list[str]) -> None:
    """One line while the plan waits for companion compiles after Stage 2 (they may take minutes)."""
    from rich.console import Console

    (console or Console(stderr=True)).print(f"waiting for {', '.join(labels)} (compiling since planning started)")


def check_plan_space_arguments(space: Any, topology: Any, options: dict[str, Any]) -> Topology:
    """`plan_space`'s arguments (`aoizora.plan.arguments`), before any work; the slice, resolved
    from its name (`get_topology` raises TopologyError for an unknown one)."""
    from aoizora.errors import ArgumentTypeError
    from aoizora.plan.arguments import check_plan_space_options, check_stage1, check_topology
    from aoizora.topology import get_topology

    if not isinstance(space, StrategySpace):
        raise ArgumentTypeError(f"space must be a StrategySpace (e.g. aoizora.models.registry.wan_space(...)), not "
                                f"{type(space).__name__}")
    check_topology(topology)
    check_plan_space_options(options, PLAN_SPACE_OPTIONS)
    topo = get_topology(topology) if isinstance(topology, str) else topology
    check_stage1(options["stage1"], topo, options["top_k"])
    return topo


def candidate_flags(space: StrategySpace, stage1: Stage1Result, flags: CompilerFlags) -> dict[str, CompilerFlags]:
    """The flags each ranked strategy runs with, for the strategies that have flags of their own
    (`StrategySpace.compile_flags`, e.g. the scoped-VMEM limit its tile needs) on top of the
    plan's (which win): what a plan that chooses it records. Stage 2 compiles it without them
    (`StrategySpace.compiled_form`)."""
    out = {}
    for e in stage1.ranked:
        extra = space.compile_flags(e.candidate.strategy)
        if extra:
            out[e.key] = CompilerFlags.parse(extra).merged(flags)
    return out


def _best_pair(outcomes: list[StrategyOutcome], attempted: int, topology: Topology) -> Scored:
    """The pair with the lowest Q2 (a verified one on a tie); PlanningError when no strategy compiled
    (under a time budget that cut Stage 2 short, the plan is Stage 1's best instead: `_stage1_document`)."""
    lowest = lowest_pair(outcomes)
    if lowest is None:
        reasons = "; ".join(f"{o.key}: {o.dropped}" for o in outcomes if o.dropped)
        raise PlanningError(f"none of the {attempted} strategies compiled for {topology.name} ({reasons})")
    return lowest[1]


def _budget_notes(budget: TimeBudget | None) -> list[str]:
    """What the time budget cut, in one note (none when it cut nothing)."""
    if budget is None or not budget.record.cut:
        return []
    r = budget.record
    parts = [f"{len(r.not_compiled)} strategies not compiled", f"{len(r.stopped)} compiles stopped",
             f"{len(r.not_verified)} leading pairs not verified"]
    if r.companions_not_costed:
        parts.append(f"not costed: {', '.join(r.companions_not_costed)}")
    return [f"the time budget of {budget.seconds:g} s cut Stage 2 short: {', '.join(parts)} (stage2.time_budget); "
            "plan without --time-budget for the full plan"]


def _stage2_candidates(stage1: Stage1Result, experts: list[ExpertEntry]
                       ) -> tuple[list[tuple[str, Any]], list[str], list[tuple[str, Any]], dict[str, float]]:
    """What Stage 2 compiles: Stage 1's Top-K and the experts (with a note for each expert added),
    the reserve, and the bounds that prune them."""
    kept = [(e.key, e.candidate.strategy) for e in stage1.kept]
    notes = _add_experts(kept, experts)
    # a Top-K strategy the compiler refuses for HBM gives its place to the next in Stage 1's ranking
    taken = {k for k, _ in kept}
    reserve = [(e.key, e.candidate.strategy) for e in stage1.ranked if e.key not in taken]
    # Q1 bounds every placement's step time from below: a strategy whose Q1 reaches the best Q2
    # found cannot win and is not compiled (the experts are baselines: always compiled, first)
    bounds = {e.key: e.q1.seconds for e in stage1.ranked if e.q1 is not None}
    return kept, notes, reserve, bounds


def _request(space: StrategySpace, topology: Topology, flags: CompilerFlags, options: Q2Options, *, top_k: int,
             verify_top: int, include_experts: bool, check_limits: bool = True) -> dict[str, Any]:
    """Everything a plan depends on: the plan cache's key, recorded in the plan."""
    return {
        "workload": space.workload(),
        "topology": topology.name,
        "libtpu_args": str(flags),
        "toolchain": toolchain_versions(),
        "aoizora": aoizora_version(),
        "source": source_fingerprint(),
        "options": {"top_k": top_k, "ring_order": options.ring_order, "ring_direction": options.ring_direction,
                    "verify_top": verify_top, "include_experts": include_experts, "check_limits": check_limits},
    }


def _add_experts(kept: list[tuple[str, Any]], experts: list[ExpertEntry]) -> list[str]:
    """Append the expert deployments not already kept to Stage 2's candidates; a note for each.

    They are compiled anyway (they are baselines, with their own flags), so they also compete: a
    plan is never worse than the baselines it reports, whatever Stage 1's recall."""
    notes = []
    top = len(kept)
    for ex in experts:
        if ex.key not in {k for k, _ in kept}:
            kept.append((ex.key, ex.deployment.strategy))
            notes.append(f"the expert deployment {ex.deployment.name} ({ex.key}) joined Stage 2 beside the Top-{top}")
    return notes


def _baselines(outcomes: list[StrategyOutcome], best: Scored, experts: list[ExpertEntry], topology: Topology,
               options: Q2Options) -> dict[str, Any]:
    """The chosen strategy on JAX's default placement and each expert deployment, against the choice.

    Also gives the choice (and JAX's placement of it) their schedules and link loads, for reports."""
    baselines: dict[str, Any] = {}
    same = next(o for o in outcomes if o.key == best.key).jax_default
    if same is not None:
        baselines["same_strategy_jax_default"] = _pair_json(same, best)
    if experts:
        # "expert" is the primary deployment (the first documented); "experts" lists them all
        baselines["experts"] = [_expert_json(ex.deployment, ex.key, outcomes, best) for ex in experts]
        baselines["expert"] = baselines["experts"][0]

    model = CostModel(topology, options)
    best.q2 = model.evaluate(best.program, best.placement, timeline=True)
    if same is not None:
        detailed = model.evaluate(same.program, same.placement, timeline=True)
        baselines["same_strategy_jax_default"].update(
            link_bytes=detailed.link_bytes.tolist(), timeline=detailed.timeline,
            device_coords=same.placement.coords(topology).tolist(),
        )
    return baselines


def planning_flags(libtpu_args: str | CompilerFlags | None, topology_name: str) -> CompilerFlags:
    """The flags a plan compiles with: `LIBTPU_INIT_ARGS` overridden by `libtpu_args`, checked by libtpu."""
    given = libtpu_args if isinstance(libtpu_args, CompilerFlags) else CompilerFlags.parse(libtpu_args)
    flags = environment_flags().merged(given)
    check_compiler_flags(flags, topology_name)
    return flags


@contextlib.contextmanager
def _own_executor(executor: CompileExecutor | None) -> Iterator[CompileExecutor]:
    """`executor`, or local compile processes (`DEFAULT_COMPILE_WORKERS`) closed on leaving."""
    if executor is not None:
        yield executor
        return
    with CompileWorkers(DEFAULT_COMPILE_WORKERS) as own:
        yield own


def compile_record(outcomes: list[StrategyOutcome]) -> dict[str, Any]:
    """What the plan's stage2 section says of the device orders: the placement each strategy was
    compiled over, and the pairs recompiled over their own order to verify them (a verified pair on
    another placement than its strategy's compile)."""
    compiled = {o.key: o.compiled.placement_name for o in outcomes if o.compiled is not None}
    recompiled = [{"strategy": s.key, "placement": s.placement.name}
                  for o in outcomes for s in o.scored if s.verified and s.placement.name != compiled.get(o.key)]
    return {"compile_placements": compiled, "verify_recompiles": recompiled}


def _compile_order_notes(outcomes: list[StrategyOutcome], topology: Topology) -> list[str]:
    """A note when strategies were compiled over another device order than JAX's."""
    moved = [o.key for o in outcomes if o.compiled is not None and o.compiled.placement_name != JAX_DEFAULT]
    if not moved:
        return []
    return [f"on {topology.hardware.generation} the compiled program depends on the device order: {len(moved)} "
            f"of {sum(o.compiled is not None for o in outcomes)} strategies compiled over the placement Q2 ranks "
            "first on Stage 1's predicted collectives (stage2.compile_placements), not JAX's"]


def _stage2(space: StrategySpace, kept: list[tuple[str, Any]], topology: Topology, config: Stage2Config,
            executor: CompileExecutor, started: Mapping[str, Future[Compiled]], progress: bool,
            console: Any) -> Stage2Result:
    """`run_stage2` under a progress bar: compiles done of those to do, and the time left at the pace so far
    (within what is left of the time budget, if any)."""
    label = f"Stage 2: compile and score ({topology.name})"
    with progress_reporter(label, len(kept), console=console, quiet=not progress) as bar:
        pace = _Pace(bar, len(kept), config.budget)
        bar.set_remaining(None)
        return run_stage2(space, kept, topology, config, executor=executor, started=started,
                          on_compiled=lambda _: pace.done(), on_backfill=lambda _: pace.more(),
                          on_pruned=lambda _: pace.done())


class _Pace:
    """Stage 2's progress: advances the bar and re-estimates the seconds left at each compile done."""

    def __init__(self, bar: Counter, total: int, budget: TimeBudget | None) -> None:
        self.bar, self.total, self.budget = bar, total, budget
        self.finished, self.start = 0, time.monotonic()

    def done(self) -> None:
        self.finished += 1
        left = estimate_remaining(time.monotonic() - self.start, self.finished, self.total)
        if left is not None and self.budget is not None:
            left = min(left, max(self.budget.remaining(), 0.0))
        self.bar.set_remaining(left)  # before the advance, whose line (off a terminal) shows it
        self.bar.advance()

    def more(self) -> None:
        self.total += 1
        self.bar.add_to_total()


def _expert_json(dep: Any, key: str, outcomes: list[StrategyOutcome], best: Scored) -> dict[str, Any]:
    """An expert deployment on JAX's default placement against the plan's choice (or why it has no time)."""
    outcome = next(o for o in outcomes if o.key == key)
    if outcome.jax_default is not None:
        out = _pair_json(outcome.jax_default, best)
    else:
        out = {"strategy": key, "dropped": outcome.dropped}
    return {**out, **dep.to_json()}


def _pair_json(pair: Scored, best: Scored | None = None) -> dict[str, Any]:
    out = {
        "strategy": pair.key,
        "placement": pair.placement.name,
        "step_seconds": pair.q2.step_seconds,
        "exposed_comm_seconds": pair.q2.exposed_comm_seconds,
        "compute_seconds": pair.q2.compute_seconds,
        "verified_compile": pair.verified,
    }
    if best is not None and best.q2.step_seconds > 0:
        out["speedup_of_plan"] = pair.q2.step_seconds / best.q2.step_seconds
    return out


def _document(space, topology, request, stage1, outcomes, best, baselines, timings, notes,
              flags: CompilerFlags) -> dict[str, Any]:
    chosen = next(o for o in outcomes if o.key == best.key)
    q2 = best.q2
    return {
        **_header(space, topology, request, chosen.strategy, best.key, best.placement, best.verified, flags),
        "prediction": {
            "step_seconds": q2.step_seconds,
            "compute_seconds": q2.compute_seconds,
            "exposed_comm_seconds": q2.exposed_comm_seconds,
            "comm_seconds": q2.comm_seconds,
            "memory_bytes_per_device": chosen.compiled.memory_bytes if chosen.compiled else None,
            "collectives": [c.to_json() for c in q2.collectives],
            "link_bytes": q2.link_bytes.tolist(),
            "timeline": q2.timeline,
        },
        "baselines": baselines,
        "alternatives": [_alternative(o) for o in outcomes],
        "stage1": {"counts": stage1.counts(), "entries": [e.to_json() for e in stage1.entries]},
        "timings": timings,
        "notes": notes,
    }


def stage1_fallback_note(seconds: float) -> str:
    """The note of a plan no compile finished for within its time budget (`_stage1_document`)."""
    return (f"not compiled: the time budget of {seconds:g} s ran out before any strategy finished compiling; "
            "this plan is Stage 1's best strategy (Q1 rank 1) on the placement predicted best from its Stage 1 "
            "collectives, not checked by Q2: its predicted step is Q1's placement-independent lower bound "
            "(prediction.basis q1); plan with a larger --time-budget, or none, for a compiled plan")


def _stage1_document(space: StrategySpace, topology: Topology, request: dict[str, Any], stage1: Stage1Result,
                     outcomes: list[StrategyOutcome], experts: list[ExpertEntry], timings: dict[str, float],
                     notes: list[str], options: Q2Options, flags: CompilerFlags, budget: TimeBudget,
                     companion_costs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The plan when the time budget ran out before any compile finished: Stage 1's rank 1 on the
    placement Q2 ranks first on its predicted collectives, its step Q1's bound (`prediction.basis`
    `q1`), with the link loads of those collectives and no compiled collectives or timeline."""
    entry = stage1.kept[0]
    q1, strategy = entry.analysis()[0], entry.candidate.strategy
    model = CostModel(topology, options)
    placement, program = predicted_best_placement(space, topology, strategy, entry.summary, model)
    link_bytes = (model.evaluate(program, placement).link_bytes.tolist() if program is not None
                  else [0.0] * len(topology.links))
    baselines: dict[str, Any] = {}
    if experts:
        dropped = {o.key: o.dropped for o in outcomes}
        baselines["experts"] = [{"strategy": ex.key, "dropped": dropped.get(ex.key) or NOT_COMPILED,
                                 **ex.deployment.to_json()} for ex in experts]
        baselines["expert"] = baselines["experts"][0]
    doc = {
        **_header(space, topology, request, strategy, entry.key, placement, False, flags),
        "prediction": {
            "basis": "q1",
            "step_seconds": q1.seconds,
            "compute_seconds": q1.compute_seconds,
            "exposed_comm_seconds": max(q1.seconds - q1.compute_seconds, 0.0),
            "comm_seconds": q1.comm_seconds,
            "memory_bytes_per_device": None,
            "collectives": [],
            "link_bytes": link_bytes,
        },
        "baselines": baselines,
        "alternatives": [_alternative(o) for o in outcomes],
        "stage1": {"counts": stage1.counts(), "entries": [e.to_json() for e in stage1.entries]},
        "timings": timings,
        "notes": [stage1_fallback_note(budget.seconds), *notes],
    }
    doc.update(space.plan_totals(strategy, topology, q1.seconds, companion_costs))
    return doc


def _header(space: StrategySpace, topology: Topology, request: dict[str, Any], strategy: Any, key: str,
            placement: Any, verified: bool, flags: CompilerFlags) -> dict[str, Any]:
    """A plan's sections up to its prediction: what was planned, where, and the chosen pair."""
    return {
        **space.plan_details(strategy, topology),
        "schema_version": SCHEMA_VERSION,
        "aoizora_version": aoizora_version(),
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "request": request,
        "workload": space.workload(),
        "topology": {
            "name": topology.name,
            "generation": topology.generation,
            "shape": list(topology.shape),
            "wrap": list(topology.wrap),
            "cores_per_chip": topology.cores_per_chip,
            "device_kinds": sorted({d.device_kind for d in topology.devices}),
        },
        "toolchain": request["toolchain"],
        "compiler": {"libtpu_args": str(flags)},
        "mesh": {"axis_names": list(placement.mesh.axis_names),
                 "axis_sizes": list(placement.mesh.axis_sizes)},
        "strategy": {"key": key, **space.describe(strategy)},
        "placement": {
            "name": placement.name,
            "description": placement.description,
            "device_coords": placement.coords(topology).tolist(),
            "verified_compile": verified,
        },
    }


def _alternative(o: StrategyOutcome) -> dict[str, Any]:
    """The plan's row for one strategy Stage 2 compiled: why it was dropped, or its best pair and
    every placement's step."""
    row: dict[str, Any] = {"strategy": o.key, "placement": None}
    if o.dropped:
        row["dropped"] = o.dropped
    elif o.best is not None:
        row.update(_pair_json(o.best))
        row["memory_bytes_per_device"] = o.compiled.memory_bytes if o.compiled else None
        row["jax_default_step_seconds"] = o.jax_default.q2.step_seconds if o.jax_default else None
        row["placements"] = [
            {"name": s.placement.name, "step_seconds": s.q2.step_seconds,
             "exposed_comm_seconds": s.q2.exposed_comm_seconds}
            for s in sorted(o.scored, key=lambda s: s.q2.step_seconds)
        ]
    return row


def plan_for_pair(plan: Plan, space: StrategySpace[S], strategy: S, placement: Any, topology: Topology,
                  prediction: dict[str, float]) -> Plan:
    """The same plan document with another (strategy, placement) pair of `space` as its choice.

    For running and timing alternatives (`aoizora bench --measure`) with the same tools as the plan.
    """
    import copy

    key = space.key_of(strategy)
    doc = copy.deepcopy(plan.data)
    doc["mesh"] = {"axis_names": list(placement.mesh.axis_names), "axis_sizes": list(placement.mesh.axis_sizes)}
    doc["strategy"] = {"key": key, **space.describe(strategy)}
    doc["placement"] = {"name": placement.name, "description": placement.description,
                        "device_coords": placement.coords(topology).tolist(), "verified_compile": False}
    doc["prediction"] = dict(prediction)
    doc.pop("baselines", None)  # the chosen strategy's, not this pair's
    # the pair compiles with its own flags (`compile_flags`: e.g. its scoped-VMEM limit); the
    # chosen strategy's own, if it has some, are not the pair's (then libtpu's default, or the
    # plan's flags, apply)
    chosen = CompilerFlags.parse(space.compile_flags(space.from_description(plan.strategy)))
    flags = {k: v for k, v in CompilerFlags.parse(doc.get("compiler", {}).get("libtpu_args", "")).items
             if k not in dict(chosen.items)}
    flags.update(CompilerFlags.parse(space.compile_flags(strategy)).items)
    doc["compiler"] = {"libtpu_args": str(CompilerFlags(tuple(sorted(flags.items()))))}
    doc["notes"] = list(doc.get("notes", [])) + [f"derived from the plan for {plan.strategy['key']} to run {key}"]
    return Plan(doc)


def nothing_fits(space: StrategySpace, topology: Topology, stage1: Stage1Result) -> PlanningError:
    """The error of a Stage 1 that kept no strategy: a few of the reasons, and what to do."""
    reasons = sorted({r for e in stage1.entries for r in e.reasons})[:3]
    return PlanningError(
        f"no strategy of {space.name} fits on {topology.name} ({'; '.join(reasons) or 'none legal'}); "
        "use a larger slice or a smaller workload"
    )


def plan_function(
    fn: Any,
    abstract_args: Any,
    strategy_space: StrategySpace | list,
    topology: Topology | str,
    **kwargs: Any,
) -> PlanResult:
    """Plan a user's own JAX function through the same two stages.

    `strategy_space` is either a `StrategySpace` or a list of `FunctionStrategy` (a mesh and the
    PartitionSpec of each argument); `abstract_args` are `jax.ShapeDtypeStruct`s (no data).
    """
    from aoizora.plan.arguments import check_topology
    from aoizora.plan.function_space import FunctionSpace
    from aoizora.topology import get_topology

    check_topology(topology)
    topo = get_topology(topology) if isinstance(topology, str) else topology
    space = (strategy_space if isinstance(strategy_space, StrategySpace)
             else FunctionSpace(fn, abstract_args, strategy_space))
    return plan_space(space, topo, **kwargs)
