"""What a Wan plan file holds beyond every plan's fields, and the checks that its copies agree.

`describe` writes the plan's `strategy` object and `workload` its `workload` section. A Wan plan's
key restates its mesh, weights and attention; its `strategy` object restates the plan's mesh (its
axes, with the 2D context ones), its compiler flags (the scoped-VMEM limit its splash tile was
chosen with), the workload's video and kernel, and its own key. `check_wan_plan` names the first
that disagrees (`WanSpace.check_plan`, which `aoizora.plan.consistency` calls for the plans of
every Wan model).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from aoizora.errors import StrategyError, clipped
from aoizora.models.wan.kernels.custom_tiles import custom_kernel_tile
from aoizora.models.wan.kernels.experts import expert_key_suffixes
from aoizora.models.wan.space.tiles import as_compiled
from aoizora.models.wan.transformer.kernel_profiles import DEFAULT_KERNEL_PROFILE
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.placement import same_mesh
from aoizora.toolchain import SCOPED_VMEM_FLAG, CompilerFlags
from aoizora.workload import PlanDisagreement

if TYPE_CHECKING:
    from aoizora.models.wan.space.fields import WanSpaceFields

_MESH_SEGMENT = re.compile(r"(single|[A-Za-z_][A-Za-z0-9_]*=[0-9]+(,[A-Za-z_][A-Za-z0-9_]*=[0-9]+)*)")


def check_wan_plan(data: dict[str, Any], flags: CompilerFlags) -> PlanDisagreement | None:
    """The first field of a Wan plan that disagrees with another (None: all agree): its key's mesh,
    weights and attention, its scoped-VMEM limit and its flags, then its strategy against the mesh,
    the workload and its key."""
    strategy = data["strategy"]
    disagreement = _key_segments(strategy, list(data["mesh"]["axis_names"]), list(data["mesh"]["axis_sizes"]))
    if disagreement is not None:
        return disagreement
    if strategy.get("scoped_vmem_kib") is not None:
        flag = dict(flags.items).get(SCOPED_VMEM_FLAG)
        if flag != str(strategy["scoped_vmem_kib"]):
            return PlanDisagreement("strategy.scoped_vmem_kib", f"is {strategy['scoped_vmem_kib']} but "
                                    f"compiler.libtpu_args sets --{SCOPED_VMEM_FLAG}={flag}")
    try:
        parsed = Strategy.from_description(strategy)
    except StrategyError as exc:
        return PlanDisagreement("strategy", f"is not a Wan strategy ({str(exc).split(';')[0]})")
    return _mesh_and_blocks(parsed, data) or _workload_restated(data) or _key_restated(parsed, strategy["key"])


def _key_segments(strategy: dict[str, Any], names: list[str], sizes: list[int]) -> PlanDisagreement | None:
    """The key's leading `axis=size,...` segment (axes larger than 1) and its `weights=`/`attn=`
    segments restate the mesh and the strategy's fields."""
    segments = strategy["key"].split(" | ")
    if _MESH_SEGMENT.fullmatch(segments[0]):
        mesh = ",".join(f"{n}={s}" for n, s in zip(names, sizes, strict=True) if s > 1) or "single"
        if segments[0] != mesh:
            return PlanDisagreement("strategy.key", f"names mesh {clipped(segments[0])} but the plan's mesh is "
                                    f"{mesh!r}")
    for label, field in (("weights", "weights"), ("attn", "attention")):
        stated = next((s.split("=", 1)[1] for s in segments[1:] if s.startswith(f"{label}=")), None)
        if stated is not None and field in strategy and strategy[field] != stated:
            return PlanDisagreement(f"strategy.{field}",
                                    f"is {clipped(strategy[field])} but strategy.key says {label}={stated[:200]}")
    return None


def _mesh_and_blocks(parsed: Strategy, data: dict[str, Any]) -> PlanDisagreement | None:
    names, sizes = list(data["mesh"]["axis_names"]), list(data["mesh"]["axis_sizes"])
    if not same_mesh(list(parsed.mesh_axes), list(parsed.mesh_shape), names, sizes):
        return PlanDisagreement("mesh.axis_names", f"is {names} but a {parsed.attention} Wan strategy's mesh is "
                                f"{list(parsed.mesh_axes)}")
    reasons = parsed.splash_blocks.reasons() if parsed.splash_blocks is not None else []
    return PlanDisagreement("strategy.splash_blocks", reasons[0]) if reasons else None


def _workload_restated(data: dict[str, Any]) -> PlanDisagreement | None:
    """The slice the blocks are fitted to, the video and the kernel, as the workload states them."""
    strategy, workload = data["strategy"], data["workload"]
    fitted = workload.get("splash_blocks")
    if (isinstance(fitted, str) and fitted.startswith("fitted to ")
            and fitted != f"fitted to {data['topology']['generation']}"):
        return PlanDisagreement("workload.splash_blocks",
                                f"says {clipped(fitted)} but the plan is for {data['topology']['name']}")
    shapes = workload["shapes"]
    video = [shapes.get("frames"), shapes.get("height"), shapes.get("width")]
    if "video" in strategy and strategy["video"] != video:
        return PlanDisagreement("strategy.video", f"is {strategy['video']} but workload.shapes gives {video}")
    if "kernel" in strategy and "kernel" in workload and strategy["kernel"] != workload["kernel"]:
        return PlanDisagreement("strategy.kernel", f"is {clipped(strategy['kernel'])} but workload.kernel is "
                                f"{clipped(workload['kernel'])}")
    return None


def _key_restated(parsed: Strategy, given: str) -> PlanDisagreement | None:
    """The key is the strategy's, or an expert deployment's: the strategy's, then its flags."""
    key = parsed.key()
    if given == key:
        return None
    if not given.startswith(key + " | "):
        return PlanDisagreement("strategy.key", f"is {clipped(given)} but the strategy it describes is {key!r}")
    # an expert deployment's key names its flags after the strategy's own segments, from a closed set
    suffix = given[len(key) + 3:]
    if suffix not in expert_key_suffixes():
        return PlanDisagreement("strategy.key", f"adds {clipped(suffix)} to the strategy's key {key!r}, which is "
                                "not an expert deployment's flags (`<deployment> flags`)")
    return None


def describe(space: WanSpaceFields, strategy: Strategy) -> dict[str, Any]:
    """The plan's `strategy` object: the strategy's description with the space's video and the
    tile MaxDiffusion's own kernel runs it with (compiled at `splash_blocks`), when it runs one."""
    tile = custom_kernel_tile(strategy, space.video.tokens(space.config), space.generation)
    return strategy.description(video=(space.video.frames, space.video.height, space.video.width),
                                kernel_tile=tile.to_json() if tile is not None else None)


def workload(space: WanSpaceFields) -> dict[str, Any]:
    """The plan's `workload` section (and its cache key): the model, video, sampler and kernels."""
    return {
        "name": space.name,
        "shapes": {
            "frames": space.video.frames, "height": space.video.height, "width": space.video.width,
            "tokens": space.video.tokens(space.config), "cfg_batch": space.batch,
        },
        "model": {"layers": space.config.num_layers, "dim": space.config.dim,
                  "heads": space.config.num_attention_heads, "ffn": space.config.ffn_dim, "i2v": space.config.is_i2v},
        "scheduler": {"name": type(space.scheduler).__name__, "steps": space.scheduler.num_steps,
                      "shift": space.scheduler.shift},
        "kernel": space.kernel,
        # what the strategies' splash blocks are fitted to (plans and analyses differ with it)
        "splash_blocks": (f"fitted to {space.generation}" if space.splash_max_block_q
                          else "the kernel's pick per call"),
        **({"kernel_profile": space.kernel_profile} if space.kernel_profile != DEFAULT_KERNEL_PROFILE else {}),
        # a scoped-VMEM limit the plan's flags fixed: the tiles were searched at it alone
        **({"scoped_vmem_kib": space.scoped_vmem_kib} if space.scoped_vmem_kib is not None else {}),
        # the program Stage 2 compiled, when not aoizora's own Wan step
        **({"program": space.program_source.to_json(space.generation)} if space.program_source is not None else {}),
        **({"user_deployment": {**as_compiled(space, space.user_deployment).to_json(),
                                "strategy": space.user_deployment.strategy.key()}}
           if space.user_deployment is not None else {}),
    }
