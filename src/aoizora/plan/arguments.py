"""The Python API's arguments checked as the CLI checks its options, before any work.

`plan_wan`, `plan_space` and `plan_function` refuse a value of the wrong type with `ArgumentTypeError` (a
`TypeError`) and a value out of range with `ArgumentError` (a `ValueError`), each naming the
argument, so that a wrong call fails at once instead of deep inside the planner, and never plans
something else than was asked (``frames=True`` as one frame) or misses the plan cache
(``frames=5.0``). Every argument that changes a plan's content is part of the plan cache's request
or checked here against what the request assumes (a given Stage 1 result, for one).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from aoizora.errors import ArgumentError, ArgumentTypeError

#: `expert_residency` values, as `aoizora plan --expert-residency` takes them
EXPERT_RESIDENCIES = ("both", "swap")


def _type_name(value: Any) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text if len(text) <= 60 else text[:60] + '…'}"


def whole_number(name: str, value: Any, minimum: int) -> None:
    """`value` is an int (not a bool) of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ArgumentTypeError(f"{name} must be a whole number (int) of at least {minimum}, not {_type_name(value)}")
    if value < minimum:
        raise ArgumentError(f"{name} must be at least {minimum}, not {value}")


def check_plan_wan_arguments(model: Any, topology: Any, resolution: Any, frames: Any, expert_residency: Any,
                             options: dict[str, Any], *, from_maxdiffusion: Any = None, kernel: Any = None,
                             program: Any = "aoizora", programs: tuple[str, ...] = ("aoizora",),
                             plan_space_options: Sequence[str]) -> None:
    """`plan_wan`'s own arguments, and the keywords it passes on to `plan_space`. With a MaxDiffusion
    command, `model`, `resolution`, `frames` and `kernel` may be None (the command says them).
    `programs`: the programs Stage 2 can compile (the models' own list; this module imports no model).
    `plan_space_options`: the keywords `plan_space` takes (the planner's `PLAN_SPACE_OPTIONS`; this
    module imports no planner)."""
    if from_maxdiffusion is not None and not isinstance(from_maxdiffusion, str):
        raise ArgumentTypeError(f"from_maxdiffusion must be a MaxDiffusion command (str) or None, not "
                                f"{_type_name(from_maxdiffusion)}")
    if not (isinstance(model, str) or (model is None and from_maxdiffusion is not None)):
        raise ArgumentTypeError(f"model must be a model name (str) such as 'wan2.1-t2v-1.3b', not {_type_name(model)}")
    check_topology(topology)
    if not (resolution is None or isinstance(resolution, str)):
        raise ArgumentTypeError(f"resolution must be '480p', '720p' or 'WIDTHxHEIGHT' (str), not "
                                f"{_type_name(resolution)}")
    if frames is not None:
        whole_number("frames", frames, 1)
    if not (kernel is None or isinstance(kernel, str)):
        raise ArgumentTypeError(f"kernel must be a kernel profile (str) such as 'jax-splash' or None, not "
                                f"{_type_name(kernel)}")
    if not isinstance(program, str) or program not in programs:
        shown = repr(program) if isinstance(program, str) else _type_name(program)
        raise ArgumentError(f"program must be one of {', '.join(map(repr, programs))}, not {shown}")
    if expert_residency not in EXPERT_RESIDENCIES:
        raise ArgumentError(f"expert_residency must be one of {', '.join(map(repr, EXPERT_RESIDENCIES))}, "
                            f"not {_type_name(expert_residency)}")
    check_plan_space_options(options, plan_space_options)


def check_topology(topology: Any) -> None:
    """`topology` is a slice name (resolved with `get_topology`, which refuses an unknown one) or a Topology."""
    from aoizora.topology import Topology

    if not isinstance(topology, (str, Topology)):
        raise ArgumentTypeError(f"topology must be a slice name (str) such as 'v5e:2x4' or a Topology, "
                                f"not {_type_name(topology)}")


def check_plan_space_options(options: dict[str, Any], known: Sequence[str]) -> None:
    """`plan_space`'s keyword arguments: known names (`known`: the planner's `PLAN_SPACE_OPTIONS`, in
    its order), each of its type and range."""
    from aoizora.cost import Q2Options
    from aoizora.stage1 import Stage1Result
    from aoizora.stage2.compile_cache import CompileCache
    from aoizora.toolchain import CompilerFlags

    unknown = sorted(set(options) - set(known))
    if unknown:
        raise ArgumentTypeError(f"unknown keyword argument(s) {', '.join(unknown)}; plan_space takes "
                                f"{', '.join(known)}")
    kinds: dict[str, tuple[tuple[type, ...], str]] = {
        "options": ((Q2Options,), "a Q2Options"), "use_cache": ((bool,), "True or False"),
        "progress": ((bool,), "True or False"), "include_experts": ((bool,), "True or False"),
        "check_limits": ((bool,), "True or False"),
        "compile_cache": ((CompileCache,), "a CompileCache"), "stage1": ((Stage1Result,), "a Stage1Result"),
        "libtpu_args": ((str, CompilerFlags), "flags as LIBTPU_INIT_ARGS writes them (str) or CompilerFlags"),
    }
    for name, (types, what) in kinds.items():
        value = options.get(name)
        if value is not None and not isinstance(value, types):
            raise ArgumentTypeError(f"{name} must be {what} or None, not {_type_name(value)}")
    if "top_k" in options:
        whole_number("top_k", options["top_k"], 1)
    if "verify_top" in options:
        whole_number("verify_top", options["verify_top"], 0)
    for name in ("compile_timeout_s", "time_budget_s"):
        seconds = options.get(name)
        if seconds is None:
            continue
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
            raise ArgumentTypeError(f"{name} must be a number of seconds (int or float) or None, not "
                                    f"{_type_name(seconds)}")
        if not math.isfinite(seconds) or seconds <= 0:
            raise ArgumentError(f"{name} must be a positive, finite number of seconds, not {seconds}")
    executor = options.get("executor")
    if executor is not None and not all(callable(getattr(executor, m, None)) for m in ("job", "compile", "close")):
        raise ArgumentTypeError(f"executor must be a compile executor (e.g. aoizora.stage2.executor_from_spec('ray', "
                                f"workers)) or None, not {_type_name(executor)}")


def check_stage1(stage1: Any, topology: Any, top_k: int) -> None:
    """A Stage 1 result given to `plan_space` is of its slice and Top-K (else it plans another request)."""
    if stage1 is None:
        return
    if stage1.topology.name != topology.name:
        raise ArgumentError(f"stage1 was computed for {stage1.topology.name}, not {topology.name}; run Stage 1 on "
                            "this slice or pass stage1=None")
    if stage1.top_k != top_k:
        raise ArgumentError(f"stage1 was computed with top_k={stage1.top_k}, not {top_k}; pass the same top_k or "
                            "stage1=None")
