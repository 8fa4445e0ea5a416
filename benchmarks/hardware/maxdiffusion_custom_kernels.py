"""AI-Hypercomputer/maxdiffusion: Wan 2.2 A14B denoising on v7x-8 with MaxDiffusion's own attention kernels.

Two published comparisons of per-step denoising time (720x1280, 81 frames, 40 steps, v7x-8 =
tpu7x 2x2x1, DP=2 x CP=4, the tuned v7 flag set of `end_to_end/tpu/run_wan_fast_inference.sh`,
which that script says comes from PR #430's 2D-ring baseline):

* commit 8dd630549ce1cb55e167a66102dcc3aef4cc1926 (its message): 2D context (ring 2 x Ulysses 2)
  with `ulysses_ring_custom` at tile 9472/1024, denoise 109.3 s, and `ulysses_ring_custom_fixed_m`
  at 6400/2048, 105.3 s. **In-sample** for the kernel profiles: their shares of the MXU roofline
  come from the same message (`aoizora.models.wan.transformer.kernel_profiles`).
* PR #430 (https://github.com/AI-Hypercomputer/maxdiffusion/pull/430, head 7528f71b; its
  description): the custom kernel's 2D ring (Ulysses 2, ring 2), denoise 109.8 s, against the best
  Ulysses, 122.6 s. **Held out**: nothing was derived from it. Its tiles and the Ulysses run's head
  chunking are not stated: the profile does not depend on the tile, and Ulysses is taken unchunked.

aoizora compiles each deployment with JAX's splash kernel at blocks it accepts and costs the
attention calls with the kernel's profile; the rest of the step is the compiled program as in
every other entry. The denoise totals hold only the steps, so the per-step figures compare as
absolute times.
"""

from __future__ import annotations

from common import IN_SAMPLE, ComparisonEntry, Config, Source, ran_at, strategy_space_config

REPO = "AI-Hypercomputer/maxdiffusion"
FIXED_M = Source(REPO, "(commit message)", "8dd630549ce1cb55e167a66102dcc3aef4cc1926",
                 where="'720p 81f T2V, 40 steps, v7x-8, dp2 x (ring2 x uly2), denoise total'")
#: PR #430's head, the program its description measured
PR_430_HEAD = "7528f71b28f199489168231e10ebf0d889abf820"
PR_430 = Source(url="https://github.com/AI-Hypercomputer/maxdiffusion/pull/430",
                where="description: v7x-8 dp2-cp4, denoise 109.8 s (2D ring U2 R2) and 122.6 s (best Ulysses)")
MODEL, RESOLUTION, FRAMES, STEPS = "wan2.2-t2v-a14b", "720p", 81, 40
SLICE = "tpu7x:2x2x1"


#: MaxDiffusion's attention names of the custom kernels (its config's list of supported attentions)
NAMES = {("ulysses_ring", "maxdiffusion-custom"): "ulysses_ring_custom",
         ("ulysses_ring", "maxdiffusion-custom-fixed-m"): "ulysses_ring_custom_fixed_m",
         ("ulysses", "maxdiffusion-custom"): "ulysses_custom"}


def _config(name: str, attention: str, profile: str, commit: str) -> Config:
    """The DP=2 x CP=4 deployment of `attention` with a custom-kernel profile, under the v7 flags."""
    import dataclasses

    from aoizora.models.registry import wan_space
    from aoizora.models.wan.kernels.experts import FAST_V7_LIBTPU_ARGS
    from aoizora.models.wan.kernels.splash_tiles import fitted_splash_blocks
    from aoizora.models.wan.transformer.strategy import Strategy
    from aoizora.topology import hardware_profile

    space = wan_space(MODEL, RESOLUTION, FRAMES, generation="tpu7x", kernel_profile=profile)
    bare = Strategy(data=2, context=4, attention=attention, weights="gathered", kernel_profile=profile,  # type: ignore[arg-type]
                    context_ulysses=2 if attention == "ulysses_ring" else 1)
    # the blocks JAX's splash accepts for its lengths on TPU7x (what a plan of this kernel compiles)
    blocks = fitted_splash_blocks(bare, space.video.tokens(space.config), space.batch,
                                  hardware_profile("tpu7x").splash_max_block_q)
    assert blocks is not None
    strategy = dataclasses.replace(bare, splash_blocks=blocks)
    setup = (f"{SLICE}, {space.key_of(strategy)}, compiled with JAX's splash at "
             f"{strategy.splash_blocks.describe()}, the run_wan_fast_inference.sh flags")
    config = strategy_space_config(name, SLICE, space, strategy, setup, " ".join(FAST_V7_LIBTPU_ARGS))
    return ran_at(config, REPO, commit, attention=NAMES[attention, profile])


def entries() -> list:
    return [
        ComparisonEntry(
            "maxdiffusion/wan22-v7x-8-fixed-m", "Wan 2.2 A14B 720p/81f denoise step, v7x-8, 2D context: "
            "plain vs fixed-m custom kernel (in-sample for the kernel profiles)", FIXED_M,
            (_config("plain", "ulysses_ring", "maxdiffusion-custom", FIXED_M.commit or ""),
             _config("fixed-m", "ulysses_ring", "maxdiffusion-custom-fixed-m", FIXED_M.commit or "")),
            (109.3 / STEPS, 105.3 / STEPS), "s", higher_is_better=False,
            notes="in-sample: the profiles' MXU shares come from the same commit message", basis=IN_SAMPLE),
        ComparisonEntry(
            "maxdiffusion/wan22-v7x-8-pr430", "Wan 2.2 A14B 720p/81f denoise step, v7x-8, custom kernel: "
            "2D context (U2 x R2) vs Ulysses (held out)", PR_430,
            (_config("2d-context", "ulysses_ring", "maxdiffusion-custom", PR_430_HEAD),
             _config("ulysses", "ulysses", "maxdiffusion-custom", PR_430_HEAD)),
            (109.8 / STEPS, 122.6 / STEPS), "s", higher_is_better=False,
            notes="held out; tiles not stated (the profile does not depend on them); Ulysses unchunked"),
    ]
