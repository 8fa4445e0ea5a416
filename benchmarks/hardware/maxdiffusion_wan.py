"""AI-Hypercomputer/maxdiffusion: Wan 2.2 T2V A14B generation on TPU v7-8 with 2D context, flash and ring attention.

`BENCHMARK_RESULTS.md` at commit 4e694ceb (the commit that adds 2D context parallelism) times one
video, 720x1280, 81 frames, 40 steps, on a v7-8 (tpu7x 2x2x1: 4 chips x 2 TensorCores), DP=2
(the CFG pair) x CP=4, splash blocks block_q 2048, block_kv 2048, block_kv_compute 1024
(`benchmark_dp2_cp4.sh`, `base_wan_27b.yml`), weights' embed sharded over context
(`logical_axis_rules`: embed over context and fsdp), JAX's default mesh order:

    without XLA flags: 2D context (Ulysses 2 x ring 2) 208.0 s, flash (K/V all-gathered) 231.3 s, ring 237.1 s
    with the LIBTPU_INIT_ARGS of benchmark_dp2_cp4.sh: 2D context 182.4 s, flash 205.3 s

The README's "Ring Attention" table (flash 194.4 s, ring 201.7 s on v7x-8) was measured with
an earlier config's blocks: it is an entry of `maxdiffusion_readme_ring`.

Each A14B expert is Wan 2.1 14B's transformer; one step runs one expert, so the step program is
aoizora's Wan 2.2 T2V-A14B step (both experts resident). Generation time includes the umT5 text
encoder and the VAE decoder, the same for every attention choice: the runner compares the
differences (see `run.py`, `run_pipeline`).
"""

from __future__ import annotations

import dataclasses

from common import Config, PipelineEntry, Source, ran_at, strategy_space_config

REPO = "AI-Hypercomputer/maxdiffusion"
COMMIT = "4e694cebe7ab75a633ee818819f59b842a128cce"
RESULTS = Source(REPO, "BENCHMARK_RESULTS.md", COMMIT, where="Results: without / with XLA optimization flags")
MODEL, RESOLUTION, FRAMES, STEPS = "wan2.2-t2v-a14b", "720p", 81, 40
SLICE = "tpu7x:2x2x1"


def _config(name: str, attention: str, flags: str) -> Config:
    """MaxDiffusion's deployment of `attention` on the v7-8 (the documented rows of aoizora's expert table)."""
    from aoizora.models.registry import wan_space
    from aoizora.models.wan.kernels.experts import WAN_EXPERTS

    # the ring row is the flash row with ring attention (benchmark_dp2_cp4.sh changes only `attention`)
    documented = "allgather" if attention == "ring" else attention
    expert = next(e for e in WAN_EXPERTS if "tpu7x" in e.generations and e.attention == documented)
    # the deployment names its own blocks; its attention forms RoPE partners by a (..., 64, 2)
    # reshape (src/maxdiffusion/models/attention_flax.py, FlaxWanAttention._apply_rope, at COMMIT)
    space = wan_space(MODEL, RESOLUTION, FRAMES, generation=None, rope_partner="reshape")
    strategy = dataclasses.replace(expert.strategy(8), attention=attention)
    setup = (f"{SLICE}, {space.key_of(strategy)}, splash blocks {strategy.splash_blocks}, "
             f"{'LIBTPU_INIT_ARGS of benchmark_dp2_cp4.sh' if flags else 'no flags'}")
    # the attention names benchmark_dp2_cp4.sh passes at COMMIT (its ring is JAX's splash in a ring loop)
    names = {"ulysses_ring": "ulysses_ring", "allgather": "flash", "ring": "ring"}
    return ran_at(strategy_space_config(name, SLICE, space, strategy, setup, flags), REPO, COMMIT,
                  attention=names[attention])


def entries() -> list:
    from aoizora.models.wan.kernels.experts import V7_BENCHMARK_LIBTPU_ARGS

    flags = " ".join(V7_BENCHMARK_LIBTPU_ARGS)
    return [
        PipelineEntry(
            "maxdiffusion/wan22-v7-8-no-flags", "Wan 2.2 A14B 720p/81f, 40 steps, v7-8, DP=2 CP=4, no flags", RESULTS,
            (_config("2d-context", "ulysses_ring", ""), _config("flash", "allgather", ""), _config("ring", "ring", "")),
            (208.0, 231.3, 237.1), STEPS),
        PipelineEntry(
            "maxdiffusion/wan22-v7-8-flags", "the same with benchmark_dp2_cp4.sh's LIBTPU_INIT_ARGS", RESULTS,
            (_config("2d-context", "ulysses_ring", flags), _config("flash", "allgather", flags)),
            (182.4, 205.3), STEPS),
    ]
