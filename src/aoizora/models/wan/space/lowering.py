"""What a Wan space lowers for a strategy: its mesh, and one denoising step on abstract inputs.

Lowering is one `denoise_step` (the transformer on the CFG batch, guidance, scheduler update) on
abstract (weightless) sharded inputs for one video shape. A chunked Ulysses strategy is analysed
as its unchunked sibling (`analysis_stand_in`), and strategies whose splash kernels share their
masks are lowered in the same process (`lowering_affinity`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable
from typing import TYPE_CHECKING

from aoizora.models.wan.transformer.sharding import abstract_params, abstract_step_inputs
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.models.wan.video.sampling import JitWithDefaults, make_denoise_step
from aoizora.placement import MeshSpec
from aoizora.workload import LoweringInputs

if TYPE_CHECKING:
    from jax.sharding import Mesh

    from aoizora.models.wan.space.fields import WanSpaceFields


def mesh_spec(strategy: Strategy) -> MeshSpec:
    # the model's meshes always carry all their axes (size-1 ones included): the four of
    # `MESH_AXES`, or five for 2D context (context split into context_ring × context_ulysses)
    return MeshSpec(strategy.mesh_axes, strategy.mesh_shape)


def lowering_inputs(space: WanSpaceFields, strategy: Strategy, mesh: Mesh) -> LoweringInputs:
    """The denoising step of the space's CFG batch (batch / 2 videos a step, as its kernels are
    costed) and its abstract arguments on `mesh`; the mesh is kept for costing the strategy's
    kernels if Stage 2 compiles it (`costs.compiled_kernel_cost`)."""
    step = make_denoise_step(space.config, space.scheduler, strategy, mesh, space.guidance_scale,
                             videos=space.videos)
    a = abstract_step_inputs(space.config, space.video, mesh, space.scheduler, videos=space.videos)
    args = (abstract_params(space.config, strategy, mesh), a["latents"], a["state"], a["text_cond"],
            a["text_uncond"], a["image"], a["condition"])
    space._meshes[strategy] = mesh
    assert isinstance(step, JitWithDefaults)  # a strategy's step: jitted with its shardings
    return LoweringInputs(step.jitted, args)


def analysis_stand_in(strategy: Strategy) -> Strategy | None:
    """A chunked Ulysses strategy is analysed as its unchunked sibling: the same FLOPs and
    collective bytes in fewer, larger collectives and attention calls (a Q1 no higher) with
    every chunk's buffers at once (memory no lower). What chunking buys, overlap of one
    chunk's all-to-all with another's attention, only the compiled schedule shows."""
    if strategy.ulysses_chunks > 1:
        return dataclasses.replace(strategy, ulysses_chunks=1)
    return None


def lowering_affinity(strategy: Strategy) -> Hashable:
    # Pallas processes each splash mask in NumPy (~1 s at 75k tokens) and caches only the last
    # 12; the kernels' shapes depend on the context and tensor sizes only (data and fsdp split
    # the batch, which the kernel is vmapped over), so those strategies share their masks.
    # (blocks included: the mask's block tables depend on them)
    return (strategy.context, strategy.tensor, strategy.splash_blocks)
