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
with an online-softmax merge; ``ulysses_ring``: 2D context attention, see below) and the weight
sharding mode.

2D context attention (``ulysses_ring``) splits ``context`` = U × R into two mesh axes of their own,
``context_ring`` (R, outer) and ``context_ulysses`` (U, inner): the sequence is sharded over both
(shard index r·U + u), an all-to-all over ``context_ulysses`` trades sequence for heads, so each
device holds the contiguous span r of the sequence for heads/U heads, and K/V of those spans rotate
around ``context_ring``. Two mesh axes let a placement put the all-to-all on a fast link (the two
TensorCores of one TPU7x chip) and the ring across chips, or the other way. Its mesh is
(data, fsdp, context_ring, context_ulysses, tensor); every other variant keeps the four axes.

Ulysses chunking (``ulysses_chunks``, ``ulysses`` and ``ulysses_ring``) splits each device's heads
into that many groups, each with its own all-to-alls and attention, so one group's communication
can overlap another's compute. ``splash_blocks`` fixes the splash kernel's block sizes (by default
the kernel's blocks are chosen per call from the local lengths). ``weight_tile`` hands the replicated
stacked 16-bit layer matrices to the program in that (second-minor, minor) tile instead of the
runtime's default one (on TPU7x the compiler's matmuls want (16,128) tiles and otherwise copy every
stack before the layer loop; see `aoizora.models.wan.transformer.sharding`).

Every parameter and activation dimension has a *logical* name (``batch``, ``length``,
``kv_length``, ``heads``, ``head_dim``, ``embed``, ``mlp``, ``layers``, …); `logical_rules`
maps names to mesh axes for a strategy, so the model code never mentions mesh axes directly.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, PartitionSpec

from aoizora.errors import StrategyError
from aoizora.models.wan.transformer.config import VideoShape, WanConfig
from aoizora.models.wan.transformer.kernel_profiles import DEFAULT_KERNEL_PROFILE, KERNEL_PROFILES

MESH_AXES: tuple[str, ...] = ("data", "fsdp", "context", "tensor")
#: The mesh of a 2D context (``ulysses_ring``) strategy: ``context`` split into ring (outer) × Ulysses (inner).
ULYSSES_RING_MESH_AXES: tuple[str, ...] = ("data", "fsdp", "context_ring", "context_ulysses", "tensor")
ATTENTION_VARIANTS: tuple[str, ...] = ("allgather", "ulysses", "ring", "ulysses_ring")
WEIGHT_MODES: tuple[str, ...] = ("replicated", "gathered", "tensor", "gathered+tensor")
#: Forms of the ring's K/V rotation with the splash kernel (`attention._ring`): ``sequence_major``
#: rotates K/V in the model's (batch, length, heads, head_dim) layout and lays each step's K/V and
#: output out for the kernel; ``heads_major`` lays them out once and rotates the kernel's padded
#: heads-major K/V, the form of MaxDiffusion's ring kernels.
RING_LAYOUTS: tuple[str, ...] = ("sequence_major", "heads_major")
#: "splash-interpret" runs the splash kernel in the Pallas interpreter on any backend (tests).
KERNELS: tuple[str, ...] = ("auto", "xla", "splash", "splash-interpret")

AttentionVariant = Literal["allgather", "ulysses", "ring", "ulysses_ring"]
WeightMode = Literal["replicated", "gathered", "tensor", "gathered+tensor"]
Kernel = Literal["auto", "xla", "splash", "splash-interpret"]

#: Sequence alignment of each device's token shard for the splash kernel (its minimum block).
SPLASH_ALIGN = 128


@dataclasses.dataclass(frozen=True)
class SplashBlocks:
    """Block sizes of the splash attention kernel (jax.experimental.pallas splash_attention).

    `block_q` tiles the query length of every splash call (self- and cross-attention): each call
    pads its local queries to a multiple of it. `block_kv` and `block_kv_compute` tile the keys of
    self-attention (padded to a multiple of `block_kv`, padded keys masked); cross-attention keeps
    the key block the kernel picks for the text/image context. The kernel needs `block_kv` a
    multiple of `block_kv_compute`, itself a multiple of 128 lanes, and `block_q` a multiple of 8
    sublanes.
    """

    block_q: int
    block_kv: int
    block_kv_compute: int

    @property
    def compute_blocks_per_step(self) -> int:
        """The K/V compute sub-blocks each grid step of the kernel runs (block_kv / block_kv_compute)."""
        return max(1, self.block_kv // self.block_kv_compute)

    def describe(self) -> str:
        return f"{self.block_q}/{self.block_kv}/{self.block_kv_compute}"

    @classmethod
    def parse(cls, text: str) -> SplashBlocks:
        """The blocks `describe` writes as `text` (Q/KV/KV_COMPUTE)."""
        return cls(*(int(b) for b in text.split("/")))

    def reasons(self) -> list[str]:
        out = []
        if any(not isinstance(b, int) or b < 1 for b in (self.block_q, self.block_kv, self.block_kv_compute)):
            return [f"splash block sizes {self.describe()} must be positive integers"]
        if self.block_q % 8:
            out.append(f"splash block_q {self.block_q} is not a multiple of 8 (sublanes)")
        if self.block_kv_compute % SPLASH_ALIGN:
            out.append(f"splash block_kv_compute {self.block_kv_compute} is not a multiple of {SPLASH_ALIGN} (lanes)")
        if self.block_kv % self.block_kv_compute:
            out.append(f"splash block_kv {self.block_kv} is not a multiple of block_kv_compute {self.block_kv_compute}")
        return out


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
    #: ``ulysses_ring`` only: the Ulysses degree U of context = U × R (the ring degree R is the rest).
    context_ulysses: int = 1
    #: ``ulysses``/``ulysses_ring``: head-group chunks of the all-to-all and attention (1: one pass).
    ulysses_chunks: int = 1
    #: Splash kernel block sizes; None: chosen per call from the local lengths.
    splash_blocks: SplashBlocks | None = None
    #: Tile of the replicated stacked 16-bit layer matrices as handed to the program; None: the runtime's.
    weight_tile: tuple[int, int] | None = None
    #: The attention kernel the deployment runs, which costs its splash calls
    #: (`aoizora.models.wan.transformer.kernel_profiles`); the program is compiled with JAX's splash whatever it is.
    kernel_profile: str = DEFAULT_KERNEL_PROFILE
    #: libtpu's scoped-VMEM limit (KiB, `toolchain.SCOPED_VMEM_FLAG`) the program is compiled
    #: with, chosen with the splash blocks; None: libtpu's default
    scoped_vmem_kib: int | None = None
    #: ``ring``/``ulysses_ring`` with the splash kernel: the form of the K/V rotation (`RING_LAYOUTS`)
    ring_layout: str = "sequence_major"

    @property
    def two_d_context(self) -> bool:
        return self.attention == "ulysses_ring"

    @property
    def context_ring(self) -> int:
        """The ring degree R of a 2D context strategy (context // context_ulysses)."""
        return self.context // self.context_ulysses if self.context_ulysses > 0 else 0

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        return ULYSSES_RING_MESH_AXES if self.two_d_context else MESH_AXES

    @property
    def context_axes(self) -> tuple[str, ...]:
        """The mesh axes the sequence is sharded over, major first."""
        return ("context_ring", "context_ulysses") if self.two_d_context else ("context",)

    @property
    def ulysses_axis(self) -> tuple[str, int] | None:
        """(mesh axis, degree) of the Ulysses all-to-all, None when the variant has none."""
        if self.attention == "ulysses":
            return ("context", self.context)
        if self.two_d_context:
            return ("context_ulysses", self.context_ulysses)
        return None

    @property
    def mesh_shape(self) -> tuple[int, ...]:
        if self.two_d_context:
            return (self.data, self.fsdp, self.context_ring, self.context_ulysses, self.tensor)
        return (self.data, self.fsdp, self.context, self.tensor)

    @property
    def axis_sizes(self) -> dict[str, int]:
        return dict(zip(self.mesh_axes, self.mesh_shape, strict=True))

    @classmethod
    def from_axis_sizes(cls, sizes: dict[str, int], **fields: object) -> Strategy:
        """The strategy whose `axis_sizes` are `sizes` (4 axes, or the 5 of a 2D context mesh)."""
        sizes = {k: int(v) for k, v in sizes.items()}
        if "context_ring" in sizes or "context_ulysses" in sizes:
            ring, uly = sizes.pop("context_ring", 1), sizes.pop("context_ulysses", 1)
            sizes["context"] = ring * uly
            fields = dict(fields, context_ulysses=uly)
            fields.setdefault("attention", "ulysses_ring")
        return cls(**sizes, **fields)  # type: ignore[arg-type]  # the mesh's sizes and the caller's fields, by name

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

    # The text forms of a strategy, each written and read here: `key` (the label plans, caches, bench
    # cells and committed data name a strategy by) and `from_key`; `description` (a plan's `strategy`
    # object, which `aoizora run` and the export run) and `from_description`; `describe` (messages).
    # The optional fields are spelled once, in `STRATEGY_FIELDS`.

    def key(self) -> str:
        """The strategy's key: `axis=size,...` (axes larger than 1, or `single`), then `weights=`,
        `attn=` and each optional field that is not at its default, separated by ` | `."""
        mesh = ",".join(f"{a}={n}" for a, n in self.axis_sizes.items() if n > 1) or "single"
        parts = [mesh, f"weights={self.weights}", f"attn={self.attention}"]
        return " | ".join(parts + [f"{f.key}={f.show(v)}" for f, v in self._set_fields()])

    @classmethod
    def from_key(cls, key: str, kernel: Kernel = "auto") -> Strategy:
        """The strategy whose `key` is `key`, so a key recorded by a run (a bench cell, a Stage 1
        output) names the strategy it ran, whatever splash blocks and scoped-VMEM limit the current
        space would plan for it. Fields a key leaves out take their defaults (no blocks: the
        kernel's pick; no vmem: libtpu's default limit); `kernel` is not in a key."""
        mesh, *fields = (part.strip() for part in key.split("|"))
        try:
            sizes = {} if mesh == "single" else {a: int(n) for a, n in (f.split("=") for f in mesh.split(","))}
            values = dict(f.split("=", 1) for f in fields)
        except ValueError:
            raise StrategyError(f"{key!r} is not a strategy key (mesh axes as name=size, then fields as name=value "
                                f"separated by '|')") from None
        labels = {f.key: f for f in STRATEGY_FIELDS}
        axes = set(MESH_AXES) | set(ULYSSES_RING_MESH_AXES)
        if (set(values) - {"weights", "attn"} - set(labels) or not set(sizes) <= axes
                or values.get("attn") not in ATTENTION_VARIANTS or values.get("weights") not in WEIGHT_MODES):
            raise StrategyError(f"{key!r} is not a strategy key (mesh axes of {', '.join(sorted(axes))}, then "
                                f"weights, attn and optionally {', '.join(labels)})")
        try:
            optional = {labels[k].name: labels[k].read(v) for k, v in values.items() if k in labels}
            return cls.from_axis_sizes(sizes, attention=values["attn"], weights=values["weights"], kernel=kernel,
                                       **optional)
        except (TypeError, ValueError, IndexError):
            raise StrategyError(f"{key!r} is not a strategy key (blocks as Q/KV/KV_COMPUTE, weight_tile as RxC, "
                                f"chunks and vmem as integers)") from None

    def description(self, video: Sequence[int] | None = None,
                    kernel_tile: dict[str, Any] | None = None) -> dict[str, Any]:
        """The strategy as a plan's `strategy` object (JSON-ready): mesh, attention, weights, kernel
        and each optional field that is not at its default. A space adds what it knows besides:
        the `video` the strategy is planned for and the `kernel_tile` a custom kernel runs it with
        (`aoizora.models.wan.kernels.custom_tiles`); `from_description` reads neither."""
        out: dict[str, Any] = {"mesh": self.axis_sizes, "attention": self.attention, "weights": self.weights,
                               "kernel": self.kernel}
        if video is not None:
            out["video"] = list(video)
        for f in STRATEGY_FIELDS:
            value = getattr(self, f.name)
            if value != f.default:
                out[f.name] = f.to_json(value)
            if f.name == "kernel_profile" and kernel_tile is not None:
                out["kernel_tile"] = kernel_tile  # beside the profile whose tile it is, as plans hold it
        return out

    @classmethod
    def from_description(cls, description: dict[str, Any], kernel: Kernel = "auto") -> Strategy:
        """The strategy a plan describes (`plan.strategy`, as `description` writes it), to run the
        plan with; `kernel` replaces the description's own."""
        try:
            mesh, attention, weights = description["mesh"], description["attention"], description["weights"]
            optional = {f.name: f.from_json(description[f.name]) for f in STRATEGY_FIELDS if f.name in description}
            return cls.from_axis_sizes(mesh, attention=attention, weights=weights, kernel=kernel, **optional)
        except (KeyError, TypeError, ValueError) as exc:
            raise StrategyError(
                f"the plan's strategy is not a Wan strategy ({exc}); pass a plan of a Wan model") from None

    def describe(self) -> str:
        """The strategy in one line for messages: every mesh axis and choice, then the optional fields set."""
        text = (
            f"data={self.data} fsdp={self.fsdp} context={self.context} tensor={self.tensor} "
            f"attention={self.attention} weights={self.weights} kernel={self.kernel}"
        )
        if self.two_d_context:
            text += f" ulysses={self.context_ulysses} ring={self.context_ring}"
        return text + "".join(f" {f.text}={f.show(v)}" for f, v in self._set_fields())

    def _set_fields(self) -> list[tuple[StrategyField, Any]]:
        """The optional fields not at their defaults, with their values, in `STRATEGY_FIELDS` order."""
        return [(f, v) for f in STRATEGY_FIELDS if (v := getattr(self, f.name)) != f.default]


def describe_tile(tile: tuple[int, int]) -> str:
    return f"{tile[0]}x{tile[1]}"


def parse_tile(text: str) -> tuple[int, int]:
    """The tile `describe_tile` writes as `text` (RxC)."""
    rows_cols = [int(n) for n in text.split("x")]
    return (rows_cols[0], rows_cols[1])


def ring_layout(text: Any) -> str:
    """`text` as a ring layout; ValueError unless it is one of `RING_LAYOUTS` (a plan is data)."""
    if text not in RING_LAYOUTS:
        raise ValueError(f"ring_layout {text!r} is not one of {', '.join(RING_LAYOUTS)}")
    return str(text)


@dataclasses.dataclass(frozen=True)
class StrategyField:
    """An optional field of `Strategy` in its text forms. Its labels are those of the keys and
    plans on disk: the key's `kernel=` is the kernel profile (the kernel the deployment runs; the
    compiled kernel, `Strategy.kernel`, is a space-wide choice no key holds) and its `vmem=` the
    scoped-VMEM limit."""

    name: str  # the attribute, and its name in a description
    key: str  # its label in a key
    text: str  # its label in `Strategy.describe`
    default: Any  # the value a form leaves the field out at
    show: Callable[[Any], str]  # value -> its text in a key or `describe`
    read: Callable[[str], Any]  # text of a key -> value
    to_json: Callable[[Any], Any] = lambda v: v  # value -> its description entry
    from_json: Callable[[Any], Any] = lambda v: v  # description entry -> value


STRATEGY_FIELDS: tuple[StrategyField, ...] = (
    StrategyField("ulysses_chunks", "chunks", "chunks", 1, str, int, from_json=int),
    StrategyField("splash_blocks", "blocks", "blocks", None, SplashBlocks.describe, SplashBlocks.parse,
                  dataclasses.asdict, lambda b: SplashBlocks(**b) if b else None),
    StrategyField("weight_tile", "weight_tile", "weight_tile", None, describe_tile, parse_tile,
                  list, lambda t: (int(t[0]), int(t[1])) if t else None),
    StrategyField("kernel_profile", "kernel", "kernel_profile", DEFAULT_KERNEL_PROFILE, str, str),
    StrategyField("scoped_vmem_kib", "vmem", "scoped_vmem_kib", None, str, int,
                  from_json=lambda v: int(v) if v else None),
    StrategyField("ring_layout", "ring_layout", "ring_layout", "sequence_major", str, ring_layout,
                  from_json=ring_layout),
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
        "length": keep(*strategy.context_axes),
        "kv_length": None,
        "heads_act": keep("tensor"),
        "head_dim": None,
        "embed_act": None,
        "mlp_act": keep("tensor"),
        # weights
        "layers": None,
        "embed": keep("fsdp", *strategy.context_axes) if strategy.shards_embed else None,
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
    reasons = [f"{name} is {size!r}; it must be a positive integer"
               for name in ("data", "fsdp", "context", "tensor", "context_ulysses", "ulysses_chunks")
               if not isinstance(size := getattr(strategy, name), int) or size < 1]
    if reasons:
        return reasons
    return (_choice_reasons(strategy) + _mesh_reasons(strategy, batch, num_devices)
            + _head_reasons(strategy, config) + _kernel_and_weight_reasons(strategy, config)
            + _video_reasons(strategy, config, video))


def _choice_reasons(strategy: Strategy) -> list[str]:
    """Named choices that are not among the known ones."""
    reasons = []
    if strategy.attention not in ATTENTION_VARIANTS:
        reasons.append(f"unknown attention variant {strategy.attention!r}; choose one of {ATTENTION_VARIANTS}")
    if strategy.weights not in WEIGHT_MODES:
        reasons.append(f"unknown weight mode {strategy.weights!r}; choose one of {WEIGHT_MODES}")
    if strategy.kernel not in KERNELS:
        reasons.append(f"unknown attention kernel {strategy.kernel!r}; choose one of {KERNELS}")
    if strategy.kernel_profile not in KERNEL_PROFILES:
        reasons.append(f"unknown kernel profile {strategy.kernel_profile!r}; choose one of {tuple(KERNEL_PROFILES)}")
    if strategy.ring_layout not in RING_LAYOUTS:
        reasons.append(f"unknown ring layout {strategy.ring_layout!r}; choose one of {RING_LAYOUTS}")
    elif strategy.ring_layout != RING_LAYOUTS[0] and strategy.attention not in ("ring", "ulysses_ring"):
        reasons.append(f"ring_layout={strategy.ring_layout} is a form of ring attention; "
                       f"attention={strategy.attention} has no ring")
    return reasons


def _mesh_reasons(strategy: Strategy, batch: int, num_devices: int | None) -> list[str]:
    """The mesh against the slice, the batch, and the split of context into Ulysses × ring."""
    reasons = []
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
    if strategy.two_d_context and strategy.context % strategy.context_ulysses:
        reasons.append(
            f"2D context attention needs context={strategy.context} = Ulysses × ring, but "
            f"context_ulysses={strategy.context_ulysses} does not divide it"
        )
    elif not strategy.two_d_context and strategy.context_ulysses != 1:
        reasons.append(f"context_ulysses={strategy.context_ulysses} splits context only for attention='ulysses_ring'")
    return reasons


def _head_reasons(strategy: Strategy, config: WanConfig) -> list[str]:
    """Attention heads split over tensor, Ulysses and Ulysses chunks."""
    reasons = []
    heads = config.num_attention_heads
    uly = strategy.ulysses_axis
    if heads % strategy.tensor:
        reasons.append(f"{heads} attention heads are not divisible by tensor={strategy.tensor}")
    elif uly is not None and (heads // strategy.tensor) % uly[1]:
        reasons.append(
            f"Ulysses needs heads/tensor = {heads // strategy.tensor} divisible by {uly[0]}={uly[1]} "
            "(the all-to-all trades sequence shards for head shards)"
        )
    elif uly is not None and (heads // (strategy.tensor * uly[1])) % strategy.ulysses_chunks:
        reasons.append(
            f"{strategy.ulysses_chunks} Ulysses chunks need the heads/(tensor×Ulysses) = "
            f"{heads // (strategy.tensor * uly[1])} heads each device attends to divisible by the chunk count"
        )
    if uly is None and strategy.ulysses_chunks != 1:
        reasons.append(f"ulysses_chunks={strategy.ulysses_chunks} chunks an all-to-all that "
                       f"attention={strategy.attention!r} does not have")
    return reasons


def _kernel_and_weight_reasons(strategy: Strategy, config: WanConfig) -> list[str]:
    """Splash blocks and head size for the kernel; the dimensions the weight mode shards."""
    reasons = []
    if strategy.splash_blocks is not None:
        reasons.extend(strategy.splash_blocks.reasons())
        if strategy.kernel == "xla":
            reasons.append("splash block sizes are given but kernel='xla' does not use splash")
    if strategy.scoped_vmem_kib is not None and (not isinstance(strategy.scoped_vmem_kib, int)
                                                 or strategy.scoped_vmem_kib < 1):
        reasons.append(f"scoped_vmem_kib {strategy.scoped_vmem_kib!r} must be a positive number of KiB")
    if strategy.weight_tile is not None:
        tile = strategy.weight_tile
        if len(tile) != 2 or any(not isinstance(n, int) or n < 1 for n in tile):
            reasons.append(f"weight_tile {tile!r} must be two positive integers (second-minor, minor)")
        elif jnp.dtype(config.dtype).itemsize != 2:
            reasons.append(f"weight_tile is for 16-bit weights; this model's are {jnp.dtype(config.dtype).name}")
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
    return reasons


def _video_reasons(strategy: Strategy, config: WanConfig, video: VideoShape | None) -> list[str]:
    """The video's token count against the context split (none without a video)."""
    if video is None:
        return []
    try:
        tokens = video.tokens(config)
    except Exception as exc:  # ShapeError: report as a reason
        return [str(exc)]
    return [f"context={strategy.context} exceeds the {tokens} tokens of the video"] if strategy.context > tokens else []


def validate_strategy(strategy: Strategy, config: WanConfig, video: VideoShape | None = None,
                      batch: int = 2, num_devices: int | None = None) -> None:
    """Raise StrategyError listing every reason the strategy is illegal."""
    reasons = check_strategy(strategy, config, video, batch, num_devices)
    if reasons:
        raise StrategyError(f"illegal strategy ({strategy.describe()}): " + "; ".join(reasons))


def make_mesh(strategy: Strategy, devices: Sequence[object]) -> Mesh:
    """A Mesh with the strategy's axes (`Strategy.mesh_axes`: data, fsdp, context, tensor, or
    data, fsdp, context_ring, context_ulysses, tensor) over `devices` in the given order.

    The planner passes devices already in its chosen physical order; this function only reshapes.
    """
    devs = list(devices)
    if len(devs) != strategy.num_devices:
        raise StrategyError(
            f"strategy mesh {strategy.mesh_shape} needs {strategy.num_devices} devices, got {len(devs)}"
        )
    return Mesh(np.array(devs, dtype=object).reshape(strategy.mesh_shape), strategy.mesh_axes)


def check_mesh(strategy: Strategy, mesh: Mesh) -> None:
    """Raise StrategyError unless the mesh has the strategy's axis names and sizes."""
    shape = dict(mesh.shape)
    want = strategy.axis_sizes
    if set(shape) != set(want) or any(shape[a] != want[a] for a in want):
        raise StrategyError(f"mesh axes {shape} do not match the strategy's {want}")


def enumerate_strategies(
    config: WanConfig,
    video: VideoShape | None,
    num_devices: int,
    batch: int = 2,
    kernel: Kernel = "auto",
) -> list[Strategy]:
    """Every legal strategy on `num_devices`: all factorizations data×fsdp×context×tensor, the
    attention variants (only "allgather" when context is 1: the variants coincide; 2D context with
    every split `context_splits` gives) and weight modes, filtered by `check_strategy`. Ulysses
    chunking and splash block sizes stay at their defaults."""
    out: list[Strategy] = []

    def divisors(n: int) -> list[int]:
        return [d for d in range(1, n + 1) if n % d == 0]

    for data in divisors(num_devices):
        for fsdp in divisors(num_devices // data):
            for context in divisors(num_devices // (data * fsdp)):
                tensor = num_devices // (data * fsdp * context)
                for attention in (ATTENTION_VARIANTS if context > 1 else ("allgather",)):
                    for uly in context_splits(context, attention):
                        for weights in WEIGHT_MODES:
                            s = Strategy(data, fsdp, context, tensor, attention, weights, kernel,  # type: ignore[arg-type]  # names from ATTENTION_VARIANTS, WEIGHT_MODES
                                         context_ulysses=uly)
                            if not check_strategy(s, config, video, batch, num_devices):
                                out.append(s)
    return out


def context_splits(context: int, attention: str) -> list[int]:
    """The Ulysses degrees U worth enumerating for a context degree: for 2D context attention
    every U with U ≥ 2 and R = context/U ≥ 2 (U = 1 runs as ``ring``, U = context as ``ulysses``:
    the same collectives and kernels); [1] for every other variant."""
    if attention != "ulysses_ring":
        return [1]
    return [u for u in range(2, context // 2 + 1) if context % u == 0 and context // u >= 2]


#: Ulysses chunk counts a strategy space enumerates (where `check_strategy` allows them).
ULYSSES_CHUNK_CHOICES: tuple[int, ...] = (1, 2, 4)
