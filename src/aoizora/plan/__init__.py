"""Plans: the two-stage planner, the plan file, its cache, and applying it as a `jax.sharding.Mesh`."""

from aoizora.plan.function_space import FunctionSpace, FunctionStrategy
from aoizora.plan.plan import Plan, load_plan
from aoizora.plan.planner import (
    PlanResult,
    expert_entries,
    nothing_fits,
    plan_for_pair,
    plan_function,
    plan_space,
    planning_flags,
)

__all__ = [
    "FunctionSpace", "FunctionStrategy", "Plan", "PlanResult", "expert_entries", "load_plan", "nothing_fits",
    "plan_for_pair", "plan_function", "plan_space", "planning_flags",
]
