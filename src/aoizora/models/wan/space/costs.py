"""What a Wan strategy's opaque kernels (Pallas splash calls) cost, which no IR can tell.

Stage 1 costs a splash call from its operand shapes (`kernel_cost`: 4·B·H·Lq·Lk·D FLOPs; q, k, v
and the output through HBM); Stage 2 from the model's own record of each kernel it emits
(`compiled_kernel_cost`, `sampling.opaque_kernel_costs`). Both bound the call per the kernel the
deployment runs (`aoizora.models.wan.transformer.kernel_profiles`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aoizora.hlo.program import OpaqueCost, OpaqueOp
from aoizora.models.wan.space.tiles import compiled_form
from aoizora.models.wan.transformer.attention import (
    KernelCost,
    splash_cost,
    splash_grid_steps,
    splash_kv_stream_bytes,
)
from aoizora.models.wan.transformer.kernel_profiles import DEFAULT_KERNEL_PROFILE, KERNEL_PROFILES
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.models.wan.video.sampling import opaque_kernel_costs
from aoizora.workload import KernelCall

if TYPE_CHECKING:
    from aoizora.models.wan.space.fields import WanSpaceFields


def kernel_cost(strategy: Strategy, call: KernelCall) -> OpaqueCost | None:
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
    itemsize = q.bytes // q.elements  # a float: Stage 1's IR counts bytes as floats
    flops, hbm = splash_cost(batch_heads, lq, lk, d, itemsize, residuals, block_q)  # type: ignore[arg-type]
    kv_bytes = splash_kv_stream_bytes(batch_heads, lq, lk, d, itemsize, block_q)  # type: ignore[arg-type]
    return splash_opaque_cost(flops, hbm, d, splash_grid_steps(batch_heads, lq, lk, block_q, block_kv),
                              strategy.kernel_profile, blocks.compute_blocks_per_step if blocks is not None else 1,
                              kv_bytes)


def compiled_kernel_cost(space: WanSpaceFields, strategy: Strategy, op: OpaqueOp, *,
                         compiled: Strategy | None = None) -> OpaqueCost | None:
    """The model's own record of the kernel this custom call is (matched by its HLO name). Stage 2
    compiles a strategy in its compiled form (`tiles.compiled_form`: blocks fitted to the
    default limit, whose calls may pad the queries to another length): the call is found among the
    calls of the strategy that was `compiled` (by default that form) and costed as the strategy's
    own call at the same place in the forward."""
    form = compiled_form(space, strategy) if compiled is None else compiled
    own = _kernel_records(space, strategy, form)
    records = own if form == strategy else _kernel_records(space, form, form)
    i = _matching_call(records, op)
    if i is None or i >= len(own):
        return None
    kc = own[i]
    return splash_opaque_cost(kc.flops, kc.bytes_accessed, kc.q_shape[3], kc.grid_steps, strategy.kernel_profile,
                              kc.compute_blocks_per_step, kc.kv_stream_bytes)


def _kernel_records(space: WanSpaceFields, strategy: Strategy, form: Strategy) -> list[KernelCost]:
    """The strategy's kernel records, traced on the mesh it (or its compiled `form`) was lowered on."""
    if strategy not in space._kernel_costs:
        mesh = space._meshes.get(strategy, space._meshes.get(form))
        if mesh is None:
            return []
        space._kernel_costs[strategy] = opaque_kernel_costs(space.config, space.video, strategy, mesh, space.batch)
    return space._kernel_costs[strategy]


def _matching_call(costs: list[KernelCost], op: OpaqueOp) -> int | None:
    """The index of the record `op` is (None: an unrecognised call, costed from its I/O, never as
    another kernel)."""
    matches = [i for i, kc in enumerate(costs) if op.name.split(".")[0] == kc.hlo_name or op.kernel_name == kc.hlo_name]
    if len(matches) > 1:
        # Self- and cross-attention calls share a kernel name: tell them apart by the (heads,
        # length, head_dim) of q and k, the first two floating operands (mask-info operands lead).
        floats = [s.dims[-3:] for s in op.operand_shapes if s.dtype in ("bf16", "f16", "f32") and len(s.dims) >= 3]
        if len(floats) >= 2:
            q, k = tuple(floats[0]), tuple(floats[1])
            shaped = [i for i in matches if (costs[i].q_shape[2], costs[i].q_shape[1], costs[i].q_shape[3]) == q
                      and (costs[i].kv_shape[2], costs[i].kv_shape[1], costs[i].kv_shape[3]) == k]
            if not shaped:
                return None
            matches = shaped
    return matches[0] if matches else None


def splash_opaque_cost(flops: float, hbm_bytes: float, head_dim: int, grid_steps: int,
                       profile: str = DEFAULT_KERNEL_PROFILE, compute_blocks_per_step: int = 1,
                       kv_stream_bytes: float | None = None) -> OpaqueCost:
    """A splash call's cost: its FLOPs (4 per score element and head-dim unit: QK^T and PV), HBM
    bytes, and what bounds it besides, per the kernel the deployment runs (`kernel_profiles`):
    for JAX's splash its score-matrix elements (the softmax's vector work per element), its head
    dim (the narrowest dimension of both matmuls), its grid iterations, the K/V compute
    sub-blocks each runs (`compute_blocks_per_step`) and the K/V bytes its Q blocks re-read
    (`kv_stream_bytes`)."""
    work = KERNEL_PROFILES[profile].work(flops, head_dim, grid_steps, compute_blocks_per_step, kv_stream_bytes)
    return OpaqueCost(flops=flops, hbm_bytes=int(hbm_bytes), kernel=work)
