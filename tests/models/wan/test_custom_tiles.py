"""The tile MaxDiffusion's custom kernels run a plan with: measured, else the recipe's, else the
least padded query work among published tiles; within the kernel's constraints."""

from __future__ import annotations

import json
from pathlib import Path

from aoizora.export import export_plan
from aoizora.models.registry import wan_space
from aoizora.models.wan.kernels.custom_tiles import MEASURED_STEPS, call_length, custom_kernel_tile, fits_kernel
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy
from aoizora.plan import load_plan

TOKENS = 75600  # Wan 720p/81 frames: 21 x 45 x 80
ROOT = Path(__file__).parents[3]
FIXED_M_PLAN = (ROOT / "docs/data/plans/kernel-profiles"
                / "tpu7x-2x2x1_wan2.2-t2v-a14b_720p_81f_maxdiffusion-custom-fixed-m.json")


def _ring(profile: str, data: int = 2, context: int = 4, ulysses: int = 2) -> Strategy:
    return Strategy(data=data, context=context, attention="ulysses_ring", context_ulysses=ulysses, weights="gathered",
                    kernel_profile=profile, splash_blocks=SplashBlocks(2944, 2048, 1024))


def test_each_kernel_gets_its_own_measured_tile_on_the_fast_recipes_mesh():
    fixed = custom_kernel_tile(_ring("maxdiffusion-custom-fixed-m"), TOKENS, "tpu7x")
    plain = custom_kernel_tile(_ring("maxdiffusion-custom"), TOKENS, "tpu7x")
    assert fixed.blocks == SplashBlocks(6400, 2048, 2048) and plain.blocks == SplashBlocks(9472, 1024, 1024)
    # the plain kernel's published 15% slower tile is not chosen for it
    slower = next(m for m in MEASURED_STEPS if m.kernel_profile == "maxdiffusion-custom" and m.blocks == fixed.blocks)
    assert slower.step_seconds / 2.733 > 1.14
    for tile in (fixed, plain):
        assert tile.vmem_limit_bytes == 67108864 and tile.block_kv_compute_in == 1024 and tile.heads_per_tile == 1
        assert tile.chosen_by.startswith("the fastest published step") and "8dd63054" in tile.source


def test_the_base_wan_27b_comment_tile_for_longer_ulysses():
    # CP8 = ulysses 4 x ring 2: the same 37,800 tokens per call as CP4, the same measured tile (BQ=9472)
    tile = custom_kernel_tile(_ring("maxdiffusion-custom", data=1, context=8, ulysses=4), TOKENS, "tpu7x")
    assert tile.blocks.block_q == 9472


def test_a_recipes_setting_keeps_the_recipes_tile():
    uly = Strategy(data=2, context=4, attention="ulysses", weights="gathered", kernel_profile="maxdiffusion-custom",
                   splash_blocks=SplashBlocks(3072, 2048, 1024))
    tile = custom_kernel_tile(uly, TOKENS, "tpu7x")
    assert tile.blocks == SplashBlocks(4864, 1024, 1024) and "tpu-recipes-ironwood-wan22" in tile.chosen_by
    v6e = custom_kernel_tile(uly, TOKENS, "v6e")
    assert v6e.blocks == SplashBlocks(3328, 2816, 256) and v6e.block_kv_compute_in == 256


def test_elsewhere_the_least_padded_published_tile():
    st = _ring("maxdiffusion-custom", data=1, context=8, ulysses=2)  # ring 4: 18,900 tokens per call
    assert call_length(st, TOKENS) == 18900
    tile = custom_kernel_tile(st, TOKENS, "tpu7x")
    assert tile.chosen_by.startswith("least padded query work")
    assert tile.blocks.block_q == 9472  # 2 blocks pad 44 rows; 4,864 pads 556; 6,400 pads 300


def test_kernel_constraints_and_other_kernels():
    assert fits_kernel(SplashBlocks(6400, 2048, 2048), 1024)
    assert not fits_kernel(SplashBlocks(6400, 2048, 1536), 1024)  # block_kv not a multiple of block_kv_compute
    assert not fits_kernel(SplashBlocks(6400, 2048, 2048), 2048)  # inner block over 1,024
    assert not fits_kernel(SplashBlocks(6400, 2048, 2048), 768)  # the inner loop steps by block_kv_compute_in
    assert custom_kernel_tile(_ring("jax-splash"), TOKENS, "tpu7x") is None
    none_published = custom_kernel_tile(_ring("maxdiffusion-custom-fixed-m"), TOKENS, "v5e")
    assert none_published.blocks == SplashBlocks(2944, 2048, 1024) and "no maxdiffusion" in none_published.chosen_by


def test_a_custom_kernel_plan_carries_and_exports_its_kernel_tile():
    space = wan_space("wan2.2-t2v-a14b", "720p", 81, generation="tpu7x", kernel_profile="maxdiffusion-custom-fixed-m")
    described = space.describe(_ring("maxdiffusion-custom-fixed-m"))
    assert described["kernel_tile"]["block_q"] == 6400 and described["splash_blocks"]["block_q"] == 2944
    assert "kernel_tile" not in space.describe(_ring("jax-splash"))
    run = export_plan(load_plan(FIXED_M_PLAN))  # committed tpu7x:2x2x1 plan
    written = json.loads(dict(run.overrides)["flash_block_sizes"])
    assert (written["block_q"], written["block_kv"], written["block_kv_compute"]) == (6400, 2048, 2048)
    assert written["vmem_limit_bytes"] == 67108864 and written["block_kv_compute_in"] == 1024
    assert any("its own tile 6400/2048/2048" in d for d in run.differences)
