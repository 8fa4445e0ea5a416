"""One grid cell: aoizora's plan, the expert and logical-search baselines and the oracle, side by side.

Every latency in a cell's table comes from one source: the reference simulator (`aoizora.sim`) on
the program libtpu compiled for the strategy, or, with `measure=True`, timings of the plans on the
devices present. aoizora is run through its public planner (`plan_space`), exactly as users run
it; the harness knows the grid, the planner does not.

The oracle compiles every legal strategy (those whose arguments alone exceed HBM cannot fit and
are not compiled) and simulates every distinct placement of each — except, with `oracle_bound`
(the default), strategies that provably cannot win: Q1 bounds a strategy's step time from below
for every placement, so once a simulated pair is faster than a strategy's Q1, that strategy is
not compiled. The sweep goes in Q1 order (after the strategies the baselines and the planner
need, and those Stage 1 dropped for memory, whose compiles check the memory estimate), so the
first strategy whose Q1 reaches the best simulated latency ends it. The compiles run on the cell's
executor, as many at once as it runs; a strategy is only pruned when no compile is in flight, so
nothing a sequential sweep compiles is pruned (`aoizora.stage2.sweep.BoundedSweep`). The bound is
checked on every compiled strategy (Q1 <= its best simulated pair); should it fail once, nothing is pruned. Without
the oracle (`oracle=False`, `--quick`) the "oracle" column is the best pair among the strategies
that were compiled anyway (the planner's Top-K, the expert's and the logical search's), and the
table says so.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aoizora.cost import CostModel, Q2Options
from aoizora.defaults import DEFAULT_COMPILE_TIMEOUT_S, DEFAULT_COMPILE_WORKERS
from aoizora.errors import BenchError, ExecutorError
from aoizora.evaluation.bench.baselines import logical_search
from aoizora.evaluation.bench.grid import FALLBACK_MODEL, Cell
from aoizora.evaluation.validation.rank import rank_placements
from aoizora.placement import JAX_DEFAULT, enumerate_placements
from aoizora.plan.planner import expert_entries, plan_space, planning_flags
from aoizora.progress import progress_reporter
from aoizora.stage1 import run_stage1
from aoizora.stage1.search import ILLEGAL, LOWERING_FAILED, OUT_OF_MEMORY, Entry
from aoizora.stage2 import predicted_compile_placement
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compile_workers import CompileExecutor, CompileWorkers
from aoizora.stage2.compiling import compile_strategy
from aoizora.stage2.outcomes import Compiled, Scored, StrategyOutcome, drop_reason, refused_for_memory
from aoizora.stage2.sweep import BoundedSweep
from aoizora.toolchain import CompilerFlags, source_fingerprint
from aoizora.topology import get_topology
from aoizora.workload import Candidate, StrategySpace


class NoStrategyFits(BenchError):
    """No strategy of the cell's model fits on its slice (the grid then falls back to 1.3B)."""


@dataclass
class BenchOptions:
    top_k: int
    oracle: bool = True
    oracle_bound: bool = True  # skip strategies whose Q1 proves they cannot beat the best simulated pair
    measure: bool = False
    measure_steps: int = 5
    compile_timeout_s: float | None = DEFAULT_COMPILE_TIMEOUT_S
    options: Q2Options | None = None
    flags: CompilerFlags = CompilerFlags()  # libtpu flags of every compile (the planner's and the oracle's)
    flags_by_key: dict[str, CompilerFlags] = dataclasses.field(default_factory=dict)  # entries with their own (experts)

    def flags_of(self, key: str) -> CompilerFlags:
        return self.flags_by_key.get(key, self.flags)


def _not_compilable(e: Entry) -> str | None:
    """Why an entry is not compiled by the oracle (None: compile it)."""
    if e.verdict in (ILLEGAL, LOWERING_FAILED):
        return e.verdict
    if any("arguments alone" in r for r in e.reasons):
        return e.reasons[0]  # the exact argument bytes exceed HBM: no program can fit
    return None


def run_cell(cell: Cell, opts: BenchOptions, cache: CompileCache, *, progress: bool = True, console: Any = None,
             log: Callable[[str], None] = lambda _: None, space: StrategySpace | None = None,
             executor: CompileExecutor | None = None) -> dict[str, Any]:
    """Plan, baselines, oracle and metrics for one cell (a JSON-able dict).

    `space`: the workload's strategy space (default: the cell's Wan model at its shapes).
    `executor`: where the planner's and the oracle's compiles run, up to its `size` at once
    (default: `DEFAULT_COMPILE_WORKERS` local child processes, for this cell).
    """
    if executor is None:
        with CompileWorkers(DEFAULT_COMPILE_WORKERS) as own:
            return run_cell(cell, opts, cache, progress=progress, console=console, log=log, space=space,
                            executor=own)
    from aoizora.models.registry import wan_space

    topo = get_topology(cell.topology)
    if space is None:
        # the bench judges the step's choice: no VAE decode compile (the plan's video time is not scored)
        space = wan_space(cell.model, cell.resolution, cell.frames, generation=topo.generation, vae=None)
    space = space.under_flags(planning_flags(opts.flags, topo.name))  # as `plan_space` plans it
    options = opts.options or Q2Options()
    t_cell = time.perf_counter()

    stage1 = run_stage1(space, topo, top_k=opts.top_k, keep_predictions=True, progress=progress, console=console)
    if not stage1.ranked:
        reasons = sorted({r for e in stage1.entries for r in e.reasons if "memory" in r or "HBM" in r})[:1]
        raise NoStrategyFits(f"no {cell.model} strategy fits on {cell.topology} ({'; '.join(reasons) or 'none legal'})")

    log(f"{cell.label()}: planning with aoizora (Top-{opts.top_k})")
    planned = plan_space(space, topo, top_k=opts.top_k, options=options, compile_timeout_s=opts.compile_timeout_s,
                         use_cache=False, compile_cache=cache, stage1=stage1, progress=progress, console=console,
                         libtpu_args=opts.flags, executor=executor)
    return _baselines_and_oracle(cell, opts, cache, space, topo, options, stage1, planned, t_cell, progress,
                                 console, log, executor)


def _baselines_and_oracle(cell, opts, cache, space, topo, options, stage1, planned, t_cell, progress, console, log,
                          executor) -> dict[str, Any]:
    """`run_cell` after planning: the baselines, the oracle sweep and the metrics (compiles in `executor`).

    Over 60 lines: half of it is the cell record's literal, one field a line, kept whole so that
    the record's schema reads in one place."""
    plan = planned.plan
    chosen = (plan.strategy["key"], plan.data["placement"]["name"])
    alone = search_only_choice(planned, stage1, space, topo, options, opts, cache, executor)

    entries = expert_entries(space, topo, opts.flags)  # each compiled with its own flags, as the planner does
    experts = [(ex.key, ex.deployment) for ex in entries]
    opts = dataclasses.replace(opts, flags_by_key={ex.key: ex.flags for ex in entries})
    expert_key = experts[0][0] if experts else None  # the primary deployment
    logical = logical_search(stage1, topo)

    by_key = {e.key: e for e in stage1.entries}
    # a deployment outside Stage 1's space (e.g. with its own splash block sizes) is scored all the same
    for key, dep in experts:
        by_key.setdefault(key, Entry(Candidate(key, dep.strategy), verdict="expert deployment"))
    skipped = {e.key: why for e in stage1.entries if (why := _not_compilable(e)) is not None}
    wanted = ({o.key for o in planned.outcomes or [] if o.compiled is not None or o.dropped} | {logical.key}
              | {k for k, _ in experts})
    first, rest = _scoring_order(stage1, by_key, wanted, skipped, opts.oracle)

    log(f"{cell.label()}: {'oracle' if opts.oracle else 'scoring'} over {len(first) + len(rest)} strategies")
    # the planner's programs (compiled over placements[0], as the oracle compiles) are not compiled again
    known = {o.key: o.compiled for o in planned.outcomes or [] if o.compiled is not None}
    strategies, pairs, pruned, violations = _score_strategies(
        space, topo, first, rest, opts.oracle and opts.oracle_bound, options, opts, cache, progress, console, known,
        executor)
    logical_key = _logical_deployment(logical, space, topo, by_key, options, opts, cache, strategies, pairs, known,
                                      executor)

    # What a user deploys is the program compiled with the pair's own device order: aoizora's
    # choice and the oracle's best pair are simulated on that program (pairs on their strategy's
    # compile placement already are).
    # The logical search deploys on JAX's order: where its strategy was compiled over another
    # (a generation whose program depends on the order), it is simulated on its own compile too.
    own: dict[str, Any] = {}
    for role, pair in (("aoizora", chosen), ("oracle", _best_pair(pairs)), ("logical", (logical_key, JAX_DEFAULT))):
        if pair is not None and pair[1] != strategies.get(pair[0], {}).get("compile_placement", JAX_DEFAULT):
            own[role] = _simulate_own_compile(space, topo, by_key[pair[0]], pair[1], options, opts, cache, executor)

    doc: dict[str, Any] = {
        "cell": {"topology": cell.topology, "resolution": cell.resolution, "frames": cell.frames, "model": cell.model},
        "top_k": opts.top_k,
        "libtpu_args": str(opts.flags),
        "oracle_complete": opts.oracle,
        "oracle_bounded": opts.oracle and opts.oracle_bound,
        "aoizora_source": source_fingerprint(),
        "source": "measured" if opts.measure else "simulated",
        "aoizora": {"strategy": chosen[0], "placement": chosen[1], "q2_seconds": plan.predicted_step_seconds,
                    "own_compile": own.get("aoizora")},
        "oracle_own_compile": own.get("oracle"),
        "aoizora_search_only": {"strategy": alone.key, "placement": alone.placement.name,
                                "q2_seconds": alone.q2.step_seconds},
        "expert": {"strategy": expert_key, "placement": JAX_DEFAULT},
        "experts": [{"strategy": k, "placement": JAX_DEFAULT, **d.to_json()} for k, d in experts],
        "logical": {"strategy": logical_key, "placement": JAX_DEFAULT, "first_choice": logical.key,
                    "alpha_beta_seconds": dict(logical.ranking).get(logical_key) if logical_key else None,
                    "own_compile": own.get("logical")},
        "strategies": strategies,
        "pairs": pairs,
        "skipped": skipped,
        # not compiled: Q1 (a lower bound for every placement) >= the best simulated pair
        "pruned_by_q1": pruned,
        "q1_bound_violations": violations,
        "stage1": _stage1_report(stage1),
        "planning_seconds": dict(plan.data["timings"]),
        "plan_notes": plan.data["notes"],
    }
    if opts.measure:
        doc["measured"] = _measure_pairs(plan, space, topo, doc, opts.measure_steps, log)
    doc["metrics"] = cell_metrics(doc)
    doc["bench_seconds"] = time.perf_counter() - t_cell
    return doc


def _scoring_order(stage1: Any, by_key: dict[str, Entry], wanted: set[str], skipped: dict[str, str],
                   oracle: bool) -> tuple[list[Entry], list[Entry]]:
    """(first, rest): the strategies to score whatever their bound (the `wanted` ones; with the oracle,
    also those Stage 1 has no Q1 for or finds out of memory), then the oracle's others in ascending Q1."""
    first = [by_key[k] for k in sorted(wanted) if k in by_key]
    rest: list[Entry] = []
    if oracle:
        first += [e for e in stage1.entries if e.key not in skipped and e.key not in wanted
                  and (e.q1 is None or e.verdict == OUT_OF_MEMORY)]
        taken = {e.key for e in first}
        rest = sorted((e for e in stage1.entries if e.key not in skipped and e.key not in taken),
                      key=lambda e: e.analysis()[0].seconds)  # `first` took those without a Q1
    return first, rest


def _logical_deployment(logical: Any, space: StrategySpace, topo: Any, by_key: dict[str, Entry], options: Q2Options,
                        opts: BenchOptions, cache: CompileCache, strategies: dict[str, Any],
                        pairs: list[dict[str, Any]], known: dict[str, Compiled],
                        executor: CompileExecutor) -> str | None:
    """The strategy the logical search deploys: its first choice the compiler accepts (a choice refused
    for HBM deploys the next), scored here when the oracle did not score it."""
    for key, _ in logical.ranking:
        if key not in strategies and key in by_key:
            _score_one(space, topo, by_key[key], options, opts, cache, strategies, pairs, known, executor)
        if key in strategies and "dropped" not in strategies[key]:
            return key
    return None


def _stage1_report(stage1: Any) -> dict[str, Any]:
    """Stage 1's counts, seconds, ranks, Q1 and memory per strategy, and verdicts, for the cell's record."""
    return {
        "counts": stage1.counts(), "seconds": stage1.seconds,
        "ranks": {e.key: e.rank for e in stage1.entries if e.rank is not None},
        "q1_seconds": {e.key: e.q1.seconds for e in stage1.entries if e.q1 is not None},
        "memory_bytes": {e.key: e.memory.total_bytes for e in stage1.entries if e.memory is not None},
        "verdicts": {e.key: e.verdict for e in stage1.entries},
    }


def search_only_choice(planned: Any, stage1: Any, space: StrategySpace, topo: Any, options: Q2Options,
                       opts: BenchOptions, cache: CompileCache, executor: CompileExecutor) -> Any:
    """What the search finds without the expert deployments among its candidates (the shipped
    planner adds them): the best pair of the planner's own outcomes from Stage 1's strategies.

    The planner skips strategies whose Q1 reaches the best Q2 it found, the experts' included: a
    Stage 1 strategy it skipped because of an expert may still be the best of Stage 1's own, so
    those are compiled here (from the compile cache when the oracle has them), in Q1 order, until
    the next one's Q1 reaches the best Q2 of Stage 1's strategies.
    """
    searched = {e.key for e in stage1.entries}
    pairs = [s for o in planned.outcomes or [] if o.key in searched for s in o.scored]
    pruned = (planned.stage2.pruned if planned.stage2 is not None else {})
    model = CostModel(topo, options)
    by_key = {e.key: e for e in stage1.entries}
    for key in sorted(pruned, key=lambda k: pruned[k]["q1_seconds"]):
        best = min((s.q2.step_seconds for s in pairs), default=math.inf)
        if pruned[key]["q1_seconds"] >= best:
            break
        strategy = by_key[key].candidate.strategy
        placements = enumerate_placements(topo, space.mesh_spec(strategy)).placements
        own_order = predicted_compile_placement(space, topo, strategy, by_key[key].summary, model)
        try:
            compiled = compile_strategy(space, strategy, key, topo, own_order, opts.compile_timeout_s, cache,
                                        opts.flags_of(key), executor=executor)
        except ExecutorError:
            raise
        except Exception:  # refused or failed: not a choice the search could deploy
            continue
        pairs += [Scored(key, p, model.evaluate(compiled.program, p), compiled.program) for p in placements]
    return min(pairs, key=lambda s: (s.q2.step_seconds, not s.verified))


def _best_pair(pairs: list[dict[str, Any]]) -> tuple[str, str] | None:
    best = min(pairs, key=lambda p: p["sim_seconds"], default=None)
    return (best["strategy"], best["placement"]) if best else None


def _simulate_own_compile(space, topo, entry: Entry, placement_name: str, options, opts, cache,
                          executor) -> dict[str, Any]:
    """The pair's strategy compiled with the placement's own device order, simulated on it."""
    from aoizora.evaluation.validation.rank import simulator_options
    from aoizora.sim import simulate

    spec = space.mesh_spec(entry.candidate.strategy)
    placement = next(p for p in enumerate_placements(topo, spec).placements if p.name == placement_name)
    try:
        compiled = compile_strategy(space, entry.candidate.strategy, entry.key, topo, placement,
                                    opts.compile_timeout_s, cache, opts.flags_of(entry.key), executor=executor)
    except ExecutorError:
        raise
    except Exception as exc:
        return {"strategy": entry.key, "placement": placement_name, "dropped": drop_reason(exc)}
    sim = simulate(compiled.program, topo, placement, **simulator_options(options))
    return {"strategy": entry.key, "placement": placement_name, "sim_seconds": sim.step_seconds}


def _score_one(space, topo, e: Entry, options, opts, cache, strategies: dict[str, Any], pairs: list[dict[str, Any]],
               known: dict[str, Compiled], executor: CompileExecutor) -> None:
    """Compile one strategy (unless `known` holds it; else from the cache) and score every placement of it."""
    try:
        compiled = known.get(e.key) or _compile_entry(space, topo, e, opts, cache, executor)
    except ExecutorError:  # the executor cannot compile at all: not this strategy's failure
        raise
    except Exception as exc:
        strategies[e.key] = {"dropped": drop_reason(exc)}
        return
    _score_compiled(space, topo, e.key, e.candidate.strategy, compiled, options, strategies, pairs)


def _compile_entry(space, topo, e: Entry, opts: BenchOptions, cache: CompileCache,
                   executor: CompileExecutor) -> Compiled:
    """A strategy compiled over the device order the planner compiles it over: an expert's (its own
    flags) over JAX's, the others over their predicted best (`aoizora.stage2.compile_order`)."""
    summary = None if e.key in opts.flags_by_key else e.summary
    placement = predicted_compile_placement(space, topo, e.candidate.strategy, summary,
                                            CostModel(topo, opts.options))
    return compile_strategy(space, e.candidate.strategy, e.key, topo, placement, opts.compile_timeout_s, cache,
                            opts.flags_of(e.key), executor=executor)


def _score_compiled(space, topo, key: str, strategy: Any, compiled: Compiled, options, strategies: dict[str, Any],
                    pairs: list[dict[str, Any]]) -> list[float]:
    """Q2 and the simulator on every placement of a compiled strategy (added to `pairs`); the simulated seconds."""
    placements = enumerate_placements(topo, space.mesh_spec(strategy)).placements
    strategies[key] = {"memory_bytes": compiled.memory_bytes, "compile_seconds": compiled.compile_seconds,
                       "placements": len(placements), "compile_placement": compiled.placement_name}
    sims = []
    for r in rank_placements(compiled.program, topo, placements, options=options, simulate=True):
        assert r.sim is not None  # simulate=True
        pairs.append({"strategy": key, "placement": r.placement.name, "q2_seconds": r.q2.step_seconds,
                      "q2_compute_seconds": r.q2.compute_seconds,
                      "q2_exposed_comm_seconds": r.q2.exposed_comm_seconds, "sim_seconds": r.sim.step_seconds})
        sims.append(r.sim.step_seconds)
    return sims


def _score_strategies(space, topo, first: list[Entry], rest: list[Entry], bound: bool, options, opts, cache,
                      progress, console, known, executor: CompileExecutor):
    """Score `first`, then `rest` (in ascending Q1) until, with `bound`, a strategy's Q1 reaches the
    best simulated latency so far: it and every later one are pruned (their Q1 is no lower).

    Up to `executor.size` compiles run at once (`BoundedSweep`, with `first` as its baselines and
    the simulated latency in place of Q2): a pruning decision rests on every strategy started before
    it, so what is pruned is what a sequential sweep prunes, or less.
    Returns (strategies, pairs, pruned {key: why}, bound violations [keys whose Q1 > their best])."""
    strategies: dict[str, Any] = {}
    pairs: list[dict[str, Any]] = []
    entries = first + rest
    by_key = {e.key: e for e in entries}
    bounds = {e.key: e.q1.seconds for e in entries if e.q1 is not None}  # every Q1 is checked against its best
    never_pruned = [e.key for e in (first if bound else entries)]

    def compile_one(key: str, _strategy: Any) -> Compiled:
        return known.get(key) or _compile_entry(space, topo, by_key[key], opts, cache, executor)

    def sweep(advance: Callable[[], None]) -> BoundedSweep:
        def finish(_i: int, outcome: StrategyOutcome) -> None:
            if outcome.compiled is None:
                strategies[outcome.key] = {"dropped": outcome.dropped}
            else:
                sims = _score_compiled(space, topo, outcome.key, outcome.strategy, outcome.compiled, options,
                                       strategies, pairs)
                swept.scored(outcome.key, sims)
            advance()

        swept = BoundedSweep([(e.key, e.candidate.strategy) for e in entries], bounds, never_pruned, executor.size,
                             compile_one, finish, None)
        swept.run(abort=executor.close)
        return swept

    label = f"compile + simulate ({topo.name})"
    with progress_reporter(label, len(entries), console=console, quiet=not progress) as bar:
        done = sweep(bar.advance)
    pruned = {k: {"q1_seconds": v["q1_seconds"], "best_sim_seconds": v["best_q2_seconds"]}
              for k, v in done.summary.pruned.items()}
    return strategies, pairs, pruned, list(done.summary.bound_violations)


def _measure_pairs(plan, space, topo, doc, steps, log) -> dict[str, Any]:
    """Time the plans of aoizora, the baselines and the oracle's three best simulated pairs."""
    from aoizora.plan.planner import plan_for_pair
    from aoizora.runtime.plan_run import run_plan

    wanted = {"aoizora": (doc["aoizora"]["strategy"], doc["aoizora"]["placement"]),
              "expert": (doc["expert"]["strategy"], JAX_DEFAULT),
              "logical": (doc["logical"]["strategy"], JAX_DEFAULT)}
    for ex in doc.get("experts", [])[1:]:
        wanted[f"expert:{ex['name']}"] = (ex["strategy"], JAX_DEFAULT)
    best = sorted(doc["pairs"], key=lambda p: p["sim_seconds"])[:3]
    for i, p in enumerate(best):
        wanted[f"oracle_candidate_{i}"] = (p["strategy"], p["placement"])
    strategies = {space.key_of(c.strategy): c.strategy for c in space.candidates(topo.num_devices)}
    strategies.update({space.key_of(d.strategy): d.strategy for d in space.expert_deployments(topo)})
    out: dict[str, Any] = {}
    for role, (key, placement_name) in wanted.items():
        if key is None or key not in strategies:
            continue
        spec = space.mesh_spec(strategies[key])
        placement = next(p for p in enumerate_placements(topo, spec).placements if p.name == placement_name)
        pair = next((p for p in doc["pairs"] if p["strategy"] == key and p["placement"] == placement_name), None)
        if pair is None:
            continue
        prediction = {"step_seconds": pair["q2_seconds"], "compute_seconds": pair["q2_compute_seconds"],
                      "exposed_comm_seconds": pair["q2_exposed_comm_seconds"]}
        log(f"measuring {role}: {key} / {placement_name}")
        pair_plan = plan_for_pair(plan, space, strategies[key], placement, topo, prediction)
        report = run_plan(pair_plan, steps=steps)
        out[role] = {"strategy": key, "placement": placement_name, "median_step_seconds": report.median_step_seconds,
                     "platform": report.platform, "on_planned_slice": report.on_planned_slice, "config": report.config}
    return out


def _latency(doc: dict[str, Any], key: str | None, placement: str) -> float | None:
    if key is None:
        return None
    if doc["source"] == "measured":
        for m in doc.get("measured", {}).values():
            if m["strategy"] == key and m["placement"] == placement:
                return m["median_step_seconds"]
        return None
    for own in (doc["aoizora"].get("own_compile"), doc.get("oracle_own_compile"), doc["logical"].get("own_compile")):
        if own and own["strategy"] == key and own["placement"] == placement and "sim_seconds" in own:
            return own["sim_seconds"]
    for p in doc["pairs"]:
        if p["strategy"] == key and p["placement"] == placement:
            return p["sim_seconds"]
    return None


def cell_metrics(doc: dict[str, Any]) -> dict[str, Any]:
    """Latencies of each contender, speedups, spread, recall, rank correlation, memory checks."""
    a, ex, lo = doc["aoizora"], doc["expert"], doc["logical"]
    lat = {
        "aoizora": _latency(doc, a["strategy"], a["placement"]),
        "expert": _latency(doc, ex["strategy"], ex["placement"]),
        "logical": _latency(doc, lo["strategy"], lo["placement"]),
    }
    so = doc.get("aoizora_search_only")
    search_only = _latency(doc, so["strategy"], so["placement"]) if so else None
    pairs = doc["pairs"]
    oracle_pair, lat["oracle"] = _oracle_pair(doc)
    # every documented expert deployment of the generation, by name (the primary one is "expert")
    expert_latency = {ex["name"]: _latency(doc, ex["strategy"], ex["placement"]) for ex in doc.get("experts", [])}

    chosen = [p["sim_seconds"] for p in pairs if p["strategy"] == a["strategy"]]
    # a compile that timed out or failed leaves a hole in the oracle (a refusal for HBM does not:
    # that strategy cannot run), so recall is not claimed for such a cell
    failed = sorted(k for k, s in doc["strategies"].items() if "dropped" in s and not refused_for_memory(s["dropped"]))
    complete = doc["oracle_complete"] and not failed
    oracle_key = oracle_pair["strategy"] if oracle_pair else None
    oracle_rank = doc["stage1"]["ranks"].get(oracle_key) if oracle_key else None
    rho, rho_q1 = _rank_correlations(doc)
    mem_err, accepted_but_dropped = _memory_checks(doc)
    return {
        "latency_seconds": lat,
        "speedup_over_expert": _ratio(lat["expert"], lat["aoizora"]),
        # the search alone (the expert deployments not among Stage 2's candidates); None in cells
        # computed before it was recorded
        "search_only_latency_seconds": search_only,
        "speedup_over_expert_search_only": _ratio(lat["expert"], search_only),
        "expert_latency_seconds": expert_latency,
        "speedup_over_experts": {name: _ratio(t, lat["aoizora"]) for name, t in expert_latency.items()},
        "speedup_over_logical": _ratio(lat["logical"], lat["aoizora"]),
        "oracle_over_aoizora": _ratio(lat["aoizora"], lat["oracle"]),
        "oracle": {"strategy": oracle_key, "placement": oracle_pair["placement"] if oracle_pair else None,
                   "stage1_rank": oracle_rank, "complete": complete},
        "placement_spread": (max(chosen) / min(chosen)) if chosen else None,
        "top1_recall": (oracle_rank is not None and oracle_rank <= doc["top_k"]) if complete else None,
        "k_for_full_recall": oracle_rank if complete else None,
        "spearman_q2_sim": rho,
        "spearman_q1_best_sim": rho_q1,
        "pairs_scored": len(pairs),
        "strategies_compiled": sum(1 for s in doc["strategies"].values() if "dropped" not in s),
        "strategies_refused_by_compiler": sum(1 for s in doc["strategies"].values()
                                              if refused_for_memory(s.get("dropped", ""))),
        "strategies_failed_to_compile": failed,
        "memory_estimate_max_rel_error": max(mem_err) if mem_err else None,
        "dropped_by_stage1_but_compiled": accepted_but_dropped,
        "strategies_pruned_by_q1": len(doc.get("pruned_by_q1", {})),
        "q1_bound_violations": list(doc.get("q1_bound_violations", [])),
    }


def _ratio(x: float | None, y: float | None) -> float | None:
    return x / y if x is not None and y else None


def _oracle_pair(doc: dict[str, Any]) -> tuple[dict[str, Any] | None, float | None]:
    """(the oracle's best pair, its latency): the fastest measured candidate in a measured cell, else
    the pair with the lowest simulated step."""
    if doc["source"] == "measured":
        cands = [m for r, m in doc.get("measured", {}).items() if r.startswith("oracle_candidate")]
        best = min(cands, key=lambda m: m["median_step_seconds"], default=None)
        return best, best["median_step_seconds"] if best else None
    best = min(doc["pairs"], key=lambda p: p["sim_seconds"], default=None)
    return best, _latency(doc, best["strategy"], best["placement"]) if best else None


def best_simulated_seconds(pairs: list[dict[str, Any]]) -> dict[str, float]:
    """Each compiled strategy's fastest simulated placement, in seconds."""
    best: dict[str, float] = {}
    for p in pairs:
        best[p["strategy"]] = min(best.get(p["strategy"], math.inf), p["sim_seconds"])
    return best


def _rank_correlations(doc: dict[str, Any]) -> tuple[float | None, float | None]:
    """Spearman's rho of Q2 against the simulator over the pairs, and of Q1 against each strategy's
    best simulated pair (None with fewer than three, or when every value ties: JSON has no NaN)."""
    from scipy.stats import spearmanr

    pairs = doc["pairs"]
    rho = None
    if len(pairs) >= 3:
        rho = float(spearmanr([p["q2_seconds"] for p in pairs], [p["sim_seconds"] for p in pairs]).statistic)
        rho = rho if math.isfinite(rho) else None
    best_sim = best_simulated_seconds(pairs)
    q1, ranks = doc["stage1"]["q1_seconds"], doc["stage1"]["ranks"]
    common = [k for k in best_sim if k in q1 and k in ranks]
    rho_q1 = (float(spearmanr([q1[k] for k in common], [best_sim[k] for k in common]).statistic)
              if len(common) >= 3 else None)
    rho_q1 = rho_q1 if rho_q1 is not None and math.isfinite(rho_q1) else None
    return rho, rho_q1


def _memory_checks(doc: dict[str, Any]) -> tuple[list[float], list[str]]:
    """(relative errors of Stage 1's memory estimate against the compiler's, strategies Stage 1 found out
    of memory that compiled)."""
    mem_est, verdicts = doc["stage1"]["memory_bytes"], doc["stage1"]["verdicts"]
    mem_err, accepted_but_dropped = [], []
    for k, s in doc["strategies"].items():
        if s.get("memory_bytes") and k in mem_est:
            mem_err.append(abs(mem_est[k] - s["memory_bytes"]) / s["memory_bytes"])
            if verdicts.get(k) == "out-of-memory":
                accepted_but_dropped.append(k)
    return mem_err, accepted_but_dropped


def run_cell_with_fallback(cell: Cell, opts: BenchOptions, cache: CompileCache, **kwargs: Any) -> dict[str, Any]:
    """`run_cell`, retried with Wan 1.3B when no 14B strategy fits the slice (said so in the result)."""
    try:
        return run_cell(cell, opts, cache, **kwargs)
    except NoStrategyFits as exc:
        if cell.model == FALLBACK_MODEL:
            raise
        doc = run_cell(Cell(cell.topology, cell.resolution, cell.frames, FALLBACK_MODEL), opts, cache, **kwargs)
        doc["fallback_reason"] = str(exc)
        return doc
