"""Plans: the two-stage planner, the plan file, its cache, applying it as a `jax.sharding.Mesh`, and
planning for throughput (replicas on sub-slices)."""

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
from aoizora.plan.replicas import OBJECTIVES
from aoizora.plan.throughput import plan_throughput

__all__ = [
    "FunctionSpace", "FunctionStrategy", "Plan", "PlanResult", "expert_entries", "load_plan", "nothing_fits",
    "OBJECTIVES", "plan_for_pair", "plan_function", "plan_space", "plan_throughput",
    "planning_flags",
]
