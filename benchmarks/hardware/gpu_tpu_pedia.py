"""yangwhale/gpu-tpu-pedia: Wan on v6e-8 and v5p-8 with torchax (diffusers' PyTorch models run by JAX).

* `tpu/Wan2.1/README.md` at 332abb79: Wan 2.1 T2V 14B, v6e-8 (v6e 2x4), mesh (dp=2, tp=4): CFG
  over dp, attention heads and the projections' columns (Megatron: to_q/k/v and the FFN's first
  layer by columns, to_out and the second by rows) over tp; a custom splash kernel with blocks
  3328/2816/256; 50 steps. Per denoising step: 720p (1280x720, 81 frames) 4.59 s
  (229.29 s / 50), 480p (832x480) 1.26 s (63.02 s / 50) ("Benchmark" column; the three-stage table
  puts the transformer at ~230 s at 720p).
* `tpu/Wan2.2/README.md` at 0b9db4a7: Wan 2.2 I2V A14B, v5p-8 (4 chips), `--dp 2` (tp 2), 720x1280,
  81 frames, 40 steps: transformer stage ~180 s (~4.5 s/step).

Another runtime than aoizora's (PyTorch modules traced by torchax), so each is compared as the
source's own configuration: aoizora compiles its program of the same sharding with JAX's splash (at
the source's blocks where JAX's kernel takes them, else fitted ones). Both runs use the source's own
exp2 splash kernel (`custom_splash_attention.py` beside each README), the kernel MaxDiffusion took
over as its custom kernel (maxdiffusion commit 589c3d52, "Integrate torchax custom attention
kernel"), so their attention calls are costed with the `maxdiffusion-custom` profile, whose share
of the MXU roofline was measured on TPU7x: on v6e and v5p it is an assumption this entry checks.
Nothing was derived from these figures: held out.
"""

from __future__ import annotations

from common import ComparisonEntry, Source, TimedEntry, wan_config

REPO = "yangwhale/gpu-tpu-pedia"
WAN21 = Source(REPO, "tpu/Wan2.1/README.md", "332abb79ce6e887a2f3ec2cbd9b4dc171ea2a6d3",
               where="性能基准: Benchmark column, 720P and 480P, 50 steps")
WAN22 = Source(REPO, "tpu/Wan2.2/README.md", "0b9db4a7f40526fb019a75c81bd923d9e43041fd",
               where="性能数据: TPU v5p-8, Stage 2 ~180s, 40 steps")


def _v6e(name: str, resolution: str):
    from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy

    strategy = Strategy(data=2, tensor=4, weights="tensor", splash_blocks=SplashBlocks(3328, 2816, 256),
                        kernel_profile="maxdiffusion-custom")
    return wan_config(name, "v6e:2x4", "wan2.1-t2v-14b", resolution, 81, strategy,
                      setup="the source's blocks; no flags")


def entries() -> list:
    from aoizora.models.wan.transformer.strategy import Strategy

    v5p_strategy = Strategy(data=2, tensor=2, weights="tensor", kernel_profile="maxdiffusion-custom")
    v5p = wan_config("dp2-tp2", "v5p:2x2x1", "wan2.2-i2v-a14b", "720p", 81, v5p_strategy,
                     generation="v5p", setup="fitted blocks (the source's custom kernel); no flags")
    return [
        ComparisonEntry(
            "gpu-tpu-pedia/wan21-v6e-8-dp2-tp4", "Wan 2.1 14B denoise step, v6e-8, dp2 x tp4 (heads), torchax: "
            "720p against 480p", WAN21, (_v6e("720p", "720p"), _v6e("480p", "480p")), (229.29 / 50, 63.02 / 50), "s",
            higher_is_better=False, notes="held out; another runtime (torchax); its exp2 kernel costed with the "
            "maxdiffusion-custom profile (measured on TPU7x)"),
        TimedEntry("gpu-tpu-pedia/wan22-i2v-v5p-8-dp2", "Wan 2.2 I2V A14B denoise step, v5p-8, dp2 x tp2, torchax",
                   WAN22, v5p, 180.0 / 40,
                   measured_note="~180 s transformer stage / 40 steps (approximate, as published)",
                   notes="held out; another runtime; the source rounds its figure"),
    ]
