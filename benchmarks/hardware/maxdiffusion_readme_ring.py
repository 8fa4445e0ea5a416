"""AI-Hypercomputer/maxdiffusion README, "Ring Attention": tokamax flash against tokamax ring on v7x.

The README (section added by PR #387, commit bc3bca04; its flash figures updated by commit
2e247d00, the one cited here) times one 720p (1280x720), 81-frame video, end to end, with CFG
over the data axis (dp2), for Wan 2.1 (50 steps) and Wan 2.2 (40 steps):

    v7x-8  (tpu7x 2x2x1), dp2-fsdp1-context4-tp1: Wan 2.1 flash 249.3 s, ring 252.4 s;
                                                   Wan 2.2 flash 194.4 s, ring 201.7 s
    v7x-16 (tpu7x 2x2x2), dp2-fsdp1-context8-tp1: Wan 2.1 flash 127.1 s, ring 137.2 s;
                                                   Wan 2.2 flash 106.0 s, ring 137.5 s

The README adds that ring attention has "known stability issues" on 16 TPUs. It states no
flags and no blocks, so the configuration is MaxDiffusion's base config of each model at that
commit: `flash_block_sizes` 512 everywhere in base_wan_14b.yml and base_wan_27b.yml, where a
tokamax attention takes block_q from block_q_dkv (max_utils.get_flash_block_sizes), i.e. splash
blocks 512/512/512, weights' embed over context. The kernels are tokamax's, costed with the
`tokamax-splash` profile. Nothing in aoizora was derived from these figures: every entry here is
held out.
"""

from __future__ import annotations

from common import PipelineEntry, Source, ran_at, wan_config

REPO = "AI-Hypercomputer/maxdiffusion"
COMMIT = "2e247d00b8589dd53dc19a82835ffa228ef3f1ca"
FRAMES, RESOLUTION = 81, "720p"


SOURCE = Source(REPO, "README.md", COMMIT, where="Ring Attention: e2e generation time, 720p 81 frames, CFG DP")


def _config(name: str, attention: str, model: str, topology: str, context: int):
    from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy

    strategy = Strategy(data=2, context=context, attention=attention, weights="gathered",  # type: ignore[arg-type]
                        splash_blocks=SplashBlocks(512, 512, 512), kernel_profile="tokamax-splash")
    # MaxDiffusion's attention forms RoPE partners by a (..., 64, 2) reshape (attention_flax.py)
    config = wan_config(name, topology, model, RESOLUTION, FRAMES, strategy, rope_partner="reshape",
                        setup="tokamax kernels (tokamax-splash profile), no flags stated")
    return ran_at(config, REPO, COMMIT, attention={"allgather": "tokamax_flash", "ring": "tokamax_ring"}[attention])


def entries() -> list:
    rows = (
        ("wan21-v7x-8", "wan2.1-t2v-14b", "tpu7x:2x2x1", 4, 50, (249.3, 252.4)),
        ("wan22-v7x-8", "wan2.2-t2v-a14b", "tpu7x:2x2x1", 4, 40, (194.4, 201.7)),
        ("wan21-v7x-16", "wan2.1-t2v-14b", "tpu7x:2x2x2", 8, 50, (127.1, 137.2)),
        ("wan22-v7x-16", "wan2.2-t2v-a14b", "tpu7x:2x2x2", 8, 40, (106.0, 137.5)),
    )
    out = []
    for key, model, topology, context, steps, measured in rows:
        devices = 8 if topology.endswith("2x2x1") else 16
        out.append(PipelineEntry(
            f"maxdiffusion/{key}-readme",
            f"README: tokamax flash vs ring, {model} 720p/81f, {steps} steps, v7x-{devices}, dp2 x context{context}",
            SOURCE,
            (_config("flash", "allgather", model, topology, context),
             _config("ring", "ring", model, topology, context)),
            measured, steps,
            notes="held out" + ("; the README warns of ring instability on 16 TPUs" if devices == 16 else "")))
    return out
