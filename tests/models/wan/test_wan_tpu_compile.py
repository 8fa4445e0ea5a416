"""Compile for TPU (libtpu compile-only devices) from abstract inputs: the splash kernel is
emitted, its cost is reported, and the program fits. The full 14B model at 720p/81 frames is
compiled once (one strategy on v5e:2x4, ~1-2 min); every variant on both slices is in
benchmarks/wan_compile.py (docs/notebook/planning-time.md). The other tests run the real 720p/81-frame token count
(75,600) through a model of reduced width. Each compile goes through the session's compile cache
(`tests/compile_seed.py`): a program the seed holds is read back, a changed one compiles for real."""

from __future__ import annotations

import re

import pytest

from aoizora import toolchain
from aoizora.models.wan.transformer.config import WAN_T2V_14B, VideoShape
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy, make_mesh
from aoizora.models.wan.video.sampling import lower_denoise_step, opaque_kernel_costs
from aoizora.models.wan.video.schedulers import UniPCScheduler
from tests.compile_seed import through_cache

pytestmark = pytest.mark.tpu_compile

VIDEO_720P = VideoShape(81, 720, 1280)
# 14B's head_dim (128) and layer count, 4 heads instead of 40, narrow FFN and text projection.
NARROW = WAN_T2V_14B.replace(num_attention_heads=4, ffn_dim=1024, text_dim=512)


@pytest.mark.parametrize("variant", ["ring"])
def test_720p_81_frames_compiles_for_v5e_2x4_with_splash(variant):
    devs = toolchain.compile_only_devices("v5e:2x4")
    strategy = Strategy(data=2, context=4, attention=variant, weights="gathered")
    mesh = make_mesh(strategy, devs)
    lowered = lower_denoise_step(NARROW, VIDEO_720P, strategy, mesh, UniPCScheduler(50, 5.0))
    compiled = through_cache("v5e:2x4", mesh)(lowered, None)
    text = compiled.hlo_text
    # splash calls (self-attention ring steps + cross-attention) live in the one scanned layer body
    calls = [ln.split("=")[0].strip() for ln in text.splitlines() if 'custom_call_target="tpu_custom_call"' in ln]
    assert "while" in text
    assert re.search(r"collective-permute", text)
    assert 0 < compiled.memory_parts["temp"] < 16 * 1024**3

    kernels = opaque_kernel_costs(NARROW, VIDEO_720P, strategy, mesh)
    # one recorded kernel per custom call in the compiled program, matched by instruction name
    for prefix in ("%splash_mha_fwd_segmented_residuals", "%splash_mha_fwd_segmented_no_residuals"):
        in_hlo = sum(c.startswith(prefix + ".") or c == prefix for c in calls)
        assert in_hlo == sum("%" + k.hlo_name == prefix for k in kernels) > 0
    names = {(k.name, k.hlo_name) for k in kernels}
    assert names == {("splash_ring_step", "splash_mha_fwd_segmented_residuals"),
                     ("splash_cross", "splash_mha_fwd_segmented_no_residuals")}
    local = -(-75_600 // (4 * 128)) * 128  # tokens per device after padding to context×128
    ring = [k for k in kernels if k.name == "splash_ring_step"]
    assert sum(k.calls for k in ring) == 4 * NARROW.num_layers  # context steps × layers
    assert len(ring) == 4  # one splash call per ring step in the unrolled ring
    for k in ring:
        assert k.q_shape == (1, local, 4, 128) and k.kv_shape == (1, local, 4, 128)
        assert k.flops == 4 * local * local * 4 * 128
    cross = [k for k in kernels if k.name == "splash_cross"]
    assert sum(k.calls for k in cross) == NARROW.num_layers and cross[0].kv_shape[1] == 512


def test_kernel_costs_full_14b_ulysses_v5e_4x4():
    """Tracing only (no compile): per-device splash shapes for 14B/720p under Ulysses on 16 chips."""
    devs = toolchain.compile_only_devices("v5e:4x4")
    strategy = Strategy(data=2, context=8, attention="ulysses", weights="gathered")
    mesh = make_mesh(strategy, devs)
    kernels = {k.name: k for k in opaque_kernel_costs(WAN_T2V_14B, VIDEO_720P, strategy, mesh)}
    padded = -(-75_600 // (8 * 128)) * (8 * 128)
    self_k = kernels["splash_self"]
    assert self_k.q_shape == (1, padded, 5, 128)  # 40 heads / context 8 after the all-to-all
    assert self_k.calls == 40
    assert self_k.flops == 4 * padded * padded * 5 * 128
    assert kernels["splash_cross"].q_shape == (1, padded // 8, 40, 128)


@pytest.mark.parametrize("preset,video,topology,strategy", [
    ("i2v-14b", VideoShape(81, 720, 1280), "v5e:4x4", Strategy(data=2, context=8, attention="ulysses")),
    ("t2v-1.3b", VideoShape(81, 480, 832), "v5e:2x4", Strategy(data=2, context=2, tensor=2, attention="ring",
                                                               weights="gathered+tensor")),
])
def test_full_size_lowering_from_abstract_inputs(preset, video, topology, strategy):
    """Lowering (Stage 1 of the planner) at full size: fast, no weights, sharded StableHLO."""
    from aoizora.models.wan.transformer.config import PRESETS

    cfg = PRESETS[preset]
    mesh = make_mesh(strategy, toolchain.compile_only_devices(topology))
    text = lower_denoise_step(cfg, video, strategy, mesh, UniPCScheduler(50, 5.0)).as_text()
    assert "tpu_custom_call" in text
    assert "stablehlo.while" in text  # the scanned layers
    assert "sdy.sharding" in text or "mhlo.sharding" in text


def test_full_size_14b_720p_81_frames_compiles_for_v5e_2x4():
    """The real thing, once: 14B, 720p, 81 frames, the expert deployment (data=2, context=4,
    K/V all-gathered, weights gathered per layer), compiled by libtpu for v5e:2x4 (~1-2 min)."""
    from aoizora.hlo import build_program

    devs = toolchain.compile_only_devices("v5e:2x4")
    strategy = Strategy(data=2, context=4, attention="allgather", weights="gathered")
    mesh = make_mesh(strategy, devs)
    lowered = lower_denoise_step(WAN_T2V_14B, VIDEO_720P, strategy, mesh, UniPCScheduler(50, 5.0))
    compiled = through_cache("v5e:2x4", mesh)(lowered, None)
    mem = compiled.memory_parts
    per_device = mem["argument"] + mem["output"] + mem["temp"]
    # 14B bf16 weights over fsdp x context = 4 shards: ~6.5 GiB of arguments; all within 16 GiB HBM
    assert 6 * 1024**3 < mem["argument"] < 8 * 1024**3
    assert per_device < 16 * 1024**3
    program = build_program(compiled.hlo_text)
    assert [lp.trip_count for lp in program.loops if lp.trip_count and lp.trip_count > 1] == [40]
    assert {op.custom_call_target for op in program.opaque} == {"tpu_custom_call"}
    kinds = {c.kind.value for c in program.collectives}
    assert "all-gather" in kinds  # K/V over context and the per-layer weight gathers


README_BLOCKS = SplashBlocks(block_q=3024, block_kv=2048, block_kv_compute=1024)


@pytest.mark.parametrize("topology,strategy", [
    ("v5e:2x4", Strategy(data=2, context=4, context_ulysses=2, attention="ulysses_ring", weights="gathered",
                         ulysses_chunks=2)),
    ("v6e:2x4", Strategy(data=2, context=4, attention="allgather", weights="gathered", splash_blocks=README_BLOCKS)),
], ids=["v5e-ulysses_ring-2x2-chunks2", "v6e-allgather-blocks-3024-2048-1024"])
def test_2d_context_and_fixed_splash_blocks_compile(topology, strategy):
    """2D context (all-to-all on context_ulysses, permutes on context_ring, chunked) and the README
    expert's splash blocks (queries padded to a multiple of block_q = 3024) lower and compile."""
    cfg = NARROW.replace(num_layers=2)
    video = VideoShape(21, 480, 832)  # 9,360 tokens, padded to 4 × 128 multiples: 9,728
    devs = toolchain.compile_only_devices(topology)
    mesh = make_mesh(strategy, devs)
    assert mesh.axis_names == strategy.mesh_axes
    lowered = lower_denoise_step(cfg, video, strategy, mesh, UniPCScheduler(50, 5.0))
    text = through_cache(topology, mesh)(lowered, None).hlo_text
    calls = [ln.split("=")[0].strip() for ln in text.splitlines() if 'custom_call_target="tpu_custom_call"' in ln]
    kernels = opaque_kernel_costs(cfg, video, strategy, mesh)
    for prefix in ("%splash_mha_fwd_segmented_residuals", "%splash_mha_fwd_segmented_no_residuals"):
        assert sum(c.startswith(prefix + ".") or c == prefix for c in calls) == sum(
            "%" + k.hlo_name == prefix for k in kernels)
    if strategy.attention == "ulysses_ring":
        assert "all-to-all" in text and "collective-permute" in text
        ring = [k for k in kernels if k.name == "splash_ring_step"]
        # 2 chunks × R = 2 ring steps per layer, each on 1 head (4 heads / U / chunks) over a span of L/R
        assert len(ring) == 4 and all(k.q_shape == (1, 9728 // 2, 1, 128) for k in ring)
        assert sum(k.calls for k in ring) == 4 * cfg.num_layers
    else:
        self_k = next(k for k in kernels if k.name == "splash_self")
        assert self_k.block_q == 3024 and self_k.q_shape[1] == 3024  # 2,432 local queries padded to one block
        assert self_k.kv_shape[1] == 10240 and self_k.block_kv == 2048  # 9,728 gathered keys padded to 5 blocks
        cross = next(k for k in kernels if k.name == "splash_cross")
        assert cross.block_q == 3024 and cross.q_shape[1] == 3024 and cross.kv_shape[1] == 512


def test_readme_splash_blocks_exceed_v5e_default_scoped_vmem():
    """block_q 3024 × block_kv 2048 needs ~23 MB of scoped VMEM per splash call: over v5e's default
    16 MiB limit, which is why the v5e expert keeps base_wan_14b.yml's default 512 blocks."""
    from aoizora.stage2.outcomes import OUT_OF_VMEM, drop_reason, refused_for_memory

    cfg = NARROW.replace(num_layers=1)
    strategy = Strategy(data=2, context=4, attention="allgather", weights="gathered", splash_blocks=README_BLOCKS)
    mesh = make_mesh(strategy, toolchain.compile_only_devices("v5e:2x4"))
    lowered = lower_denoise_step(cfg, VideoShape(21, 480, 832), strategy, mesh, UniPCScheduler(50, 5.0))
    with pytest.raises(Exception) as info:  # libtpu's refusal, or the cache's record of it
        through_cache("v5e:2x4", mesh)(lowered, None)
    reason = drop_reason(info.value)
    assert reason.startswith(OUT_OF_VMEM) and refused_for_memory(reason)
