"""AI-Hypercomputer/maxdiffusion commit 9d663c27: Wan 2.2 A14B, one video against two, 2D context on v7-8.

The commit message times 720x1280, 81 frames, 40 steps on v7-8 (tpu7x 2x2x1), DP=2 x CP=4,
2D context (Ulysses 2 x ring 2) with its Ulysses exchange as sharding constraints:
global batch 1 (`per_device_batch_size=0.125`), 198.3 s; global batch 2, 366.6 s (1.85x).
Both are end to end: text encoding and VAE decoding double with the batch too. The run used
`benchmark_dp2_cp4.sh` of that commit (its LIBTPU_INIT_ARGS are those of commit 4e694ceb, the
flag set `maxdiffusion_wan` compiles with; blocks 2048/2048/1024 with tokamax's splash, which takes
block_q from block_q_dkv). With CFG each video is two sequences, so the step's batch is 2 and 4.

The entry compares the ratio of step times with the ratio of end-to-end times per step. Nothing
in aoizora was derived from it: held out.
"""

from __future__ import annotations

from common import ComparisonEntry, Source, ran_at, wan_config

REPO = "AI-Hypercomputer/maxdiffusion"
COMMIT = "9d663c272ba8b0028cea6beaaf51d244a9fd0df5"
SOURCE = Source(REPO, "(commit message)", COMMIT, where="'2D GBS=1: 198.3s (unchanged)', '2D GBS=2: ... 366.6s'")
STEPS = 40


def _config(name: str, batch: int):
    from aoizora.models.wan.kernels.experts import V7_BENCHMARK_LIBTPU_ARGS
    from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy

    strategy = Strategy(data=2, context=4, attention="ulysses_ring", context_ulysses=2, weights="gathered",
                        splash_blocks=SplashBlocks(2048, 2048, 1024), kernel_profile="tokamax-splash")
    config = wan_config(name, "tpu7x:2x2x1", "wan2.2-t2v-a14b", "720p", 81, strategy, batch=batch,
                        flags=" ".join(V7_BENCHMARK_LIBTPU_ARGS), rope_partner="reshape",
                        setup="benchmark_dp2_cp4.sh's LIBTPU_INIT_ARGS, tokamax kernels")
    return ran_at(config, REPO, COMMIT, attention="ulysses_ring")


def entries() -> list:
    return [ComparisonEntry(
        "maxdiffusion/wan22-v7-8-batch-scaling",
        "Wan 2.2 A14B 720p/81f, v7-8, 2D context U2 x R2: one video against two (end to end / 40 steps)", SOURCE,
        (_config("1-video", 2), _config("2-videos", 4)), (198.3 / STEPS, 366.6 / STEPS), "s e2e/step",
        higher_is_better=False,
        notes="held out; measured figures are end-to-end times / steps (text encoding and VAE included, both "
              "doubling with the batch): compare ratios, not absolute times")]
