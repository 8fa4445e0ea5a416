"""aoizora: topology-aware auto-parallel planning of diffusion-transformer inference on TPU slices."""

from __future__ import annotations

from importlib import metadata as _metadata
from typing import TYPE_CHECKING, Any

from aoizora.errors import AoizoraError

if TYPE_CHECKING:  # what the lazy names are, for type checkers and editors (nothing loads at run time)
    from aoizora.api import plan_wan
    from aoizora.cost import Q2Options
    from aoizora.placement import MeshSpec
    from aoizora.plan import FunctionStrategy, Plan, PlanResult, load_plan, plan_function, plan_space
    from aoizora.topology import Topology, get_topology

# pyproject.toml states the version; the installed distribution's metadata carries it
__version__ = _metadata.version("aoizora")

# The planner pulls in jax; keep `import aoizora` light (no jax, no environment variable set) and
# load each name on first use, from the module that defines it.
_LAZY = {
    "load_plan": "aoizora.plan", "plan_function": "aoizora.plan", "plan_space": "aoizora.plan",
    "Plan": "aoizora.plan", "PlanResult": "aoizora.plan", "FunctionStrategy": "aoizora.plan",
    "plan_wan": "aoizora.api",
    "MeshSpec": "aoizora.placement",  # the logical mesh of a FunctionStrategy
    "Q2Options": "aoizora.cost",  # plan_space's `options`: how Q2 costs the collectives
    "Topology": "aoizora.topology", "get_topology": "aoizora.topology",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'aoizora' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)


__all__ = [
    "AoizoraError", "FunctionStrategy", "MeshSpec", "Plan", "PlanResult", "Q2Options", "Topology", "__version__",
    "get_topology", "load_plan", "plan_function", "plan_space", "plan_wan",
]
