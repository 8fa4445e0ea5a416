"""The tile MaxDiffusion's own splash kernels run a plan with (``maxdiffusion-custom`` and its
fixed-m form).

aoizora compiles every program with JAX's splash kernel, at blocks that kernel accepts
(`space.space.WanSpace._with_blocks`); MaxDiffusion's custom kernels take other tiles (its published
ones have block_q up to 9,472, over what JAX's splash compiles on one TensorCore). A custom-kernel
plan therefore carries a second tile, the one the custom kernel is run with, which the export
writes into ``flash_block_sizes`` with the kernel's own keys (``block_kv_compute_in``,
``heads_per_tile``, ``vmem_limit_bytes``). It is chosen, in this order:

1. **Measured**: where per-tile step times are published for this kernel on this generation at
   the same per-call sequence length, the fastest tile (`MEASURED_STEPS`).
2. **The recipe's tile**: where a documented deployment of this kernel runs the same variant at
   the same per-call length on this generation (`experts.TODAYS_WAN_EXPERTS`), its tile: the
   floor, never replaced by a tile nobody measured there.
3. **Least padded query work** among the kernel's published tiles on the generation: the kernel
   pads the queries of a call up to a multiple of block_q and computes the ragged tail of the keys
   exactly (``last_compute_body_*`` slices the last ``kv_seq_len % block_kv_compute`` keys,
   src/maxdiffusion/kernels/custom_splash_attention.py @ 7cfb8801), so among tiles that fit the
   kernel, the one whose block_q wastes fewest padded query rows does the least work.
4. Otherwise the blocks the program was compiled with, with the kernel's inner block.

Every tile kept satisfies the kernel's own constraints: ``block_kv % block_kv_compute == 0``
(asserted by the kernel), ``block_kv_compute`` a multiple of ``block_kv_compute_in`` (its inner
loop steps by it) and ``block_kv_compute_in`` at most 1,024 (`CUSTOM_INNER_BLOCK`).

**What the plain kernel's tile sensitivity is not.** Its author measures 2.733 s/step at
9,472/1,024 and ~3.14 s/step at 6,400/2,048 (15% slower) on v7x-8 for Wan 2.2 720p/81
(dp2 × ring2 × Ulysses 2; per call 37,800 queries and keys), while fixed-m is flat across both.
The data rule out, as the mechanism: padding (queries padded 1.6% at 6,400 against 0.2% at 9,472,
keys not padded: ≤1.4% of the work); the online softmax's rescale count (both tiles rescale every
``block_kv_compute_in`` = 1,024 keys, the same count per query); grid-step overhead (6,400/2,048
has fewer steps, 6 × 19 against 4 × 37 per head and hop, which would favour it); and K/V
re-streaming (6 against 4 query blocks re-read the hop's K/V, 20 heads x 37,800 x 128 in bf16,
twice more: ~0.8 GB, ~0.2 ms at a TPU7x core's half of the chip's 7.38 TB/s, data/hardware.json,
against a 22.65 ms hop). What remains is inside the kernel's online-softmax chain
(fixed-m removes it and the sensitivity with it), which no published figure isolates; the
profiles stay tile-independent (`kernel_profiles`), and measured per-tile steps choose the tile.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from aoizora.models.wan.kernels.experts import TODAYS_WAN_EXPERTS, WanExpert
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy

#: the largest inner K/V block MaxDiffusion's custom kernels are run with (its recipes: 1,024 or
#: 256; end_to_end/tpu/run_wan_fast_inference.sh @ 7cfb8801, tpu-recipes run_recipe.sh files)
CUSTOM_INNER_BLOCK = 1024
_MEASURED_SOURCE = ("github.com/AI-Hypercomputer/maxdiffusion commit 8dd630549ce1cb55e167a66102dcc3aef4cc1926 "
                    "(message: 720p 81f T2V, 40 steps, v7x-8, dp2 x (ring2 x uly2): ulysses_ring_custom 9472/1024 "
                    "2.733 s/step, ~3.14 s/step at 6400/2048; ulysses_ring_custom_fixed_m 6400/2048 2.633 s/step)")


@dataclass(frozen=True)
class MeasuredStep:
    """A published step time of a custom kernel at one tile."""

    kernel_profile: str
    generation: str
    variant: str
    call_length: int  # queries (and keys) per kernel call
    blocks: SplashBlocks
    step_seconds: float
    options: tuple[tuple[str, int], ...]
    source: str = _MEASURED_SOURCE


_FAST_OPTIONS = (("block_kv_compute_in", 1024), ("heads_per_tile", 1), ("vmem_limit_bytes", 67108864))
#: Wan 2.2 T2V A14B at 720p/81 has 75,600 tokens; the ring of 2 gives each call 37,800
MEASURED_STEPS: tuple[MeasuredStep, ...] = (
    MeasuredStep("maxdiffusion-custom", "tpu7x", "ulysses_ring", 37800, SplashBlocks(9472, 1024, 1024), 2.733,
                 _FAST_OPTIONS),
    MeasuredStep("maxdiffusion-custom", "tpu7x", "ulysses_ring", 37800, SplashBlocks(6400, 2048, 2048), 3.14,
                 _FAST_OPTIONS),
    MeasuredStep("maxdiffusion-custom-fixed-m", "tpu7x", "ulysses_ring", 37800, SplashBlocks(6400, 2048, 2048),
                 2.633, _FAST_OPTIONS),
)


@dataclass(frozen=True)
class KernelTile:
    """The tile a custom kernel runs a strategy with, its own keys, and why it was chosen."""

    blocks: SplashBlocks
    block_kv_compute_in: int
    heads_per_tile: int
    vmem_limit_bytes: int | None
    chosen_by: str
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"block_q": self.blocks.block_q, "block_kv": self.blocks.block_kv,
                               "block_kv_compute": self.blocks.block_kv_compute,
                               "block_kv_compute_in": self.block_kv_compute_in, "heads_per_tile": self.heads_per_tile}
        if self.vmem_limit_bytes is not None:
            out["vmem_limit_bytes"] = self.vmem_limit_bytes
        out["chosen_by"] = self.chosen_by
        if self.source:
            out["source"] = self.source
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> KernelTile:
        return cls(SplashBlocks(int(data["block_q"]), int(data["block_kv"]), int(data["block_kv_compute"])),
                   int(data["block_kv_compute_in"]), int(data["heads_per_tile"]),
                   int(data["vmem_limit_bytes"]) if data.get("vmem_limit_bytes") is not None else None,
                   str(data.get("chosen_by", "")), str(data.get("source", "")))


def call_length(strategy: Strategy, tokens: int) -> int:
    """Queries (and keys) per custom-kernel call: Ulysses gathers the sequence, a ring splits it."""
    ring = strategy.context // strategy.context_ulysses if strategy.attention == "ulysses_ring" else 1
    return math.ceil(tokens / ring)


def fits_kernel(blocks: SplashBlocks, inner: int) -> bool:
    """The custom kernel's own constraints on a tile (see the module docstring)."""
    return (blocks.block_kv % blocks.block_kv_compute == 0 and blocks.block_kv_compute % inner == 0
            and 0 < inner <= CUSTOM_INNER_BLOCK)


def _tile(blocks: SplashBlocks, options: tuple[tuple[str, int], ...], why: str, source: str = "") -> KernelTile:
    o = dict(options)
    return KernelTile(blocks, int(o.get("block_kv_compute_in", min(blocks.block_kv_compute, CUSTOM_INNER_BLOCK))),
                      int(o.get("heads_per_tile", 1)), o.get("vmem_limit_bytes"), why, source)


def _row_length(row: WanExpert, tokens: int) -> int:
    devices = row.meshes[0][0] if row.meshes else 8
    return call_length(row.strategy(devices), tokens)


def published_steps(strategy: Strategy, tokens: int, generation: str | None) -> list[MeasuredStep]:
    """The published step times of the strategy's kernel, variant and per-call length on `generation`."""
    length = call_length(strategy, tokens)
    return [m for m in MEASURED_STEPS if (m.kernel_profile, m.generation, m.variant, m.call_length)
            == (strategy.kernel_profile, generation, strategy.attention, length)]


def custom_kernel_tile(strategy: Strategy, tokens: int, generation: str | None) -> KernelTile | None:
    """The tile MaxDiffusion's custom kernel runs `strategy` with (None for other kernels); `tokens`
    is the video's sequence length, the published rows' too (they are all 720p/81 frames)."""
    profile = strategy.kernel_profile
    if not profile.startswith("maxdiffusion-custom"):
        return None
    length = call_length(strategy, tokens)
    measured = published_steps(strategy, tokens, generation)
    if measured:
        best = min(measured, key=lambda m: m.step_seconds)
        return _tile(best.blocks, best.options, f"the fastest published step at {length} tokens per call "
                                                f"({best.step_seconds} s/step)", best.source)
    rows = [r for r in TODAYS_WAN_EXPERTS if r.kernel_profile == profile and generation in r.generations
            and r.splash_blocks is not None
            and fits_kernel(r.splash_blocks, dict(r.kernel_options).get("block_kv_compute_in", CUSTOM_INNER_BLOCK))]
    same = [r for r in rows if r.attention == strategy.attention and _row_length(r, tokens) == length]
    if same:
        r = same[0]
        return _tile(r.splash_blocks, r.kernel_options,  # type: ignore[arg-type]  # `rows` have splash blocks
                     f"the tile {r.name} runs at the same {length} tokens per call", r.source)
    if rows:
        def padded(r: WanExpert) -> tuple[int, int]:
            bq = r.splash_blocks.block_q  # type: ignore[union-attr]  # `rows` have splash blocks
            return math.ceil(length / bq) * bq, -bq
        r = min(rows, key=padded)
        return _tile(r.splash_blocks, r.kernel_options,  # type: ignore[arg-type]  # `rows` have splash blocks
                     f"least padded query work at {length} tokens per call among the {profile} tiles published "
                     f"for {generation} ({r.name}: {padded(r)[0] - length} padded rows)", r.source)
    if strategy.splash_blocks is None:
        return None
    return _tile(strategy.splash_blocks, (), f"no {profile} tile is published for {generation}: the blocks the "
                                             "program was compiled with")
