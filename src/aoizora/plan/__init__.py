"""Plans: the two-stage planner, the plan file, its cache, and applying it as a `jax.sharding.Mesh`."""

from aoizora.plan.plan import Plan, load_plan
from aoizora.plan.function_space import FunctionSpace, FunctionStrategy
from aoizora.plan.planner import PlanResult, plan_function, plan_space

__all__ = ["FunctionSpace", "FunctionStrategy", "Plan", "PlanResult", "load_plan", "plan_function", "plan_space"]
