"""The Wan 2.1 DiT's strategy space, through the Stage 1 protocol (`aoizora.models.wan`).

`WanSpace` holds what a space is planned for (model, video, CFG batch, sampler, slice generation,
kernel) and answers the `StrategySpace` protocol from one module per concern:

* `enumeration` — which strategies exist on N devices, which are legal (the model's own
  `check_strategy`, and duplicates), and the documented deployments compared;
* `tiles` — the splash tile and weight tile each strategy runs, the scoped-VMEM flag chosen
  with its tile, the form Stage 2 compiles, and a deployment of another kernel as aoizora compiles it;
* `lowering` — the mesh and the denoising step lowered for a strategy, the analysis
  stand-in and lowering affinity;
* `costs` — the cost of the splash calls in Stage 1 and in the compiled program;
* `plan_file` — the plan's `strategy` object and `workload` section, and the checks of a
  Wan plan's fields. A strategy's text forms are the strategy's own (`Strategy.key`,
  `Strategy.description`).

Those modules, and MaxDiffusion's step, take the space as `fields.WanSpaceFields` (what
they read of it), so that none of them imports this module.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from aoizora.errors import ShapeError, StrategyError
from aoizora.hlo.program import OpaqueCost, OpaqueOp
from aoizora.models.maxdiffusion import program as program_source
from aoizora.models.wan.space import costs, enumeration, lowering, plan_file, tiles, video_parts
from aoizora.models.wan.transformer.config import VideoShape, WanConfig
from aoizora.models.wan.transformer.kernel_profiles import DEFAULT_KERNEL_PROFILE, KERNEL_PROFILES
from aoizora.models.wan.transformer.strategy import (
    ATTENTION_VARIANTS,
    RING_LAYOUTS,
    ULYSSES_CHUNK_CHOICES,
    WEIGHT_MODES,
    Strategy,
)
from aoizora.models.wan.vae.config import WanVAEConfig
from aoizora.models.wan.video.schedulers import UniPCScheduler
from aoizora.placement import MeshSpec
from aoizora.toolchain import CompilerFlags
from aoizora.workload import (
    Candidate,
    CompanionProgram,
    ExpertDeployment,
    KernelCall,
    LoweringInputs,
    PlanDisagreement,
    StrategySpace,
)

if TYPE_CHECKING:
    from jax.sharding import Mesh

    from aoizora.models.wan.transformer.attention import KernelCost
    from aoizora.topology import Topology


class WanSpace(StrategySpace[Strategy]):
    """The strategies of one Wan model at one video shape (see the module docstring)."""

    name = "wan"

    def __init__(self, config: WanConfig, video: VideoShape, batch: int = 2,
                 attentions: tuple[str, ...] = ATTENTION_VARIANTS, weights: tuple[str, ...] = WEIGHT_MODES,
                 kernel: str = "auto", *, model_name: str = "wan", scheduler: Any = None, guidance_scale: float = 5.0,
                 ulysses_chunks: tuple[int, ...] = ULYSSES_CHUNK_CHOICES, generation: str | None = None,
                 user_deployment: ExpertDeployment[Strategy] | None = None,
                 kernel_profile: str = DEFAULT_KERNEL_PROFILE, program: str = "aoizora",
                 vae: WanVAEConfig | None = None, scoped_vmem_kib: int | None = None,
                 ring_layouts: tuple[str, ...] = RING_LAYOUTS):
        if batch < 2 or batch % 2:
            raise ShapeError(f"the CFG batch is 2 per video (cond, uncond); got {batch}: pass an even batch >= 2")
        self.config, self.video, self.batch = config, video, batch
        self.videos = batch // 2  # videos a step denoises
        self.attentions, self.weights, self.kernel = attentions, weights, kernel
        self.ulysses_chunks = ulysses_chunks
        # the forms of the ring's K/V rotation planned (`Strategy.ring_layout`), each a candidate of its own
        unknown = set(ring_layouts) - set(RING_LAYOUTS)
        if unknown or not ring_layouts:
            raise StrategyError(f"unknown ring layouts {sorted(unknown)}; choose from {', '.join(RING_LAYOUTS)}")
        self.ring_layouts = ring_layouts
        # Splash blocks fitted to each strategy's lengths and the generation's VMEM (`tiles`);
        # without a generation, or one whose limit was not measured, each call takes the kernel's pick.
        self.generation = generation
        self.splash_max_block_q = tiles.splash_max_block_q(generation)
        self.weight_tile = tiles.replicated_weight_tile(generation, config)
        # a scoped-VMEM limit the plan's compiler flags fix (`under_flags`): tiles are searched at it alone
        self.scoped_vmem_kib = tiles.check_fixed_limit(scoped_vmem_kib)
        self.name = model_name
        # Wan's default sampler: UniPC, 50 steps, shift 5.0 at 720p and 3.0 below.
        self.scheduler = scheduler or UniPCScheduler(num_steps=50, shift=5.0 if video.height >= 720 else 3.0)
        self.guidance_scale = guidance_scale
        # a deployment the user runs (`aoizora plan --from-maxdiffusion`), compared like the documented ones
        self.user_deployment = user_deployment
        # the attention kernel every candidate is costed with (`kernel_profiles`); the documented
        # deployments compared are those that run it
        if kernel_profile not in KERNEL_PROFILES:
            raise StrategyError(
                f"unknown kernel profile {kernel_profile!r}; choose one of {', '.join(KERNEL_PROFILES)}")
        self.kernel_profile = kernel_profile
        # the program Stage 2 compiles and costs: aoizora's Wan step, or MaxDiffusion's own
        # (`aoizora.models.maxdiffusion.program`; refused here when MaxDiffusion cannot be imported)
        program_source.check_program(program, self)
        self.program = program
        self.program_source = program_source.maxdiffusion_source() if program == "maxdiffusion" else None
        # the VAE whose decode a plan costs beside the step (`video_time`); None costs no decode
        self.vae = vae
        # per process: the mesh each strategy was lowered on, and its kernels' records (`costs`)
        self._meshes: dict[Strategy, Mesh] = {}
        self._kernel_costs: dict[Strategy, list[KernelCost]] = {}

    def __getstate__(self) -> dict[str, Any]:
        """The space without its per-process caches (meshes hold devices, which do not pickle): a
        copy sent to another process (Stage 1's and Stage 2's workers) rebuilds them as it lowers."""
        return {**self.__dict__, "_meshes": {}, "_kernel_costs": {}}

    # enumeration and legality (`enumeration`)
    def candidates(self, num_devices: int) -> list[Candidate[Strategy]]:
        return enumeration.candidates(self, num_devices)

    def expert_strategy(self, num_devices: int) -> Strategy | None:
        return enumeration.expert_strategy(self, num_devices)

    def expert_deployments(self, topology: Topology) -> list[ExpertDeployment[Strategy]]:
        return enumeration.expert_deployments(self, topology)

    # tiles and flags (`tiles`)
    def compile_flags(self, strategy: Strategy) -> str:
        return tiles.compile_flags(strategy)

    def compiled_form(self, strategy: Strategy) -> Strategy:
        return tiles.compiled_form(self, strategy)

    def under_flags(self, flags: CompilerFlags) -> WanSpace:
        return tiles.under_flags(self, flags)

    def _as_compiled(self, deployment: ExpertDeployment[Strategy]) -> ExpertDeployment[Strategy]:
        return tiles.as_compiled(self, deployment)

    # lowering (`lowering`)
    def mesh_spec(self, strategy: Strategy) -> MeshSpec:
        return lowering.mesh_spec(strategy)

    def lowering_inputs(self, strategy: Strategy, mesh: Mesh) -> LoweringInputs:
        return lowering.lowering_inputs(self, strategy, mesh)

    def compile_inputs(self, strategy: Strategy, mesh: Mesh) -> Any:
        if self.program == "maxdiffusion":
            return program_source.MaxDiffusionStep(self, strategy, mesh)
        return self.lowering_inputs(strategy, mesh)

    def analysis_stand_in(self, strategy: Strategy) -> Strategy | None:
        return lowering.analysis_stand_in(strategy)

    def lowering_affinity(self, strategy: Strategy) -> Hashable:
        return lowering.lowering_affinity(strategy)

    # costs (`costs`)
    def kernel_cost(self, strategy: Strategy, call: KernelCall) -> OpaqueCost | None:
        return costs.kernel_cost(strategy, call)

    def compiled_kernel_cost(self, strategy: Strategy, op: OpaqueOp, *,
                             compiled: Strategy | None = None) -> OpaqueCost | None:
        if self.program == "maxdiffusion":
            return program_source.kernel_cost(strategy, op)
        return costs.compiled_kernel_cost(self, strategy, op, compiled=compiled)

    # the plan file (`plan_file`; the text forms are `Strategy`'s)
    def key_of(self, strategy: Strategy) -> str:
        return strategy.key()

    def describe(self, strategy: Strategy) -> dict[str, Any]:
        return plan_file.describe(self, strategy)

    def from_description(self, description: dict[str, Any]) -> Strategy:
        return Strategy.from_description(description, self.kernel)  # type: ignore[arg-type]

    @classmethod
    def check_plan(cls, plan: dict[str, Any], flags: CompilerFlags) -> PlanDisagreement | None:
        return plan_file.check_wan_plan(plan, flags)

    def workload(self) -> dict[str, Any]:
        return plan_file.workload(self)

    def companion_programs(self, topology: Topology) -> list[CompanionProgram]:
        """The VAE decode of the space's videos (none without a VAE)."""
        return video_parts.companion_programs(self, topology)

    def expert_swap(self, strategy: Strategy, topology: Topology) -> tuple[float | None, str]:
        """(seconds per video, basis) of copying experts in from host memory: none with one transformer."""
        return 0.0, "one transformer: nothing to swap"

    def plan_totals(self, strategy: Strategy, topology: Topology, step_seconds: float,
                    companions: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """The plan's `video_time`: one generation end to end (`aoizora.models.wan.video.video_time`)."""
        return {"video_time": video_parts.video_time_json(self, strategy, topology, step_seconds, companions)}
