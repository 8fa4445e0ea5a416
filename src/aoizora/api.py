"""The Python API's Wan entry point: `plan_wan`, and the strategy space it and `aoizora plan` build.

`wan_request` turns what a caller gives (a model and video shape, a kernel profile, or a user's
MaxDiffusion command) into `wan_space`'s arguments; `aoizora plan --model/--kernel/--from-maxdiffusion`
and `plan_wan(..., kernel=, from_maxdiffusion=)` both go through it, so both plan the same space.
It reads MaxDiffusion commands (`aoizora.export`), hence a module above the planner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aoizora.errors import ArgumentError
from aoizora.models.maxdiffusion import PROGRAMS

if TYPE_CHECKING:
    from aoizora.plan import PlanResult
    from aoizora.topology import Topology
    from aoizora.workload import StrategySpace

#: the kernel profiles `aoizora plan --kernel` and `plan_wan(kernel=)` take
KERNEL_PROFILES = ("jax-splash", "tokamax-splash", "maxdiffusion-custom", "maxdiffusion-custom-fixed-m")

#: how `wan_request`'s messages name its arguments (the CLI passes its options' names)
PYTHON_NAMES = {"model": "model", "resolution": "resolution", "frames": "frames", "kernel": "kernel",
                "from_maxdiffusion": "from_maxdiffusion", "program": "program"}


def wan_request(model: str | None, resolution: str | None, frames: int | None, *, kernel: str | None,
                from_maxdiffusion: str | None, topology: Topology,
                names: dict[str, str] | None = None, program: str = "aoizora") -> dict[str, Any]:
    """`wan_space`'s arguments: those given (defaults 720p, 81 frames, JAX's splash), or a MaxDiffusion
    command's, with its strategy as the user's deployment (given arguments that disagree refused with
    ArgumentError). `names`: how messages name the arguments (default: as Python spells them).
    `program`: the program Stage 2 compiles, aoizora's Wan step or MaxDiffusion's own ("maxdiffusion")."""
    names = {**PYTHON_NAMES, **(names or {})}
    if kernel is not None and kernel not in KERNEL_PROFILES:
        raise ArgumentError(f"{names['kernel']} must be one of {', '.join(map(repr, KERNEL_PROFILES))}, not {kernel!r}")
    if program not in PROGRAMS:
        raise ArgumentError(f"{names['program']} must be one of {', '.join(map(repr, PROGRAMS))}, not {program!r}")
    if from_maxdiffusion is None:
        if model is None:
            raise ArgumentError(f"give {names['model']} (or {names['from_maxdiffusion']})")
        return {"model": model, "resolution": "720p" if resolution is None else resolution,
                "frames": 81 if frames is None else frames, "kernel_profile": kernel or "jax-splash",
                "program": program}
    from aoizora.export import read_command
    from aoizora.models.registry import model_config, parse_resolution, video_shape
    from aoizora.models.wan.kernels.experts import USER_DEPLOYMENT
    from aoizora.models.wan.transformer.strategy import validate_strategy
    from aoizora.workload import ExpertDeployment

    cmd = read_command(from_maxdiffusion)
    width, height, cmd_frames = cmd.video()
    strategy = cmd.strategy(topology.num_devices)
    given = {names["model"]: (model, cmd.model), names["frames"]: (frames, cmd_frames),
             names["kernel"]: (kernel, strategy.kernel_profile),
             names["resolution"]: (resolution and "x".join(map(str, parse_resolution(resolution,
                                                                                     model_config(cmd.model)))),
                                   f"{width}x{height}")}
    for option, (mine, theirs) in given.items():
        if mine is not None and str(mine) != str(theirs):
            raise ArgumentError(f"{option} {mine} disagrees with the MaxDiffusion command's {theirs}; drop {option}")
    batch = 2 * cmd.videos(topology.num_devices)
    config = model_config(cmd.model)
    validate_strategy(strategy, config, video_shape(config, f"{width}x{height}", cmd_frames), batch,
                      topology.num_devices)
    deployment = ExpertDeployment(USER_DEPLOYMENT, strategy,
                                  tuple(f"--{k}={v}" for k, v in cmd.libtpu_args.items),
                                  source=f"the MaxDiffusion command given with {names['from_maxdiffusion']}",
                                  documented=f"attention={cmd.attention_name} (compiled with JAX's splash kernel, "
                                             f"costed as {strategy.kernel_profile})",
                                  notes=tuple(cmd.notes()))
    return {"model": cmd.model, "resolution": f"{width}x{height}", "frames": cmd_frames, "batch": batch,
            "steps": cmd.steps(), "user_deployment": deployment, "kernel_profile": strategy.kernel_profile,
            "program": program}


def wan_request_space(request: dict[str, Any], topology: Topology, expert_residency: str = "both",
                      vae_decode: bool = True) -> StrategySpace:
    """The strategy space of a `wan_request` on `topology`'s generation; with `vae_decode`, its plans
    compile and cost the model's VAE decode for the video time (else they say it was not costed)."""
    from aoizora.models import registry

    rest = dict(request)
    if vae_decode:
        rest["vae"] = registry.model_vae(registry.model_key(rest["model"]))
    return registry.wan_space(rest.pop("model"), rest.pop("resolution"), rest.pop("frames"),
                              expert_residency=expert_residency, generation=topology.generation, **rest)


def plan_wan(model: str | None, topology: Topology | str, resolution: str | None = None, frames: int | None = None,
             *, expert_residency: str = "both", kernel: str | None = None, from_maxdiffusion: str | None = None,
             program: str = "aoizora", vae_decode: bool = True, objective: str = "latency",
             max_videos_per_replica: int | None = None, **options: Any) -> PlanResult:
    """Plan a named Wan model at a video shape on a slice, as `aoizora plan` does.

    `model`: a name `aoizora plan --help` lists (e.g. "wan2.1-t2v-1.3b"); `topology`: a `Topology`
    or its name ("v5e:2x4"); `resolution`: "480p", "720p" or "WxH" (default 720p); `frames`: 4n+1
    (default 81). `expert_residency`: a Wan 2.2 pipeline's experts both in HBM ("both") or swapped
    ("swap"). `kernel`: the attention kernel profile that costs every candidate's attention, as
    `aoizora plan --kernel` (default "jax-splash"). `from_maxdiffusion`: a user's MaxDiffusion command
    (as `--from-maxdiffusion`): its model, shape, batch, steps and kernel are planned, and its own
    strategy joins as a candidate; `model`, `resolution`, `frames` and `kernel` may then be None, and
    any given must agree with it. `program`: the program Stage 2 compiles and costs for each candidate,
    aoizora's Wan step ("aoizora") or MaxDiffusion's own ("maxdiffusion", as `aoizora plan --program`).
    `vae_decode`: compile and cost the VAE decode for the plan's `video_time` (False: as
    `aoizora plan --no-vae-decode`). `objective`: "latency" (default) plans one video's time on the
    whole slice; "throughput" splits the slice into replicas and picks the split and batch per replica
    (up to `max_videos_per_replica`, default `DEFAULT_MAX_VIDEOS_PER_REPLICA`) with the most videos per
    hour (`aoizora.plan.throughput`; not with `from_maxdiffusion`, whose command fixes the batch). Other
    keywords go to `plan_space` (`top_k`, `verify_top`,
    `options`, `use_cache`, `progress`, `executor`, ...). Raises ShapeError (unknown model, bad
    shape), TopologyError, ArgumentError (bad argument), MaxDiffusionUnavailable (program="maxdiffusion"
    where MaxDiffusion cannot be imported) or PlanningError.
    """
    from aoizora.models.maxdiffusion import PROGRAMS
    from aoizora.plan import arguments, planner
    from aoizora.topology import get_topology

    arguments.check_plan_wan_arguments(model, topology, resolution, frames, expert_residency, options,
                                       from_maxdiffusion=from_maxdiffusion, kernel=kernel, program=program,
                                       programs=PROGRAMS, plan_space_options=planner.PLAN_SPACE_OPTIONS)
    check_objective(objective, from_maxdiffusion, max_videos_per_replica)
    topo = get_topology(topology) if isinstance(topology, str) else topology
    request = wan_request(model, resolution, frames, kernel=kernel, from_maxdiffusion=from_maxdiffusion,
                          topology=topo, program=program)
    if objective == "throughput":
        return plan_wan_throughput(request, topo, expert_residency, vae_decode is not False,
                                   max_videos_per_replica, **options)
    return planner.plan_space(wan_request_space(request, topo, expert_residency, vae_decode is not False), topo,
                              **options)


def check_objective(objective: Any, from_maxdiffusion: Any, max_videos_per_replica: Any,
                    names: dict[str, str] | None = None) -> None:
    """`objective` is "latency" or "throughput"; throughput takes no MaxDiffusion command (its batch is
    the command's) and `max_videos_per_replica` only with throughput. ArgumentError otherwise."""
    from aoizora.plan import OBJECTIVES

    names = {"objective": "objective", "from_maxdiffusion": "from_maxdiffusion",
             "max_videos_per_replica": "max_videos_per_replica", **(names or {})}
    if not isinstance(objective, str) or objective not in OBJECTIVES:
        raise ArgumentError(f"{names['objective']} must be one of {', '.join(map(repr, OBJECTIVES))}, not "
                            f"{objective!r}")
    if objective == "throughput" and from_maxdiffusion is not None:
        raise ArgumentError(f"{names['objective']} throughput chooses the batch per replica, which "
                            f"{names['from_maxdiffusion']}'s command fixes; drop one of them")
    if max_videos_per_replica is not None:
        if objective != "throughput":
            raise ArgumentError(f"{names['max_videos_per_replica']} applies to {names['objective']} throughput "
                                "only; drop it or plan for throughput")
        if isinstance(max_videos_per_replica, bool) or not isinstance(max_videos_per_replica, int) \
                or max_videos_per_replica < 1:
            raise ArgumentError(f"{names['max_videos_per_replica']} must be a whole number >= 1, not "
                                f"{max_videos_per_replica!r}")


def plan_wan_throughput(request: dict[str, Any], topology: Topology, expert_residency: str = "both",
                        vae_decode: bool = True, max_videos_per_replica: int | None = None,
                        **options: Any) -> PlanResult:
    """A `wan_request` planned for throughput on `topology` (`aoizora.plan.throughput`): each replica's
    space is the request's at a CFG batch of 2 per video."""
    from aoizora.defaults import DEFAULT_MAX_VIDEOS_PER_REPLICA
    from aoizora.plan import plan_throughput

    def space_for(sub: Topology, videos: int) -> StrategySpace:
        return wan_request_space({**request, "batch": 2 * videos}, sub, expert_residency, vae_decode)

    cap = DEFAULT_MAX_VIDEOS_PER_REPLICA if max_videos_per_replica is None else max_videos_per_replica
    return plan_throughput(space_for, topology, max_videos=cap, **options)
