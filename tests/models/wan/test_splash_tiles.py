"""Splash blocks fitted to a strategy's lengths and to the generation's VMEM
(`aoizora.models.wan.kernels.splash_tiles`)."""

from __future__ import annotations

import dataclasses
import math

import pytest

from aoizora import toolchain
from aoizora.models.wan.kernels.splash_tiles import (
    KV_ALIGN,
    LARGE_BLOCK_KV,
    LARGE_BLOCK_KV_COMPUTE,
    SPLASH_LIMIT_LENGTH,
    compile_splash_call,
    fitted_splash_blocks,
    local_batch,
    searched_splash_tile,
    self_attention_lengths,
)
from aoizora.models.wan.space.space import WanSpace
from aoizora.models.wan.transformer.attention import splash_grid_steps
from aoizora.models.wan.transformer.config import WAN_T2V_14B, VideoShape
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy
from aoizora.topology import hardware_profile
from tests.compile_seed import through_cache

# 14B's head_dim, 4 heads (so that every variant below divides them), one layer; 480p/21 frames
# is 9,360 tokens, which no context degree here divides into 128-aligned shards without padding.
NARROW = WAN_T2V_14B.replace(num_layers=1, num_attention_heads=4, ffn_dim=1024, text_dim=512)
VIDEO = VideoShape(21, 480, 832)
TOKENS = VIDEO.tokens(NARROW)

VARIANTS = [
    Strategy(data=2, context=4, attention="allgather", weights="replicated"),
    Strategy(data=2, context=4, attention="ulysses", weights="replicated"),
    Strategy(fsdp=2, context=4, attention="ring", weights="gathered"),
    Strategy(context=8, context_ulysses=2, attention="ulysses_ring", weights="replicated"),
    Strategy(data=2, tensor=4, weights="replicated"),
]


@pytest.mark.parametrize("strategy", VARIANTS, ids=lambda s: s.attention + str(s.context))
@pytest.mark.parametrize("fitted", [False, True], ids=["kernel-blocks", "fitted-blocks"])
def test_lengths_and_blocks_are_those_of_the_traced_splash_calls(strategy, fitted):
    """What the blocks are fitted to is what the model traces: each self-attention call's local
    query and key lengths, padded by the call to a multiple of the fitted blocks."""
    from aoizora.models.wan.transformer.strategy import make_mesh
    from aoizora.models.wan.video.sampling import opaque_kernel_costs

    if fitted:
        blocks = fitted_splash_blocks(strategy, TOKENS, 2, {1: 1024, 2: 768})
        strategy = dataclasses.replace(strategy, splash_blocks=blocks)
    mesh = make_mesh(strategy, toolchain.compile_only_devices("v5e:2x4"))
    calls = [k for k in opaque_kernel_costs(NARROW, VIDEO, strategy, mesh) if k.name != "splash_cross"]
    lq, lk = self_attention_lengths(strategy, TOKENS)
    assert calls
    for k in calls:
        assert k.q_shape[0] == local_batch(strategy, 2)
        if not fitted:
            assert (k.q_shape[1], k.kv_shape[1]) == (lq, lk)
        else:
            assert (k.block_q, k.block_kv) == (blocks.block_q, blocks.block_kv)
            assert k.q_shape[1] == math.ceil(lq / blocks.block_q) * blocks.block_q
            assert k.kv_shape[1] == math.ceil(lk / blocks.block_kv) * blocks.block_kv


@pytest.mark.parametrize("length", [128, 1024, 4736, 6656, 9472, 18944, 75776, 75648])
@pytest.mark.parametrize("cap", [512, 1024, 1664, 3072])
def test_fitted_blocks_tile_the_lengths_in_the_fewest_blocks_with_little_padding(length, cap):
    ring = Strategy(data=2, context=1)  # lq = lk = the padded length; local batch 1
    blocks = fitted_splash_blocks(ring, length, 2, {1: cap})
    assert blocks.reasons() == []
    for size, limit, unit in ((blocks.block_q, cap, 128), (blocks.block_kv, LARGE_BLOCK_KV, KV_ALIGN)):
        count = math.ceil(length / size)
        assert size % unit == 0 and size <= max(limit, unit)
        assert count == math.ceil(length / limit)  # no fewer blocks of at most `limit` exist
        assert count * size - length < unit * count  # under one unit of padded rows or keys per block
    assert blocks.block_kv % blocks.block_kv_compute == 0
    # the compute sub-block fills a 256-wide MXU and is the largest such divisor up to 1,024
    assert KV_ALIGN <= blocks.block_kv_compute <= LARGE_BLOCK_KV_COMPUTE and blocks.block_kv_compute % KV_ALIGN == 0
    assert not any(blocks.block_kv % b == 0
                   for b in range(blocks.block_kv_compute + KV_ALIGN, LARGE_BLOCK_KV_COMPUTE + 1, KV_ALIGN))


def test_fitted_blocks_of_a_720p_call_and_the_grid_they_save():
    """Wan 14B, 720p/81 frames (75,600 tokens), MaxDiffusion's v6e mesh (data=2, context=4, K/V
    gathered): each device attends 18,944 queries to 75,776 keys (75,600 padded to 4 x 128)."""
    st = Strategy(data=2, context=4, attention="allgather", weights="gathered")
    assert self_attention_lengths(st, 75_600) == (18_944, 75_776)
    blocks = fitted_splash_blocks(st, 75_600, 2, {1: 2048, 2: 1664})
    # 10 Q blocks of 1,920 (18,944 / 2,048 = 9.25 -> 10; 1,894.4 rounded up to 128); 37 K/V blocks of 2,048
    assert blocks == SplashBlocks(1920, 2048, 1024)
    kernel_pick = splash_grid_steps(40, 18_944, 75_776)  # 512-row Q blocks, 1,024-key K/V blocks
    assert kernel_pick == 40 * 37 * 74
    assert splash_grid_steps(40, 18_944, 75_776, blocks.block_q, blocks.block_kv) == 40 * 10 * 37


def test_no_blocks_where_the_limit_was_not_measured():
    st = Strategy(context=8, attention="ulysses", weights="replicated")  # local batch 2
    assert fitted_splash_blocks(st, TOKENS, 2, {1: 2048}) is None
    assert fitted_splash_blocks(st, TOKENS, 2, {1: 2048, 2: 1664}) is not None
    # calls longer than the limit's measurement keep the kernel's pick (the working set grows with length)
    assert fitted_splash_blocks(st, SPLASH_LIMIT_LENGTH, 2, {2: 1664}) is not None
    assert fitted_splash_blocks(st, SPLASH_LIMIT_LENGTH + 1, 2, {2: 1664}) is None


def test_a_space_for_a_generation_runs_every_splash_strategy_with_its_fitted_blocks():
    space, plain = WanSpace(NARROW, VIDEO, generation="v5e"), WanSpace(NARROW, VIDEO)
    limits = hardware_profile("v5e").splash_max_block_q
    legal = [c for c in space.candidates(8) if c.legal]
    # JAX's splash: the searched tile and its scoped-VMEM limit (the fitted blocks at the default
    # limit where no raised one costs less)
    assert legal and all((c.strategy.splash_blocks, c.strategy.scoped_vmem_kib) == searched_splash_tile(
        dataclasses.replace(c.strategy, splash_blocks=None, scoped_vmem_kib=None), TOKENS, 2, "v5e") for c in legal)
    assert limits
    assert all("blocks=" in c.key for c in legal)
    assert all(c.strategy.splash_blocks is None for c in plain.candidates(8))
    # a chunked Ulysses strategy still takes its unchunked sibling's analysis (same blocks)
    chunked = next(c.strategy for c in legal if c.strategy.ulysses_chunks > 1)
    twin = space.analysis_stand_in(chunked)
    assert twin.key() in {c.key for c in legal}
    xla = WanSpace(NARROW, VIDEO, generation="v5e", kernel="xla")
    assert all(c.strategy.splash_blocks is None for c in xla.candidates(8))


@pytest.mark.tpu_compile
@pytest.mark.parametrize("batch", [1, 2])
def test_the_largest_query_block_is_what_the_compiler_allows(batch):
    """v5e's `splash_max_block_q` compiles at the length it was measured at and one 128-row step
    more overflows the scoped VMEM (benchmarks/hardware/splash_vmem.py, repeated for one generation)."""
    limit = hardware_profile("v5e").splash_max_block_q[batch]
    n = SPLASH_LIMIT_LENGTH
    seeded = through_cache("v5e:2x2")
    compile_splash_call("v5e:2x2", batch, n, n, SplashBlocks(limit, LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE),
                        compile_with=seeded)
    with pytest.raises(Exception, match="(?i)vmem"):
        compile_splash_call("v5e:2x2", batch, n, n, SplashBlocks(limit + 128, LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE),
                            compile_with=seeded)


@pytest.mark.tpu_compile
def test_the_blocks_fitted_to_a_720p_strategy_compile_for_v6e():
    """Wan's longest calls (720p, 81 frames, data=2 context=4 all-gather: each device attends 18,944
    queries to 75,776 keys) compile with the blocks fitted to v6e's limit, while the block v6e
    accepts on 8,192-token calls (3,840 rows) overflows the scoped VMEM there: the limit must be
    measured at the longest call. (A compiled call's VMEM is its own: the whole model at these
    lengths was refused for the 3,840-row block with the same "CompileTimeScopedVmemOom".)"""
    st = Strategy(data=2, context=4, attention="allgather", weights="replicated")
    blocks = fitted_splash_blocks(st, 75_600, 2, hardware_profile("v6e").splash_max_block_q)
    assert blocks.block_q > 2048  # 7 Q blocks, where the kernel's pick (512) runs 37
    seeded = through_cache("v6e:2x2")
    compile_splash_call("v6e:2x2", 1, 18_944, 75_776, blocks, compile_with=seeded)
    with pytest.raises(Exception, match="(?i)vmem"):
        compile_splash_call("v6e:2x2", 1, 18_944, 75_776, SplashBlocks(3840, 2048, 1024), compile_with=seeded)
