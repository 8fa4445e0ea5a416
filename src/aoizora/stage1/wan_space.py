"""The Wan 2.1 DiT's strategy space, through the Stage 1 protocol (`aoizora.models.wan`).

Every assignment of the device count to the mesh axes data/fsdp/context/tensor, times the
self-attention variants (allgather, ulysses, ring) and the weight modes of
`aoizora.models.wan.strategy`. Legality is the model's own `check_strategy`; on top, variants
that the model runs identically are rejected as duplicates (with context = 1 every attention
variant is plain local attention, see `attention.self_attention`). Lowering is the transformer
forward on abstract (weightless) sharded inputs for one video shape. Pallas splash calls are
costed from their operand shapes: 4·B·H·Lq·Lk·D FLOPs, and q, k, v and the output through HBM.
"""

from __future__ import annotations

import functools
from typing import Any

from aoizora.hlo.program import OpaqueCost
from aoizora.models.wan.config import VideoShape, WanConfig
from aoizora.models.wan.model import forward
from aoizora.models.wan.sharding import abstract_forward_inputs, abstract_params
from aoizora.models.wan.strategy import ATTENTION_VARIANTS, MESH_AXES, WEIGHT_MODES, Strategy, check_strategy
from aoizora.placement import MeshSpec
from aoizora.stage1.dag import KernelCall
from aoizora.stage1.space import Candidate, LoweringInputs, StrategySpace, axis_assignments


def strategy_key(st: Strategy) -> str:
    mesh = ",".join(f"{a}={n}" for a, n in st.axis_sizes.items() if n > 1) or "single"
    return f"{mesh} | weights={st.weights} | attn={st.attention}"


class WanSpace(StrategySpace):
    name = "wan"

    def __init__(self, config: WanConfig, video: VideoShape, batch: int = 2,
                 attentions: tuple[str, ...] = ATTENTION_VARIANTS, weights: tuple[str, ...] = WEIGHT_MODES,
                 kernel: str = "auto"):
        self.config, self.video, self.batch = config, video, batch
        self.attentions, self.weights, self.kernel = attentions, weights, kernel

    def candidates(self, num_devices: int) -> list[Candidate]:
        out = []
        for sizes in axis_assignments(num_devices, MESH_AXES):
            for attention in self.attentions:
                for weights in self.weights:
                    st = Strategy(**sizes, attention=attention, weights=weights, kernel=self.kernel)  # type: ignore[arg-type]
                    reasons = check_strategy(st, self.config, self.video, self.batch, num_devices)
                    if st.fsdp > 1 and not st.shards_embed:
                        reasons.append(f"fsdp > 1 with weights={weights} (embed not sharded) is data parallelism (duplicate)")
                    if st.context == 1 and attention != self.attentions[0]:
                        reasons.append(f"attention={attention} with context=1 runs as {self.attentions[0]} (duplicate)")
                    out.append(Candidate(strategy_key(st), st, tuple(reasons)))
        return out

    def mesh_spec(self, strategy: Strategy) -> MeshSpec:
        # the model's meshes always carry all four axes (size-1 ones included)
        return MeshSpec(MESH_AXES, strategy.mesh_shape)

    def lowering_inputs(self, strategy: Strategy, mesh: Any) -> LoweringInputs:
        params = abstract_params(self.config, strategy, mesh)
        inp = abstract_forward_inputs(self.config, self.video, strategy, mesh, self.batch)
        fn = functools.partial(forward, config=self.config, strategy=strategy, mesh=mesh)
        return LoweringInputs(fn, (params, inp["latents"], inp["timestep"], inp["text"], inp["image"]))

    def kernel_cost(self, strategy: Strategy, call: KernelCall) -> OpaqueCost | None:
        """Splash attention: q, k, v are the first three floating operands of rank >= 3."""
        floats = [t for t in call.operand_types if t is not None and t.rank >= 3 and t.dtype.startswith(("bf", "f"))]
        if call.target != "tpu_custom_call" or len(floats) < 3:
            return None
        q, k, v = floats[:3]
        d = q.shape[-1]
        flops = 4.0 * (q.elements // d) * k.shape[-2] * d
        io = q.bytes + k.bytes + v.bytes + sum(t.bytes for t in call.result_types if t is not None)
        return OpaqueCost(flops=flops, hbm_bytes=int(io))

    def describe(self, strategy: Strategy) -> dict[str, Any]:
        return {"mesh": strategy.axis_sizes, "attention": strategy.attention, "weights": strategy.weights,
                "kernel": strategy.kernel, "video": [self.video.frames, self.video.height, self.video.width]}
