"""Splash block sizes fitted to a strategy's local lengths and to the chip's VMEM.

Every iteration of the splash kernel's grid (one per batch, head, Q block and K/V block) pays a
fixed cost, and K/V are streamed from HBM once per Q block, so a call runs fastest with the fewest,
largest blocks. Two things bound them: the blocks must tile the local lengths (a call pads its
queries to a multiple of block_q and its keys to a multiple of block_kv, and computes the padding),
and one Q block's working set must fit the compiler's scoped VMEM. Without blocks of its own a call
takes the kernel's per-call pick, the largest of 512/256/128 query rows and 1,024/…/128 keys
dividing the lengths (no padding, but many small blocks at video lengths).

`fitted_splash_blocks` picks, for the lengths of a strategy's self-attention calls, the fewest Q
blocks no larger than the largest block_q the generation's compiler accepts at the strategy's local
batch (`HardwareProfile.splash_max_block_q`, measured by compiling) and the fewest K/V blocks of at
most `LARGE_BLOCK_KV` keys, Q blocks rounded up to 128 rows and K/V blocks to `KV_ALIGN` keys, so
that padding stays below that per block and the K/V compute sub-block (the width of the score
tile the MXU computes) is never narrower than the widest MXU. The kernel's VMEM working set grows
with the local batch (it is vmapped over it) and with the call's query and key lengths, so the
limit is measured at `SPLASH_LIMIT_LENGTH` queries and keys and holds for calls up to that length;
longer calls keep the kernel's per-call pick.
measured rule of `aoizora.models.wan.kernels.vmem`; the fitted blocks do not use it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from aoizora.models.wan.transformer.strategy import SPLASH_ALIGN, SplashBlocks, Strategy, padded_length
from aoizora.toolchain import LoweredCompile, compile_lowered

if TYPE_CHECKING:
    from aoizora.topology import HardwareProfile

#: The largest K/V block and its compute sub-block the fitted blocks use: MaxDiffusion's large splash
#: blocks (AI-Hypercomputer/maxdiffusion src/maxdiffusion/configs/base_wan_14b.yml, flash_block_sizes
#: "Use on v6e": block_kv 2048, block_kv_compute 1024; the same in its TPU7x benchmark scripts).
#: `benchmarks/hardware/splash_vmem.py` measures each generation's query-row limit with them.
LARGE_BLOCK_KV = 2048
LARGE_BLOCK_KV_COMPUTE = 1024
#: the query and key length at which `splash_max_block_q` is measured (40 blocks of 2,048 keys;
#: Wan 14B at 720p, 81 frames attends 75,776 padded tokens)
SPLASH_LIMIT_LENGTH = 40 * LARGE_BLOCK_KV
#: K/V blocks are multiples of the widest MXU (256 on v6e and TPU7x: jax-ml/jax
#: jax/_src/pallas/mosaic/tpu_info.py @ 990e6a0b84138346e6a38785412f36356e0e5dc3, MXU_COLUMN_SIZE_GEN_GE_6),
#: so that their compute sub-block, a divisor, can be too
KV_ALIGN = 256


def _round_up(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def self_attention_lengths(strategy: Strategy, tokens: int) -> tuple[int, int]:
    """(queries, keys) of each self-attention splash call one device runs under the strategy."""
    padded = padded_length(tokens, strategy, splash=True)
    if strategy.context == 1:
        return padded, padded
    span = {"allgather": padded // strategy.context, "ulysses": padded, "ring": padded // strategy.context,
            "ulysses_ring": padded // max(strategy.context_ring, 1)}[strategy.attention]
    return span, (padded if strategy.attention == "allgather" else span)


def local_batch(strategy: Strategy, batch: int) -> int:
    """The batch one device runs (the CFG batch split over data × fsdp)."""
    return max(1, -(-batch // strategy.batch_degree))


def _fewest_blocks(length: int, cap: int, unit: int) -> int:
    """The smallest `unit`-multiple block of at most `cap` (a multiple of `unit`) that tiles
    `length` in the fewest blocks."""
    count = -(-length // cap)
    return _round_up(-(-length // count), unit)


def _largest_dividing(n: int, cap: int, unit: int) -> int:
    """The largest multiple of `unit` that is at most `cap` and divides `n` (a multiple of `unit`)."""
    return max(b for b in range(unit, min(cap, n) + 1, unit) if n % b == 0)


def fitted_splash_blocks(strategy: Strategy, tokens: int, batch: int,
                         max_block_q: dict[int, int]) -> SplashBlocks | None:
    """The splash blocks for the strategy's self-attention calls over `tokens` tokens with a CFG
    batch of `batch`, on a generation whose compiler accepts Q blocks up to `max_block_q[local
    batch]` rows (see the module docstring); None when that limit was not measured for the local
    batch or the calls are longer than the length it was measured at."""
    cap_q = max_block_q.get(local_batch(strategy, batch))
    lq, lk = self_attention_lengths(strategy, tokens)
    if cap_q is None or max(lq, lk) > SPLASH_LIMIT_LENGTH:
        return None
    block_q = _fewest_blocks(lq, cap_q // SPLASH_ALIGN * SPLASH_ALIGN, SPLASH_ALIGN)
    block_kv = _fewest_blocks(lk, LARGE_BLOCK_KV, KV_ALIGN)
    return SplashBlocks(block_q, block_kv, _largest_dividing(block_kv, LARGE_BLOCK_KV_COMPUTE, KV_ALIGN))


def compile_splash_call(topology: str, batch: int, lq: int, lk: int, blocks: SplashBlocks,
                        heads: int = 4, head_dim: int = 128, scoped_vmem_limit_kib: int | None = None,
                        compile_with: LoweredCompile = compile_lowered) -> None:
    """Compile the model's splash call (with log-sum-exp residuals, the ring variant's larger
    working set) alone for one compile-only device of `topology`: `batch` × `lq` queries against
    `lk` keys in bf16. libtpu's refusal (e.g. "CompileTimeScopedVmemOom" when a block's working
    set overflows the scoped VMEM) propagates as the compiler raised it.

    `scoped_vmem_limit_kib`: the scoped VMEM limit the compile uses (libtpu's
    `SCOPED_VMEM_FLAG`, passed as a compiler option of this compile only, so other
    compiles of the process keep theirs); None: libtpu's default for the generation.
    `compile_with(lowered, flags)` compiles the lowered call (`aoizora.stage2.compiling.cached_compile`
    reads a compile cache first)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from aoizora.models.wan.transformer.attention import splash_attention
    from aoizora.toolchain import SCOPED_VMEM_FLAG, CompilerFlags, compile_only_devices

    device = compile_only_devices(topology)[:1]
    sharding = NamedSharding(Mesh(np.array(device), ("x",)), PartitionSpec())
    fn = jax.jit(lambda q, k, v: splash_attention(q, k, v, None, residuals=True, block_q=blocks.block_q,
                                                  block_kv=blocks.block_kv, block_kv_compute=blocks.block_kv_compute),
                 in_shardings=(sharding,) * 3)
    q = jax.ShapeDtypeStruct((batch, lq, heads, head_dim), jnp.bfloat16)
    kv = jax.ShapeDtypeStruct((batch, lk, heads, head_dim), jnp.bfloat16)
    lowered = fn.lower(q, kv, kv)
    flags = None if scoped_vmem_limit_kib is None else CompilerFlags(((SCOPED_VMEM_FLAG,
                                                                       str(int(scoped_vmem_limit_kib))),))
    compile_with(lowered, flags)


#: The raised scoped-VMEM limits the tile search tries (KiB): those MaxDiffusion's recipes run with
#: (AI-Hypercomputer/tpu-recipes inference/trillium/MaxDiffusion/Wan2.x/Wan2.2-T2V/run_recipe.sh @
#: 929aa28627f5b205a7d507fd3449f7378c65bddc: 32768; AI-Hypercomputer/maxdiffusion
#: end_to_end/tpu/run_wan_fast_inference.sh @ 7cfb8801d41d1728f0232cd7ee59e900a151fecf: 65536)
RAISED_SCOPED_VMEM_KIB: tuple[int, ...] = (32768, 65536)
#: (largest block_kv, largest block_kv_compute) pairs the search tries: the fitted blocks' and
#: MaxDiffusion's (base_wan_14b.yml's 2048/1024; its v7 recipes' 2048/2048 and 1024/1024)
KV_TILE_CAPS: tuple[tuple[int, int], ...] = ((2048, 1024), (2048, 2048), (1024, 1024))
#: MaxDiffusion's documented block_q values, tried as they are where they fit (aoizora.models.wan.kernels.experts)
EXPERT_BLOCK_Q: tuple[int, ...] = (3024, 3328, 4864, 6400, 8448, 9472)
#: the largest block_q the search considers (the rule was measured up to 9,472 rows)
MAX_SEARCHED_BLOCK_Q = 9472


def splash_call_seconds(hw: HardwareProfile, lq: int, lk: int, head_dim: int, blocks: SplashBlocks,
                        maps: int = 1) -> float:
    """JAX's splash cost model (`HardwareProfile.roofline_seconds`) for a call over `maps` maps
    (samples x heads; by default one) of `lq` queries and `lk` keys, padded to the blocks: the
    padded score matrix's MXU and vector work, K/V streamed once per Q block, one fixed cost per
    grid step, and where the kernel was measured (v5e) the part of each step's chain its K/V
    compute sub-blocks leave un-overlapped, the part of its K/V re-reads nothing hides, and a
    fixed cost per call. A tile's cost relative to
    another's does not depend on the number of maps (every term but the call's, the same for
    every tile, scales with it)."""
    from aoizora.models.wan.transformer.attention import splash_cost, splash_grid_steps, splash_kv_stream_bytes
    from aoizora.topology import KernelWork

    lqp, lkp = _round_up(lq, blocks.block_q), _round_up(lk, blocks.block_kv)
    flops, hbm = splash_cost(maps, lqp, lkp, head_dim, 2, False, blocks.block_q)
    work = KernelWork(matmul_dim=head_dim, score_elements=flops / (4.0 * head_dim),
                      grid_steps=splash_grid_steps(maps, lqp, lkp, blocks.block_q, blocks.block_kv),
                      compute_blocks_per_step=blocks.compute_blocks_per_step,
                      kv_stream_bytes=splash_kv_stream_bytes(maps, lqp, lkp, head_dim, 2, blocks.block_q))
    return hw.roofline_seconds(flops, hbm, work)


#: the kernel profiles whose ring and 2D-context plans the export runs on MaxDiffusion's ring kernel
#: (``tokamax_ring`` / ``ulysses_ring``: `aoizora.models.maxdiffusion.overrides.VARIANTS`)
RING_KERNEL_PROFILES: tuple[str, ...] = ("jax-splash", "tokamax-splash")


def runs_maxdiffusion_ring(strategy: Strategy) -> bool:
    """Whether the strategy's export runs MaxDiffusion's ring kernel, which needs more scoped VMEM
    than JAX's splash at the same tile (`aoizora.models.wan.kernels.vmem`, kernel "maxdiffusion_ring")."""
    return (strategy.context > 1 and strategy.attention in ("ring", "ulysses_ring")
            and strategy.kernel_profile in RING_KERNEL_PROFILES and strategy.kernel != "xla")


def ring_kernel_admits(hw: HardwareProfile, nb: int, blocks: SplashBlocks, limit_kib: int | None) -> bool:
    """Whether MaxDiffusion's ring kernel runs the tile at the limit (KiB; None: libtpu's default):
    its rule's verdict, or True where that rule was not measured (generation or local batch)."""
    from aoizora.models.wan.kernels.vmem import splash_blocks_fit

    return splash_blocks_fit(hw, nb, blocks, limit_kib, kernel="maxdiffusion_ring") is not False


def ring_fitted_blocks(strategy: Strategy, tokens: int, batch: int, max_block_q: dict[int, int],
                       hw: HardwareProfile | None) -> SplashBlocks | None:
    """`fitted_splash_blocks` at libtpu's default limit, for a strategy whose export runs
    MaxDiffusion's ring kernel with block_q lowered (fewest Q blocks again) until that kernel's rule
    for the generation `hw` admits the tile too; None where no blocks are fitted or no block_q is
    admitted."""
    fitted = fitted_splash_blocks(strategy, tokens, batch, max_block_q)
    if fitted is None or hw is None or not runs_maxdiffusion_ring(strategy):
        return fitted
    nb = local_batch(strategy, batch)
    lq, _ = self_attention_lengths(strategy, tokens)
    for cap in range(fitted.block_q // SPLASH_ALIGN * SPLASH_ALIGN, 0, -SPLASH_ALIGN):
        tile = SplashBlocks(_fewest_blocks(lq, cap, SPLASH_ALIGN), fitted.block_kv, fitted.block_kv_compute)
        if tile.block_q <= fitted.block_q and ring_kernel_admits(hw, nb, tile, None):
            return tile
    return None


def searched_splash_tile(strategy: Strategy, tokens: int, batch: int, generation: str,
                         head_dim: int = 128, fixed_limit_kib: int | None = None, *,
                         hw: HardwareProfile | None = None) -> tuple[SplashBlocks, int | None] | None:
    """The splash tile and scoped-VMEM limit (KiB; None: libtpu's default) under which the
    strategy's self-attention calls cost least in JAX's splash model, without a compile: the
    cheapest of `splash_tile_candidates` (the first of equals, so a tie keeps the default-limit
    blocks). A raised limit is chosen only when its tile costs less than the default-limit blocks
    by more than the splash model's measured error (`HardwareProfile.splash_model_error`; any
    amount where the kernel was not measured): on the chip the raised limit also changes the rest
    of the program, by -10 % to +24 % by strategy and size, which the model does not predict, so
    a gain it cannot resolve is not worth that (Stage 2 checks a raised limit the plan would keep
    by a compile at it: `aoizora.stage2.limit_check`). None where no limit was measured for the
    call. `hw`: the generation's profile to cost the tiles with (default: its own, `hardware_profile`)."""
    from aoizora.topology import hardware_profile

    hw = hw if hw is not None else hardware_profile(generation)
    candidates = splash_tile_candidates(strategy, tokens, batch, generation, fixed_limit_kib)
    if not candidates:
        return None
    lq, lk = self_attention_lengths(strategy, tokens)

    def cost(tile: SplashBlocks) -> float:
        return splash_call_seconds(hw, lq, lk, head_dim, tile)

    if fixed_limit_kib is not None:
        return min((tile for tile, _ in candidates), key=cost), fixed_limit_kib
    best, best_cost = candidates[0], cost(candidates[0][0])
    default_cost = best_cost
    for tile, limit in candidates[1:]:
        if cost(tile) < best_cost * (1 - 1e-9):
            best, best_cost = (tile, limit), cost(tile)
    if best_cost >= default_cost * (1 - (hw.splash_model_error or 0.0)):
        return candidates[0]
    return best


def splash_tile_candidates(strategy: Strategy, tokens: int, batch: int, generation: str,
                           fixed_limit_kib: int | None = None) -> list[tuple[SplashBlocks, int | None]]:
    """The (tile, scoped-VMEM limit KiB or None for libtpu's default) pairs the tile search weighs
    for the strategy's self-attention calls, in the order it weighs them; empty where no limit was
    measured for the call.

    The candidates: the blocks fitted at libtpu's default limit (`fitted_splash_blocks`, whose
    limit was bisected by compiling), and at each raised limit of `RAISED_SCOPED_VMEM_KIB` the
    chip allows, for each K/V cap of `KV_TILE_CAPS`, the fewest Q blocks whose tile the measured
    VMEM rule (`aoizora.models.wan.kernels.vmem.splash_blocks_fit`) admits, and MaxDiffusion's own block_q
    values where the rule admits them. A strategy whose export runs MaxDiffusion's ring kernel
    (`runs_maxdiffusion_ring`) takes only tiles that kernel's rule admits too, at every limit (at
    the default limit: `ring_fitted_blocks`).

    `fixed_limit_kib`: a limit the plan's compiler flags fix (the user's own), under which every
    compile runs. The candidates are then at that limit alone: the default-limit blocks unless the
    rule refuses them there, and that limit's tiles. Where no tile is left, the default-limit
    blocks alone, at that limit, and the compile decides."""
    from aoizora.topology import hardware_profile

    hw = hardware_profile(generation)
    fitted = ring_fitted_blocks(strategy, tokens, batch, hw.splash_max_block_q, hw)
    if fitted is None:
        return []
    lq, lk = self_attention_lengths(strategy, tokens)
    return list(_tile_candidates(generation, fitted, lq, lk, local_batch(strategy, batch),
                                 runs_maxdiffusion_ring(strategy), fixed_limit_kib))


@functools.lru_cache(maxsize=4096)
def _tile_candidates(generation: str, fitted: SplashBlocks, lq: int, lk: int, nb: int, ring: bool,
                     fixed_limit_kib: int | None) -> tuple[tuple[SplashBlocks, int | None], ...]:
    """`splash_tile_candidates` from the default-limit blocks on: it depends on the call's lengths,
    local batch and kernel alone, which many strategies of a space share (a space of 600
    strategies searched ~330,000 tiles through the VMEM rule, 2.3 s of the planning process's
    time before any lowering, for a few dozen distinct calls)."""
    from aoizora.models.wan.kernels.vmem import effective_limit_kib, splash_blocks_fit
    from aoizora.topology import hardware_profile

    hw = hardware_profile(generation)

    def admitted(tile: SplashBlocks, limit: int) -> bool:
        return bool(splash_blocks_fit(hw, nb, tile, limit)) and (not ring or ring_kernel_admits(hw, nb, tile, limit))

    if fixed_limit_kib is not None:
        tiles = list(_tiles_at_limit(lq, lk, fixed_limit_kib, admitted))
        if splash_blocks_fit(hw, nb, fitted, fixed_limit_kib) is not False:
            tiles.insert(0, fitted)  # first: a tie keeps the default-limit blocks
        return tuple((tile, fixed_limit_kib) for tile in (tiles or [fitted]))

    candidates: list[tuple[SplashBlocks, int | None]] = [(fitted, None)]
    default = effective_limit_kib(hw)
    for limit in RAISED_SCOPED_VMEM_KIB:
        raised = effective_limit_kib(hw, limit)
        if default is None or raised is None or raised <= default:
            continue  # the chip gives no more than the default
        candidates.extend((tile, limit) for tile in _tiles_at_limit(lq, lk, limit, admitted))
    return tuple(candidates)


def _tiles_at_limit(lq: int, lk: int, limit: int,
                    admitted: Callable[[SplashBlocks, int], bool]) -> Iterator[SplashBlocks]:
    """The tiles searched at one scoped-VMEM limit: for each K/V cap of `KV_TILE_CAPS`, the fewest
    Q blocks of a tile `admitted` there, and MaxDiffusion's own block_q values that are."""
    for cap_kv, cap_kvc in KV_TILE_CAPS:
        block_kv = _fewest_blocks(lk, cap_kv, KV_ALIGN)
        kvc = _largest_dividing(block_kv, cap_kvc, KV_ALIGN)
        fits = [q for q in range(SPLASH_ALIGN, min(_round_up(lq, SPLASH_ALIGN), MAX_SEARCHED_BLOCK_Q) + 1,
                                 SPLASH_ALIGN)
                if admitted(SplashBlocks(q, block_kv, kvc), limit)]
        if not fits:
            continue
        block_qs = {_fewest_blocks(lq, max(fits), SPLASH_ALIGN)}
        block_qs |= {q for q in EXPERT_BLOCK_Q if admitted(SplashBlocks(q, block_kv, kvc), limit)}
        yield from (SplashBlocks(q, block_kv, kvc) for q in sorted(block_qs))
