"""The strategy space of the generic scanned transformer (`aoizora.workloads.transformer`).

Mesh axes `data`, `fsdp`, `context`, `tensor` (the MaxDiffusion vocabulary) with sizes whose
product is the device count; logical-axis rules derived from them (batch over data x fsdp,
sequence over context, heads and mlp over tensor) and a weight-sharding choice for the `embed`
dimension of the weights: replicated, over fsdp, or over context x fsdp. The transformer has one
attention variant (dense einsum attention), kept as a field so the key format matches Wan's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from jax.sharding import NamedSharding

from aoizora.placement import MeshSpec
from aoizora.workload import Candidate, LoweringInputs, StrategySpace, axis_assignments, mesh_of
from aoizora.workloads.transformer import TransformerConfig, _spec, abstract_args, make_forward

AXES = ("data", "fsdp", "context", "tensor")
WEIGHT_SHARDINGS = ("replicated", "fsdp", "context+fsdp")


@dataclass(frozen=True)
class TransformerStrategy:
    sizes: tuple[tuple[str, int], ...]  # (axis, size) for data, fsdp, context, tensor
    weights: str = "replicated"
    attention: str = "dense"

    @property
    def axis_sizes(self) -> dict[str, int]:
        return dict(self.sizes)

    def rules(self) -> dict[str, str | tuple[str, ...] | None]:
        s = self.axis_sizes

        def axes(*names: str) -> str | tuple[str, ...] | None:
            live = tuple(n for n in names if s.get(n, 1) > 1)
            return None if not live else live[0] if len(live) == 1 else live

        embed = {"replicated": None, "fsdp": axes("fsdp"), "context+fsdp": axes("context", "fsdp")}[self.weights]
        return {"batch": axes("data", "fsdp"), "seq": axes("context"), "heads": axes("tensor"), "mlp": axes("tensor"),
                "embed": embed}

    @property
    def key(self) -> str:
        mesh = ",".join(f"{a}={n}" for a, n in self.sizes if n > 1) or "single"
        return f"{mesh} | weights={self.weights} | attn={self.attention}"


class TransformerSpace(StrategySpace[TransformerStrategy]):
    name = "transformer"

    def __init__(self, cfg: TransformerConfig, weight_shardings: tuple[str, ...] = WEIGHT_SHARDINGS):
        self.cfg = cfg
        self.weight_shardings = weight_shardings

    def candidates(self, num_devices: int) -> list[Candidate]:
        out = []
        for sizes in axis_assignments(num_devices, AXES):
            for weights in self.weight_shardings:
                st = TransformerStrategy(tuple(sizes.items()), weights)
                out.append(Candidate(st.key, st, tuple(self.illegal(st))))
        return out

    def illegal(self, st: TransformerStrategy) -> list[str]:
        """Reasons a strategy cannot run (or duplicates another one); empty when legal."""
        c, s = self.cfg, st.axis_sizes
        reasons = []
        if c.batch % (s["data"] * s["fsdp"]):
            reasons.append(f"batch {c.batch} not divisible by data x fsdp = {s['data'] * s['fsdp']}")
        if c.seq % s["context"]:
            reasons.append(f"sequence {c.seq} not divisible by context = {s['context']}")
        if c.heads % s["tensor"]:
            reasons.append(f"heads {c.heads} not divisible by tensor = {s['tensor']}")
        if c.mlp % s["tensor"]:
            reasons.append(f"mlp {c.mlp} not divisible by tensor = {s['tensor']}")
        embed = {"replicated": 1, "fsdp": s["fsdp"], "context+fsdp": s["context"] * s["fsdp"]}[st.weights]
        if c.dim % embed:
            reasons.append(f"dim {c.dim} not divisible by the weight sharding ({embed})")
        if st.weights == "replicated" and s["fsdp"] > 1:
            reasons.append("fsdp > 1 with replicated weights is data parallelism (duplicate)")
        if st.weights == "fsdp" and s["fsdp"] == 1:
            reasons.append("weights over fsdp with fsdp = 1 is replicated weights (duplicate)")
        if st.weights == "context+fsdp" and s["context"] == 1:
            reasons.append("weights over context x fsdp with context = 1 duplicates weights over fsdp")
        return reasons

    def mesh_spec(self, strategy: TransformerStrategy) -> MeshSpec:
        return mesh_of(strategy.axis_sizes)

    def lowering_inputs(self, strategy: TransformerStrategy, mesh: Any) -> LoweringInputs:
        rules = strategy.rules()
        x, params = abstract_args(self.cfg, mesh, rules)
        out = NamedSharding(mesh, _spec(rules, "batch", "seq", None))
        return LoweringInputs(make_forward(mesh, rules), (x, params), jit_kwargs={"out_shardings": out})

    def describe(self, strategy: TransformerStrategy) -> dict[str, Any]:
        return {"mesh": dict(strategy.sizes), "weights": strategy.weights, "attention": strategy.attention,
                "rules": {k: v for k, v in strategy.rules().items()}}
