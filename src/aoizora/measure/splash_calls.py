"""The splash calls a Wan strategy runs on one device, and the tiles the tile search weighs for them.

A strategy's self-attention runs one splash call per layer on each device, over the local batch
(`splash_tiles.local_batch`), the heads a device holds (the model's heads over the tensor axis,
and over the Ulysses degree where the all-to-all trades sequence for heads) and the local query
and key lengths (`splash_tiles.self_attention_lengths`); ring and 2D-context calls also save the
log-sum-exp for the ring's merge. `splash_cases` lists, for the strategies of a space, each
distinct call with every (tile, scoped-VMEM limit) of `splash_tiles.splash_tile_candidates`, and
what JAX's splash model predicts for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from aoizora.models.wan.kernels.splash_tiles import (
    local_batch,
    self_attention_lengths,
    splash_call_seconds,
    splash_tile_candidates,
)
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy

if TYPE_CHECKING:
    from aoizora.models.wan.space.space import WanSpace
    from aoizora.topology import HardwareProfile


@dataclass(frozen=True)
class SplashCall:
    """One device's self-attention splash call: `batch` × `heads` maps of `lq` queries and `lk` keys."""

    batch: int
    heads: int
    lq: int
    lk: int
    head_dim: int
    residuals: bool

    def label(self) -> str:
        return (f"b{self.batch} h{self.heads} q{self.lq} k{self.lk} d{self.head_dim}"
                f"{' lse' if self.residuals else ''}")

    def to_json(self) -> dict[str, Any]:
        return {"batch": self.batch, "heads": self.heads, "lq": self.lq, "lk": self.lk, "head_dim": self.head_dim,
                "residuals": self.residuals}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SplashCall:
        return cls(int(d["batch"]), int(d["heads"]), int(d["lq"]), int(d["lk"]), int(d["head_dim"]),
                   bool(d["residuals"]))


@dataclass(frozen=True)
class SplashCase:
    """A splash call at one tile and scoped-VMEM limit (KiB; None: libtpu's default)."""

    call: SplashCall
    blocks: SplashBlocks
    limit_kib: int | None

    def predicted_seconds(self, hw: HardwareProfile) -> float:
        """JAX's splash model for the whole call (`splash_tiles.splash_call_seconds` over its maps)."""
        return splash_call_seconds(hw, self.call.lq, self.call.lk, self.call.head_dim, self.blocks,
                                   maps=self.call.batch * self.call.heads)

    def to_json(self) -> dict[str, Any]:
        return {**self.call.to_json(), "blocks": self.blocks.describe(), "limit_kib": self.limit_kib}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> SplashCase:
        return cls(SplashCall.from_json(d), SplashBlocks.parse(d["blocks"]),
                   None if d.get("limit_kib") is None else int(d["limit_kib"]))


def strategy_splash_call(space: WanSpace, strategy: Strategy) -> SplashCall:
    """The self-attention splash call one device runs under `strategy` in `space`."""
    config = space.config
    lq, lk = self_attention_lengths(strategy, space.video.tokens(config))
    ulysses = strategy.ulysses_axis
    heads = config.num_attention_heads // strategy.tensor // (ulysses[1] if ulysses else 1)
    return SplashCall(local_batch(strategy, space.batch), heads, lq, lk, config.attention_head_dim,
                      strategy.attention in ("ring", "ulysses_ring") and strategy.context > 1)


def splash_cases(space: WanSpace, strategies: list[Strategy]) -> list[SplashCase]:
    """Every distinct (call, tile, limit) the tile search weighs for the strategies' splash calls
    (those whose attention runs JAX's splash kernel), in the order first met."""
    seen: dict[SplashCase, None] = {}
    tokens = space.video.tokens(space.config)
    for st in strategies:
        if st.kernel == "xla" or space.generation is None:
            continue
        call = strategy_splash_call(space, st)
        for blocks, limit in splash_tile_candidates(st, tokens, space.batch, space.generation,
                                                    fixed_limit_kib=space.scoped_vmem_kib):
            seen.setdefault(SplashCase(call, blocks, limit), None)
    return list(seen)
