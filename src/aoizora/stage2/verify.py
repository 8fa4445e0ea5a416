"""Verification: the leading (strategy, placement) pairs, scored on a program compiled over the
strategy's shared device order, are recompiled over their own order and re-scored, unless the
compiler's output provably cannot change their Q2 there. A recompile compiles what Stage 2 did
(the strategy's compiled form, at the plan's flags: `compiling.compile_strategy`)."""

from __future__ import annotations

from collections.abc import Callable

from aoizora.cost import CostModel
from aoizora.errors import ExecutorError
from aoizora.hlo.algorithm import RingOrder
from aoizora.hlo.program import Program
from aoizora.placement import Placement
from aoizora.stage2 import compiling
from aoizora.stage2.budget import TimeBudget, compile_timeout
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compile_workers import CompileExecutor, CompileTimeout
from aoizora.stage2.outcomes import StrategyOutcome, drop_reason
from aoizora.toolchain import CompilerFlags
from aoizora.topology import Topology
from aoizora.workload import StrategySpace

#: Generations on which libtpu 0.0.42.1's compiled program depends on the mesh's device order only
#: through each collective's ``has_reordering_map``: `experiments/order_dependence.py` compiles a small
#: transformer's strategies over several placements (v5e:2x4: 2 of 6 strategies differ, each only
#: in that flag of its ``1DAllGatherNonMajorDim`` all-gathers), and Wan programs compiled over two
#: orders on v5e and v6e were identical. On TPU7x the collectives carry explicit ICI rings and
#: SparseCore assignments that change with the order; other generations were not probed.
REORDERING_MAP_ONLY_GENERATIONS = frozenset({"v5e", "v6e"})


def recompile_cannot_change_q2(model: CostModel, program: Program, placement: Placement) -> bool:
    """Whether recompiling `program`'s strategy over `placement`'s own device order leaves its Q2 as is.

    The rule: on a generation in `REORDERING_MAP_ONLY_GENERATIONS` the recompiled program differs
    at most in which collectives keep a reordering map, which Q2 reads only under the `auto` ring
    order, and there only for a collective whose listed and best rings cost differently on this
    placement (`CostModel.order_sensitive_collectives`). With no such collective, Q2 cannot change.
    """
    if not generation_order_is_maps_only(model.topology):
        return False
    if model.options.order is not RingOrder.REORDERING_MAP:
        return True
    return not model.order_sensitive_collectives(program, placement)


def verify_leading_pairs(space: StrategySpace, topology: Topology, model: CostModel, outcomes: list[StrategyOutcome],
            verify_top: int, verified: set[tuple[str, str]], timeout_s: float | None, cache: CompileCache | None,
            flags_of: Callable[[str], CompilerFlags | None], timings: dict[str, float], notes: list[str],
            pool: CompileExecutor, budget: TimeBudget | None = None) -> None:
    """Recompile the leading `verify_top` pairs (not verified before) with their own device order; re-score them.

    Under a `budget`, a pair whose recompile the budget leaves no time for, or stops, stays
    unverified (recorded in `budget.record`)."""
    by_key = {o.key: o for o in outcomes}
    # the placement each strategy was compiled over (only compiled strategies have scored pairs)
    compiled_over = {o.key: o.compiled.placement_name for o in outcomes if o.compiled is not None}
    # among pairs of one strategy with equal Q2, the one on its compile placement leads: it needs no recompile
    rank = {o.key: i for i, o in enumerate(outcomes)}
    pairs = sorted((s for o in outcomes for s in o.scored), key=lambda s: (
        s.q2.step_seconds, rank[s.key], s.placement.name != compiled_over[s.key]))
    for s in pairs[:verify_top]:
        if (s.key, s.placement.name) in verified:
            continue
        verified.add((s.key, s.placement.name))
        if s.placement.name == compiled_over[s.key]:  # its program is its own compile
            s.verified = True
            continue
        if recompile_cannot_change_q2(model, s.program, s.placement):
            notes.append(f"{s.key} / {s.placement.name}: not recompiled with its own device order: on "
                         f"{topology.hardware.generation} that can change only the compiler's ring reordering, "
                         f"which no collective's Q2 depends on here")
            continue
        outcome = by_key[s.key]
        timeout = compile_timeout(budget, timeout_s)
        if budget is not None and timeout.spent:
            _not_verified(budget, s.key, s.placement.name, notes)
            continue
        try:
            own = compiling.compile_strategy(space, outcome.strategy, s.key, topology, s.placement, timeout, cache,
                                   flags_of(s.key), executor=pool)
        except ExecutorError:
            raise
        except Exception as exc:
            if isinstance(exc, CompileTimeout) and budget is not None and exc.wall_clock:
                _not_verified(budget, s.key, s.placement.name, notes)
                continue
            notes.append(f"recompile of {s.key} / {s.placement.name} failed ({drop_reason(exc)}); "
                         "kept the shared compile")
            continue
        if own.from_cache:
            timings["verify_cached"] = timings.get("verify_cached", 0.0) + own.compile_seconds
        rescored = model.evaluate(own.program, s.placement)
        if abs(rescored.step_seconds - s.q2.step_seconds) > 1e-9 * max(1.0, s.q2.step_seconds):
            notes.append(
                f"{s.key} / {s.placement.name}: compiling with this device order changed Q2 from "
                f"{s.q2.step_seconds * 1e3:.3f} ms to {rescored.step_seconds * 1e3:.3f} ms"
            )
        s.q2, s.program, s.verified = rescored, own.program, True


def _not_verified(budget: TimeBudget, key: str, placement: str, notes: list[str]) -> None:
    budget.record.not_verified.append({"strategy": key, "placement": placement})
    notes.append(f"{key} / {placement}: not recompiled with its own device order: the time budget "
                 f"of {budget.seconds:g} s ran out (its Q2 is from the program compiled over another order)")


def generation_order_is_maps_only(topology: Topology) -> bool:
    """Whether on this slice's generation the device order changes a compiled program only in its
    collectives' reordering maps (`REORDERING_MAP_ONLY_GENERATIONS`)."""
    return topology.hardware.generation in REORDERING_MAP_ONLY_GENERATIONS
