"""aoizora: topology-aware auto-parallel planning of diffusion-transformer inference on TPU slices."""

from importlib import metadata as _metadata

from aoizora import toolchain as _toolchain  # noqa: F401  (sets libtpu's multi-process switch early)
from aoizora.errors import AoizoraError

# pyproject.toml states the version; the installed distribution's metadata carries it
__version__ = _metadata.version("aoizora")


def __getattr__(name: str):
    # The planner pulls in jax; keep `import aoizora` light and load it on first use.
    if name in ("load_plan", "plan_function", "plan_space", "plan_wan", "Plan", "PlanResult", "FunctionStrategy"):
        from aoizora import plan as _plan

        return getattr(_plan, name)
    if name == "MeshSpec":  # the logical mesh of a FunctionStrategy
        from aoizora.placement import MeshSpec

        return MeshSpec
    raise AttributeError(f"module 'aoizora' has no attribute {name!r}")


__all__ = [
    "AoizoraError", "FunctionStrategy", "MeshSpec", "Plan", "PlanResult", "__version__", "load_plan", "plan_function",
    "plan_space", "plan_wan",
]
