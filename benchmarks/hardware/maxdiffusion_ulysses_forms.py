"""AI-Hypercomputer/maxdiffusion commit 226ed266: two forms of Ulysses attention on v7-8.

The commit message times Wan 2.2 A14B, 720x1280, 81 frames, 40 steps, on v7-8 (tpu7x 2x2x1),
DP=2 x CP=4, end to end:

    Ulysses with a manual all-to-all inside shard_map:                  661.6 s
    Ulysses with with_sharding_constraint, data kept in BSHD layout:    220.6 s
    2D context (Ulysses 2 x ring 2), the same exchange form:            202.1 s
    flash (K/V all-gathered):                                           435 s ("2.2x" slower than 2D)

and attributes the 3x of the first pair to sparse-core-data-format-call relayouts that XLA
inserted on TPU v7 around the manual all-to-all. The runs are `benchmark_dp2_cp4.sh` of that
commit: its LIBTPU_INIT_ARGS (those of commit 4e694ceb), the profiler on, blocks 2048/2048/1024
for every configuration, JAX's splash for Ulysses and flash, tokamax's for 2D (costed with the
`tokamax-splash` profile).

aoizora builds both exchange forms (`WanConfig.ulysses_exchange`: ``all_to_all``, its own
default, and ``sharding_constraint``) and compiles each. aoizora's program keeps
[batch, sequence, heads, head_dim] (BSHD) in both, so the question the entry asks is whether
libtpu inserts SparseCore relayouts around either exchange in aoizora's program and how Q2 costs
them. Held out: nothing was derived from these figures.
"""

from __future__ import annotations

from common import PipelineEntry, Source, ran_at, wan_config

REPO = "AI-Hypercomputer/maxdiffusion"
COMMIT = "226ed26698123f95c707ffde7529ecaafab24d2b"
#: the commit before: its Ulysses exchanges by a manual all-to-all, the form the message measured first
PARENT = "4e694cebe7ab75a633ee818819f59b842a128cce"
SOURCE = Source(REPO, "(commit message)", COMMIT,
                where="'Ulysses: 661.6s -> 220.6s', '2D (U=2,R=2): 202.1s (... 2.2x faster than flash at 435s)'")
STEPS = 40


def _config(name: str, attention: str, exchange: str, profile: str = "jax-splash"):
    from aoizora.models.wan.kernels.experts import V7_BENCHMARK_LIBTPU_ARGS
    from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy

    strategy = Strategy(data=2, context=4, attention=attention, weights="gathered",  # type: ignore[arg-type]
                        context_ulysses=2 if attention == "ulysses_ring" else 1,
                        splash_blocks=SplashBlocks(2048, 2048, 1024), kernel_profile=profile)
    config = wan_config(name, "tpu7x:2x2x1", "wan2.2-t2v-a14b", "720p", 81, strategy,
                        flags=" ".join(V7_BENCHMARK_LIBTPU_ARGS), rope_partner="reshape",
                        ulysses_exchange=exchange, setup=f"Ulysses exchange: {exchange}; benchmark_dp2_cp4.sh's flags")
    names = {"ulysses": "ulysses", "ulysses_ring": "ulysses_ring", "allgather": "flash"}
    return ran_at(config, REPO, PARENT if exchange == "all_to_all" else COMMIT, attention=names[attention])


def entries() -> list:
    return [PipelineEntry(
        "maxdiffusion/wan22-v7-8-ulysses-forms",
        "Wan 2.2 A14B 720p/81f, 40 steps, v7-8, DP=2 CP=4: Ulysses by all-to-all vs by sharding constraint, "
        "2D context, flash", SOURCE,
        (_config("ulysses-all-to-all", "ulysses", "all_to_all"),
         _config("ulysses-constraint", "ulysses", "sharding_constraint"),
         _config("2d-context", "ulysses_ring", "sharding_constraint", "tokamax-splash"),
         _config("flash", "allgather", "sharding_constraint")),
        (661.6, 220.6, 202.1, 435.0), STEPS,
        notes="held out; profiler on in every run; flash's 435 s is the message's rounded figure")]
