"""The raised scoped-VMEM limit, checked by the compiler before a plan keeps it.

Stage 2 compiles a candidate once, in its compiled form (`StrategySpace.compiled_form`): under a
limit the tile search raised, the blocks fitted at libtpu's default limit, at that limit. Its
splash calls are costed at the searched tile by the kernel's model; its other fusions at libtpu's
estimates for the default limit. What the raised limit does to those fusions is not in that
prediction, and on a TPU v5e chip it decides the choice: at the raised limit the rest of a
program measured up to 10 % faster for Wan 2.1 14B at 720p and up to 24 % slower for 1.3B at 480p,
while the splash calls gained 1-7 % of the program. libtpu's own estimates at the raised limit
move the same way as the chip's in 20 of the 23 programs measured at both limits
(`benchmarks/chip/limit_rules.py`, `docs/results/chip.md`).

So before a plan keeps a raised limit, the leading pair's strategy is compiled as it would run, at
its raised limit over the pair's placement, and its form's program is costed at the form's own
blocks: whichever Q2 is lower is the strategy planned. On those 23 programs that choice measures
within 1 % of the faster of the two in 21 (the tile search's rule alone: 16). The raised compile
is the slow one (several times a default-limit compile on v5e: `benchmarks/compile_matrix.py`), so
only the leading pair is checked; a strategy is checked once, and a new leader with a raised
limit is checked in turn.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from typing import Any

from aoizora.cost import CostModel
from aoizora.placement import Placement, enumerate_placements
from aoizora.stage2.outcomes import (
    Compiled,
    StrategyOutcome,
    drop_reason,
    lowest_pair,
    scored_on_every_placement,
)
from aoizora.workload import StrategySpace

#: compile(key, strategy, placement, as_is): the strategy's program over the placement's device
#: order, as it runs (`as_is`, at its own flags) or in its compiled form
CompileOver = Callable[[str, Any, Placement, bool], Compiled]


@dataclasses.dataclass
class LimitChecks:
    """The checks of one Stage 2 run: the strategies checked, and the default-limit forms added as
    outcomes of their own."""

    checked: set[str] = dataclasses.field(default_factory=set)
    forms: list[StrategyOutcome] = dataclasses.field(default_factory=list)


def check_raised_limits(space: StrategySpace, model: CostModel, outcomes: list[StrategyOutcome],
                        checks: LimitChecks, compile_over: CompileOver, notes: list[str],
                        time_left: Callable[[], bool] = lambda: True, baselines: Collection[str] = ()) -> bool:
    """Check the leading pair's raised limit (module docstring) while the leader has one not checked
    and `time_left()`; True when a check ran. A baseline (an expert deployment, compiled as
    deployed with its own flags) is not checked. The checked strategy's outcome is re-scored on its
    program compiled at the raised limit (or dropped, when the compiler refuses that program), and
    its default-limit form is added to `checks.forms`, scored on every placement."""
    ran = False
    while time_left():
        lead = lowest_pair(outcomes + checks.forms)
        if lead is None:
            return ran
        outcome, pair = lead
        form = space.compiled_form(outcome.strategy)
        if outcome.key in checks.checked or outcome.key in baselines or form == outcome.strategy:
            return ran
        checks.checked.add(outcome.key)
        ran = True
        form_key = space.key_of(form)
        try:
            default = _scored_outcome(space, model, form_key, form, compile_over(form_key, form, pair.placement, False))
        except Exception as exc:  # noqa: BLE001 - without the default-limit program there is nothing to weigh
            notes.append(f"{outcome.key}: its raised scoped-VMEM limit not checked: its default-limit form "
                         f"{form_key} did not compile ({drop_reason(exc)})")
            continue
        if all(o.key != form_key for o in outcomes + checks.forms):
            checks.forms.append(default)
        try:
            raised = compile_over(outcome.key, outcome.strategy, pair.placement, True)
        except Exception as exc:  # noqa: BLE001 - a compile that fails leaves the default limit
            outcome.scored, outcome.dropped = [], drop_reason(exc)  # a refusal for memory stays one
            notes.append(f"{outcome.key}: its compile at the raised scoped-VMEM limit failed ({drop_reason(exc)}); "
                         f"{form_key}, at the default limit, stands in its place")
            continue
        _rescore(space, model, outcome, raised)
        r = min(s.q2.step_seconds for s in outcome.scored)
        d = min(s.q2.step_seconds for s in default.scored)
        verdict = "kept" if r < d else f"not kept: {form_key} is planned in its place"
        notes.append(f"{outcome.key}: the raised scoped-VMEM limit checked by a compile at it over "
                     f"{pair.placement.name}: Q2 {r * 1e3:.1f} ms against {d * 1e3:.1f} ms at the default limit "
                     f"and its tile; {verdict}")
    return ran


def _scored_outcome(space: StrategySpace, model: CostModel, key: str, strategy: Any,
                    compiled: Compiled) -> StrategyOutcome:
    out = StrategyOutcome(key, strategy)
    _rescore(space, model, out, compiled)
    return out


def _rescore(space: StrategySpace, model: CostModel, outcome: StrategyOutcome, compiled: Compiled) -> None:
    """Score `compiled` on every placement of the outcome's strategy; the pair on the placement it
    was compiled over (its own device order) is verified."""
    outcome.compiled = compiled
    placements = enumerate_placements(model.topology, space.mesh_spec(outcome.strategy)).placements
    outcome.scored = scored_on_every_placement(model, placements, outcome.key, compiled, verify_own=True)
