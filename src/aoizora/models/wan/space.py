"""The Wan 2.1 DiT's strategy space, through the Stage 1 protocol (`aoizora.models.wan`).

Every assignment of the device count to the mesh axes data/fsdp/context/tensor, times the
self-attention variants (allgather, ulysses, ring, ulysses_ring) and the weight modes of
`aoizora.models.wan.strategy`. 2D context attention (ulysses_ring) comes with every split of
context into Ulysses U × ring R with both at least 2 (`context_splits`: U = 1 is ring and
U = context is Ulysses, the same program); the Ulysses variants come with 1, 2 or 4 head-group
chunks (`ULYSSES_CHUNK_CHOICES`) where the heads each device attends to divide evenly. Given the
slice's generation, every strategy runs splash blocks fitted to its local lengths and to that
generation's VMEM (`aoizora.models.wan.splash_tiles`); without one, each call takes the kernel's own pick.
On a generation whose matmuls want 16-bit weights in another tile than the runtime's (TPU7x), every
strategy with replicated weights hands its stacked weights over in that tile (`Strategy.weight_tile`),
so libtpu does not copy them (sharded stacks cannot be handed over so: libtpu overrides their tile);
the expert deployments keep the runtime's layout, as deployed.
Legality is the model's own `check_strategy`; on top, variants that the model runs identically
are rejected as duplicates (with context = 1 every attention variant is plain local attention,
see `attention.self_attention`). Lowering is one
`denoise_step` (the transformer on the CFG batch of 2, guidance, scheduler update) on abstract
(weightless) sharded inputs for one video shape. Pallas splash calls are costed in Stage 1 from
their operand shapes (4·B·H·Lq·Lk·D FLOPs; q, k, v and the output through HBM) and in Stage 2
from the model's own record of each kernel it emits (`opaque_kernel_costs`).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax.numpy as jnp

from aoizora.errors import ShapeError, StrategyError
from aoizora.hlo.program import OpaqueCost, OpaqueOp
from aoizora.models.wan.attention import splash_cost, splash_grid_steps
from aoizora.models.wan.config import VideoShape, WanConfig
from aoizora.models.wan.custom_tiles import custom_kernel_tile, published_steps
from aoizora.models.wan.experts import legal_expert_strategies
from aoizora.models.wan.kernel_profiles import DEFAULT_KERNEL_PROFILE, KERNEL_PROFILES
from aoizora.models.wan.sampling import make_denoise_step, opaque_kernel_costs
from aoizora.models.wan.schedulers import UniPCScheduler
from aoizora.models.wan.sharding import abstract_params, abstract_step_inputs
from aoizora.models.wan.space_plan_file import check_wan_plan
from aoizora.models.wan.splash_tiles import fitted_splash_blocks, searched_splash_tile
from aoizora.models.wan.strategy import (
    ATTENTION_VARIANTS,
    MESH_AXES,
    ULYSSES_CHUNK_CHOICES,
    WEIGHT_MODES,
    Strategy,
    check_strategy,
    context_splits,
)
from aoizora.placement import MeshSpec
from aoizora.toolchain import SCOPED_VMEM_FLAG, CompilerFlags
from aoizora.topology import RUNTIME_TILE_16BIT, hardware_profile
from aoizora.workload import (
    Candidate,
    ExpertDeployment,
    KernelCall,
    LoweringInputs,
    PlanDisagreement,
    StrategySpace,
    axis_assignments,
)


class WanSpace(StrategySpace[Strategy]):
    name = "wan"

    def __init__(self, config: WanConfig, video: VideoShape, batch: int = 2,
                 attentions: tuple[str, ...] = ATTENTION_VARIANTS, weights: tuple[str, ...] = WEIGHT_MODES,
                 kernel: str = "auto", *, model_name: str = "wan", scheduler: Any = None, guidance_scale: float = 5.0,
                 ulysses_chunks: tuple[int, ...] = ULYSSES_CHUNK_CHOICES, generation: str | None = None,
                 user_deployment: ExpertDeployment | None = None, kernel_profile: str = DEFAULT_KERNEL_PROFILE):
        if batch < 2 or batch % 2:
            raise ShapeError(f"the CFG batch is 2 per video (cond, uncond); got {batch}: pass an even batch >= 2")
        self.config, self.video, self.batch = config, video, batch
        self.videos = batch // 2  # videos a step denoises
        self.attentions, self.weights, self.kernel = attentions, weights, kernel
        self.ulysses_chunks = ulysses_chunks
        # Splash blocks fitted to each strategy's lengths and the generation's VMEM (`blocks`);
        # without a generation, or one whose limit was not measured, each call takes the kernel's pick.
        self.generation = generation
        self.splash_max_block_q = hardware_profile(generation).splash_max_block_q if generation else {}
        tile = hardware_profile(generation).tile_16bit if generation else RUNTIME_TILE_16BIT
        self.weight_tile = tile if tile != RUNTIME_TILE_16BIT and jnp.dtype(config.dtype).itemsize == 2 else None
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
        self._meshes: dict[Strategy, Any] = {}
        self._kernel_costs: dict[Strategy, list] = {}

    def __getstate__(self) -> dict[str, Any]:
        """The space without its per-process caches (meshes hold devices, which do not pickle): a
        copy sent to another process (Stage 1's and Stage 2's workers) rebuilds them as it lowers."""
        return {**self.__dict__, "_meshes": {}, "_kernel_costs": {}}

    def candidates(self, num_devices: int) -> list[Candidate]:
        out = []
        for sizes in axis_assignments(num_devices, MESH_AXES):
            for attention in self.attentions:
                chunk_choices = self.ulysses_chunks if attention in ("ulysses", "ulysses_ring") else (1,)
                for uly in context_splits(sizes["context"], attention):
                    for chunks in chunk_choices:
                        for weights in self.weights:
                            st = self._with_blocks(Strategy(
                                **sizes, attention=attention, weights=weights,  # type: ignore[arg-type]
                                kernel=self.kernel, context_ulysses=uly, ulysses_chunks=chunks,
                                weight_tile=self.weight_tile if weights == "replicated" else None,
                                kernel_profile=self.kernel_profile))
                            out.append(Candidate(st.key(), st, tuple(self._reasons(st, num_devices))))
        return out

    def _with_blocks(self, st: Strategy) -> Strategy:
        """The strategy with splash blocks fitted to it, when the space fits blocks and it runs splash:
        JAX's splash (whose cost depends on them) with the tile and scoped-VMEM limit the search finds
        fastest (`blocks.searched_splash_tile`), another kernel (costed by a tile-independent profile)
        with the blocks fitted at libtpu's default limit."""
        if not self.splash_max_block_q or st.kernel == "xla":
            return st
        tokens = self.video.tokens(self.config)
        if st.kernel_profile == DEFAULT_KERNEL_PROFILE and self.generation is not None:
            found = searched_splash_tile(st, tokens, self.batch, self.generation)
            if found is not None:
                blocks, limit = found
                return dataclasses.replace(st, splash_blocks=blocks, scoped_vmem_kib=limit)
        blocks = fitted_splash_blocks(st, tokens, self.batch, self.splash_max_block_q)
        return dataclasses.replace(st, splash_blocks=blocks) if blocks is not None else st

    def compile_flags(self, strategy: Strategy) -> str:
        """The scoped-VMEM limit its tile was chosen with, as a libtpu flag ("" for libtpu's default)."""
        if strategy.scoped_vmem_kib is None:
            return ""
        return f"--{SCOPED_VMEM_FLAG}={strategy.scoped_vmem_kib}"

    def order_probe(self, strategy: Strategy) -> Strategy | None:
        """A strategy compiled under a raised scoped-VMEM limit is probed with the blocks fitted at
        libtpu's default limit, and that limit: the limit makes libtpu's back end several times
        slower (`benchmarks/compile_matrix.py`) and changes the fusions, not the collectives, and
        the tile changes only the splash calls. None for a strategy at the default limit (its
        own compile is as fast)."""
        if strategy.scoped_vmem_kib is None or not self.splash_max_block_q:
            return None
        blocks = fitted_splash_blocks(strategy, self.video.tokens(self.config), self.batch, self.splash_max_block_q)
        if blocks is None:
            return None
        return dataclasses.replace(strategy, splash_blocks=blocks, scoped_vmem_kib=None)

    def _reasons(self, st: Strategy, num_devices: int) -> list[str]:
        reasons = check_strategy(st, self.config, self.video, self.batch, num_devices)
        if st.fsdp > 1 and not st.shards_embed:
            reasons.append(f"fsdp > 1 with weights={st.weights} (embed not sharded) is data parallelism (duplicate)")
        if st.context == 1 and st.attention != self.attentions[0]:
            reasons.append(f"attention={st.attention} with context=1 runs as {self.attentions[0]} (duplicate)")
        profile = KERNEL_PROFILES[st.kernel_profile]
        if st.context > 1 and st.attention not in profile.variants:
            reasons.append(
                f"the {profile.name} kernel is deployed with {' and '.join(profile.variants)} attention only")
        if st.ulysses_chunks > 1 and st.ulysses_axis is not None and st.ulysses_axis[1] == 1:
            reasons.append(
                f"ulysses_chunks={st.ulysses_chunks} without an all-to-all has nothing to overlap (duplicate)")
        return reasons

    def analysis_stand_in(self, strategy: Strategy) -> Strategy | None:
        """A chunked Ulysses strategy is analysed as its unchunked sibling: the same FLOPs and
        collective bytes in fewer, larger collectives and attention calls (a Q1 no higher) with
        every chunk's buffers at once (memory no lower). What chunking buys, overlap of one
        chunk's all-to-all with another's attention, only the compiled schedule shows."""
        if strategy.ulysses_chunks > 1:
            return dataclasses.replace(strategy, ulysses_chunks=1)
        return None

    def lowering_affinity(self, strategy: Strategy) -> tuple[int, int]:
        # Pallas processes each splash mask in NumPy (~1 s at 75k tokens) and caches only the last
        # 12; the kernels' shapes depend on the context and tensor sizes only (data and fsdp split
        # the batch, which the kernel is vmapped over), so those strategies share their masks.
        # (blocks included: the mask's block tables depend on them)
        return (strategy.context, strategy.tensor, strategy.splash_blocks)

    def mesh_spec(self, strategy: Strategy) -> MeshSpec:
        # the model's meshes always carry all their axes (size-1 ones included): the four of
        # `MESH_AXES`, or five for 2D context (context split into context_ring × context_ulysses)
        return MeshSpec(strategy.mesh_axes, strategy.mesh_shape)

    def lowering_inputs(self, strategy: Strategy, mesh: Any) -> LoweringInputs:
        # the program of the space's CFG batch: batch / 2 videos a step, as its kernels are costed
        step = make_denoise_step(self.config, self.scheduler, strategy, mesh, self.guidance_scale,
                                 videos=self.videos)
        a = abstract_step_inputs(self.config, self.video, mesh, self.scheduler, videos=self.videos)
        args = (abstract_params(self.config, strategy, mesh), a["latents"], a["state"], a["text_cond"],
                a["text_uncond"], a["image"], a["condition"])
        self._meshes[strategy] = mesh  # for costing its kernels if Stage 2 compiles it
        return LoweringInputs(step.jitted, args)

    def kernel_cost(self, strategy: Strategy, call: KernelCall) -> OpaqueCost | None:
        """Splash attention: q, k, v are the first three floating operands of rank >= 3."""
        floats = [t for t in call.operand_types if t is not None and t.rank >= 3 and t.dtype.startswith(("bf", "f"))]
        if call.target != "tpu_custom_call" or len(floats) < 3:
            return None
        q, k, v = floats[:3]
        d, lq, lk = q.shape[-1], q.shape[-2], k.shape[-2]
        # the same kernel model Stage 2 uses for the compiled call (K/V re-streamed per Q block);
        # residuals (log-sum-exp) are a second floating result
        residuals = sum(1 for t in call.result_types if t is not None and t.dtype.startswith(("bf", "f"))) > 1
        blocks = strategy.splash_blocks
        block_q, block_kv = (blocks.block_q, blocks.block_kv) if blocks is not None else (None, None)
        batch_heads = q.elements // (lq * d)
        flops, hbm = splash_cost(batch_heads, lq, lk, d, q.bytes // q.elements, residuals, block_q)
        return _splash_opaque_cost(flops, hbm, d, splash_grid_steps(batch_heads, lq, lk, block_q, block_kv),
                                   strategy.kernel_profile)

    def describe(self, strategy: Strategy) -> dict[str, Any]:
        tile = custom_kernel_tile(strategy, self.video.tokens(self.config), self.generation)
        # the tile MaxDiffusion's own kernel runs it with (compiled at splash_blocks)
        return strategy.description(video=(self.video.frames, self.video.height, self.video.width),
                                    kernel_tile=tile.to_json() if tile is not None else None)

    def from_description(self, description: dict[str, Any]) -> Strategy:
        return Strategy.from_description(description, self.kernel)  # type: ignore[arg-type]

    @classmethod
    def check_plan(cls, plan: dict[str, Any], flags: CompilerFlags) -> PlanDisagreement | None:
        return check_wan_plan(plan, flags)

    def compiled_kernel_cost(self, strategy: Strategy, op: OpaqueOp) -> OpaqueCost | None:
        """The model's own record of the kernel this custom call is (matched by its HLO name)."""
        if strategy not in self._kernel_costs and strategy in self._meshes:
            self._kernel_costs[strategy] = opaque_kernel_costs(
                self.config, self.video, strategy, self._meshes[strategy], self.batch
            )
        costs = self._kernel_costs.get(strategy, [])
        matches = [kc for kc in costs if op.name.split(".")[0] == kc.hlo_name or op.kernel_name == kc.hlo_name]
        if len(matches) > 1:
            # Self- and cross-attention calls share a kernel name: tell them apart by the (heads,
            # length, head_dim) of q and k, the first two floating operands (mask-info operands lead).
            floats = [s.dims[-3:] for s in op.operand_shapes if s.dtype in ("bf16", "f16", "f32") and len(s.dims) >= 3]
            if len(floats) >= 2:
                q, k = tuple(floats[0]), tuple(floats[1])
                shaped = [kc for kc in matches if (kc.q_shape[2], kc.q_shape[1], kc.q_shape[3]) == q
                          and (kc.kv_shape[2], kc.kv_shape[1], kc.kv_shape[3]) == k]
                if not shaped:
                    return None  # an unrecognised call: costed from its I/O, never as another kernel
                matches = shaped
        if matches:
            kc = matches[0]
            return _splash_opaque_cost(kc.flops, kc.bytes_accessed, kc.q_shape[3], kc.grid_steps,
                                       strategy.kernel_profile)
        return None

    def expert_strategy(self, num_devices: int) -> Strategy | None:
        """MaxDiffusion's generation-agnostic Wan deployment (its README's command): CFG on
        data=2, the rest on context, K/V all-gathered, weights' embed dimension sharded over
        context and gathered per layer, the command's splash block sizes."""
        rows = legal_expert_strategies(self.config, self.video, "", num_devices, self.batch, self.kernel)
        return rows[0][1] if rows else None

    def expert_deployments(self, topology: Any) -> list[ExpertDeployment]:
        """The deployments MaxDiffusion documents for the slice's generation (`wan_experts`)."""
        rows = legal_expert_strategies(self.config, self.video, topology.generation, topology.num_devices,
                                       self.batch, self.kernel, self.kernel_profile)
        deployments = [ExpertDeployment(e.name, st, e.libtpu_args, e.source, e.documented) for e, st in rows]
        if self.user_deployment is not None:
            deployments.append(self.user_deployment)
        return [self._as_compiled(d) for d in deployments]

    def _as_compiled(self, deployment: ExpertDeployment) -> ExpertDeployment:
        """A deployment of another kernel than JAX's splash as aoizora compiles it: its kernel is
        costed by its profile, which does not depend on the tile, and the program is compiled with
        JAX's splash at blocks that kernel accepts (its own tile may need the other kernel)."""
        st = deployment.strategy
        if st.kernel_profile == DEFAULT_KERNEL_PROFILE or st.splash_blocks is None:
            return deployment
        fitted = self._with_blocks(dataclasses.replace(st, splash_blocks=None))
        compiled = fitted.splash_blocks.describe() if fitted.splash_blocks else "its own blocks"
        note = (f"; runs {st.kernel_profile} at {st.splash_blocks.describe()}, compiled here with JAX's splash at "
                f"{compiled}")
        line = (f"tile {st.splash_blocks.describe()} ({st.kernel_profile}) is not compiled as written: aoizora "
                f"compiles JAX's splash kernel, here at {compiled}; the {st.kernel_profile} profile costs the "
                f"attention at {st.splash_blocks.describe()} (the profile does not depend on the tile)")
        steps = published_steps(st, self.video.tokens(self.config), self.generation)
        if steps:
            line += ("; published steps of this kernel at these lengths: "
                     + ", ".join(f"{m.blocks.describe()} {m.step_seconds} s/step" for m in steps)
                     + f" ({steps[0].source.split(' (')[0]})")
        return dataclasses.replace(deployment, strategy=fitted, documented=deployment.documented + note,
                                   notes=(line, *deployment.notes))

    def key_of(self, strategy: Strategy) -> str:
        return strategy.key()

    def workload(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shapes": {
                "frames": self.video.frames, "height": self.video.height, "width": self.video.width,
                "tokens": self.video.tokens(self.config), "cfg_batch": self.batch,
            },
            "model": {"layers": self.config.num_layers, "dim": self.config.dim,
                      "heads": self.config.num_attention_heads, "ffn": self.config.ffn_dim, "i2v": self.config.is_i2v},
            "scheduler": {"name": type(self.scheduler).__name__, "steps": self.scheduler.num_steps,
                          "shift": self.scheduler.shift},
            "kernel": self.kernel,
            # what the strategies' splash blocks are fitted to (plans and analyses differ with it)
            "splash_blocks": (f"fitted to {self.generation}" if self.splash_max_block_q
                              else "the kernel's pick per call"),
            **({"kernel_profile": self.kernel_profile} if self.kernel_profile != DEFAULT_KERNEL_PROFILE else {}),
            **({"user_deployment": {**self._as_compiled(self.user_deployment).to_json(),
                                    "strategy": self.user_deployment.strategy.key()}}
               if self.user_deployment is not None else {}),
        }


def _splash_opaque_cost(flops: float, hbm_bytes: float, head_dim: int, grid_steps: int,
                        profile: str = DEFAULT_KERNEL_PROFILE) -> OpaqueCost:
    """A splash call's cost: its FLOPs (4 per score element and head-dim unit: QK^T and PV), HBM
    bytes, and what bounds it besides, per the kernel the deployment runs (`kernel_profiles`):
    for JAX's splash its score-matrix elements (the softmax's vector work per element), its head
    dim (the narrowest dimension of both matmuls) and its grid iterations."""
    work = KERNEL_PROFILES[profile].work(flops, head_dim, grid_steps)
    return OpaqueCost(flops=flops, hbm_bytes=int(hbm_bytes), kernel=work)
