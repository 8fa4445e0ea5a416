"""Parallel strategies as configuration: mesh axes, logical-axis rules, legality.

One model, many strategies. A `Strategy` names the sizes of the four mesh axes

* ``data``    – splits the batch (the CFG pair cond/uncond is a batch of 2),
* ``fsdp``    – also splits the batch, and (with ``weights`` "gathered") holds a shard of every
                weight's ``embed`` dimension, all-gathered layer by layer inside the scan,
* ``context`` – splits the token sequence (sequence/context parallelism); the attention
                variant decides how self-attention crosses it; it also shards ``embed`` of
                gathered weights (as in MaxDiffusion),
* ``tensor``  – splits attention heads and the FFN hidden dimension (Megatron-style),

plus the self-attention variant (``allgather``: Q sharded on sequence, K/V all-gathered;
``ulysses``: all-to-all heads↔sequence; ``ring``: K/V rotate over ``context`` by ``ppermute``
with an online-softmax merge) and the weight sharding mode.

Every parameter and activation dimension has a *logical* name (``batch``, ``length``,
``kv_length``, ``heads``, ``head_dim``, ``embed``, ``mlp``, ``layers``, …); `logical_rules`
maps names to mesh axes for a strategy, so the model code never mentions mesh axes directly.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Literal, Sequence

import numpy as np
from jax.sharding import Mesh, PartitionSpec

from aoizora.errors import StrategyError
from aoizora.models.wan.config import VideoShape, WanConfig

MESH_AXES: tuple[str, ...] = ("data", "fsdp", "context", "tensor")
ATTENTION_VARIANTS: tuple[str, ...] = ("allgather", "ulysses", "ring")
WEIGHT_MODES: tuple[str, ...] = ("replicated", "gathered", "tensor", "gathered+tensor")
#: "splash-interpret" runs the splash kernel in the Pallas interpreter on any backend (tests).
KERNELS: tuple[str, ...] = ("auto", "xla", "splash", "splash-interpret")

AttentionVariant = Literal["allgather", "ulysses", "ring"]
WeightMode = Literal["replicated", "gathered", "tensor", "gathered+tensor"]
Kernel = Literal["auto", "xla", "splash", "splash-interpret"]

#: Sequence alignment of each device's token shard for the splash kernel (its minimum block).
SPLASH_ALIGN = 128


@dataclasses.dataclass(frozen=True)
class Strategy:
    """A logical parallel strategy for the Wan DiT (see module docstring)."""

    data: int = 1
    fsdp: int = 1
    context: int = 1
    tensor: int = 1
    attention: AttentionVariant = "allgather"
    weights: WeightMode = "gathered"
    kernel: Kernel = "auto"

    @property
    def mesh_shape(self) -> tuple[int, int, int, int]:
        return (self.data, self.fsdp, self.context, self.tensor)

    @property
    def axis_sizes(self) -> dict[str, int]:
        return dict(zip(MESH_AXES, self.mesh_shape))

    @property
    def num_devices(self) -> int:
        return math.prod(self.mesh_shape)

    @property
    def batch_degree(self) -> int:
        return self.data * self.fsdp

    @property
    def shards_embed(self) -> bool:
        return self.weights in ("gathered", "gathered+tensor")

    @property
    def shards_heads(self) -> bool:
        return self.weights in ("tensor", "gathered+tensor")

    def describe(self) -> str:
        return (
            f"data={self.data} fsdp={self.fsdp} context={self.context} tensor={self.tensor} "
            f"attention={self.attention} weights={self.weights} kernel={self.kernel}"
        )


def logical_rules(strategy: Strategy) -> dict[str, tuple[str, ...] | None]:
    """Logical axis name → mesh axes (None: replicated) for a strategy.

    Activation names: batch, length, kv_length, heads_act, head_dim, embed_act, mlp_act.
    Weight names: layers, embed, heads, mlp, and unsharded ones (in, modulation, ...).
    Mesh axes of size 1 are dropped.
    """
    def keep(*axes: str) -> tuple[str, ...] | None:
        live = tuple(a for a in axes if strategy.axis_sizes[a] > 1)
        return live or None

    return {
        # activations
        "batch": keep("data", "fsdp"),
        "length": keep("context"),
        "kv_length": None,
        "heads_act": keep("tensor"),
        "head_dim": None,
        "embed_act": None,
        "mlp_act": keep("tensor"),
        # weights
        "layers": None,
        "embed": keep("fsdp", "context") if strategy.shards_embed else None,
        "heads": keep("tensor") if strategy.shards_heads else None,
        "mlp": keep("tensor") if strategy.shards_heads else None,
    }


def logical_to_spec(axes: Sequence[str | None], rules: dict[str, tuple[str, ...] | None]) -> PartitionSpec:
    """PartitionSpec of an array whose dimensions carry the given logical names."""
    out = []
    used: set[str] = set()
    for name in axes:
        mesh_axes = rules.get(name) if name is not None else None
        if mesh_axes:
            mesh_axes = tuple(a for a in mesh_axes if a not in used)
            used.update(mesh_axes)
        out.append(mesh_axes if mesh_axes else None)
    return PartitionSpec(*out)


def padded_length(tokens: int, strategy: Strategy | None, splash: bool = False) -> int:
    """Token count after padding so that every sequence shard is equal (and splash-aligned)."""
    unit = (strategy.context if strategy is not None else 1) * (SPLASH_ALIGN if splash else 1)
    return -(-tokens // unit) * unit


def check_strategy(
    strategy: Strategy,
    config: WanConfig,
    video: VideoShape | None = None,
    batch: int = 2,
    num_devices: int | None = None,
) -> list[str]:
    """Reasons why `strategy` is illegal for this model/input/device count (empty list: legal)."""
    reasons: list[str] = []
    for name, size in strategy.axis_sizes.items():
        if not isinstance(size, int) or size < 1:
            reasons.append(f"mesh axis {name} has size {size!r}; sizes must be positive integers")
    if reasons:
        return reasons
    if strategy.attention not in ATTENTION_VARIANTS:
        reasons.append(f"unknown attention variant {strategy.attention!r}; choose one of {ATTENTION_VARIANTS}")
    if strategy.weights not in WEIGHT_MODES:
        reasons.append(f"unknown weight mode {strategy.weights!r}; choose one of {WEIGHT_MODES}")
    if strategy.kernel not in KERNELS:
        reasons.append(f"unknown attention kernel {strategy.kernel!r}; choose one of {KERNELS}")
    if num_devices is not None and strategy.num_devices != num_devices:
        reasons.append(
            f"mesh {strategy.mesh_shape} (data×fsdp×context×tensor) uses {strategy.num_devices} devices, "
            f"the slice has {num_devices}"
        )
    if batch % strategy.batch_degree:
        reasons.append(
            f"batch {batch} is not divisible by data×fsdp = {strategy.batch_degree} "
            "(the batch axes split whole samples; CFG gives a batch of 2)"
        )
    heads = config.num_attention_heads
    if heads % strategy.tensor:
        reasons.append(f"{heads} attention heads are not divisible by tensor={strategy.tensor}")
    elif strategy.attention == "ulysses" and (heads // strategy.tensor) % strategy.context:
        reasons.append(
            f"Ulysses needs heads/tensor = {heads // strategy.tensor} divisible by context={strategy.context} "
            "(the all-to-all trades sequence shards for head shards)"
        )
    if strategy.shards_heads:
        if strategy.tensor == 1:
            reasons.append(f"weights={strategy.weights!r} shards heads/mlp over tensor, but tensor=1")
        if config.ffn_dim % strategy.tensor:
            reasons.append(f"ffn_dim {config.ffn_dim} is not divisible by tensor={strategy.tensor}")
    if strategy.shards_embed:
        deg = strategy.fsdp * strategy.context
        if deg == 1:
            reasons.append(f"weights={strategy.weights!r} shards embed over fsdp×context, but both are 1")
        elif config.dim % deg:
            reasons.append(f"model dim {config.dim} is not divisible by fsdp×context = {deg}")
    if strategy.kernel.startswith("splash") and config.attention_head_dim % 128:
        reasons.append(f"splash attention needs head_dim a multiple of 128, got {config.attention_head_dim}")
    if video is not None:
        try:
            tokens = video.tokens(config)
        except Exception as exc:  # ShapeError: report as a reason
            reasons.append(str(exc))
        else:
            if strategy.context > tokens:
                reasons.append(f"context={strategy.context} exceeds the {tokens} tokens of the video")
    return reasons


def validate_strategy(strategy: Strategy, config: WanConfig, video: VideoShape | None = None,
                      batch: int = 2, num_devices: int | None = None) -> None:
    """Raise StrategyError listing every reason the strategy is illegal."""
    reasons = check_strategy(strategy, config, video, batch, num_devices)
    if reasons:
        raise StrategyError(f"illegal strategy ({strategy.describe()}): " + "; ".join(reasons))


def make_mesh(strategy: Strategy, devices: Sequence[object]) -> Mesh:
    """A Mesh with axes (data, fsdp, context, tensor) over `devices` in the given order.

    The planner passes devices already in its chosen physical order; this function only reshapes.
    """
    devs = list(devices)
    if len(devs) != strategy.num_devices:
        raise StrategyError(
            f"strategy mesh {strategy.mesh_shape} needs {strategy.num_devices} devices, got {len(devs)}"
        )
    return Mesh(np.array(devs, dtype=object).reshape(strategy.mesh_shape), MESH_AXES)


def check_mesh(strategy: Strategy, mesh: Mesh) -> None:
    """Raise StrategyError unless the mesh has the strategy's axis names and sizes."""
    shape = dict(mesh.shape)
    want = strategy.axis_sizes
    if set(shape) != set(MESH_AXES) or any(shape[a] != want[a] for a in MESH_AXES):
        raise StrategyError(f"mesh axes {shape} do not match the strategy's {want}")


def enumerate_strategies(
    config: WanConfig,
    video: VideoShape | None,
    num_devices: int,
    batch: int = 2,
    kernel: Kernel = "auto",
) -> list[Strategy]:
    """Every legal strategy on `num_devices`: all factorizations data×fsdp×context×tensor, the
    attention variants (only "allgather" when context is 1: the variants coincide) and weight
    modes, filtered by `check_strategy`."""
    out: list[Strategy] = []

    def divisors(n: int) -> list[int]:
        return [d for d in range(1, n + 1) if n % d == 0]

    for data in divisors(num_devices):
        for fsdp in divisors(num_devices // data):
            for context in divisors(num_devices // (data * fsdp)):
                tensor = num_devices // (data * fsdp * context)
                for attention in (ATTENTION_VARIANTS if context > 1 else ("allgather",)):
                    for weights in WEIGHT_MODES:
                        s = Strategy(data, fsdp, context, tensor, attention, weights, kernel)  # type: ignore[arg-type]
                        if not check_strategy(s, config, video, batch, num_devices):
                            out.append(s)
    return out
