"""AI-Hypercomputer/maxdiffusion PR #436: pure Ulysses over 8 devices with the fixed-m custom kernel.

PR #436 (https://github.com/AI-Hypercomputer/maxdiffusion/pull/436, merged as commit 9c9b7075)
adds `ulysses_custom_fixed_m` and folds the CFG batch into the heads around the Ulysses exchange.
Its description times Wan 2.2 A14B, 720p, 81 frames, on v7x-8 (tpu7x 2x2x1), context 8 (pure
Ulysses, data 1), per denoising step: 7.00 s before the fold, 3.43 s after. The code comment of
the fold (src/maxdiffusion/models/attention_flax.py at 9c9b7075) names the mechanism: at batch 2
XLA put the size-2 batch in the tile sublanes (T(2,128) instead of T(8,128)) of the exchanged
tensors, which "quadruples the cost of every op touching the a2a tensors".

aoizora's program has no CFG batch in those tensors' tiles to begin with (its Ulysses exchange
splits heads of [batch, sequence, heads, head_dim] with the batch major), so only the 3.43 s run
is an entry. It is costed with the fixed-m profile, whose MXU share comes from the 2D-ring
kernel of commit 8dd63054: this pure-Ulysses run is held out. The flags are those of
`end_to_end/tpu/run_wan_fast_inference.sh`, the v7 set MaxDiffusion publishes with these kernels.
"""

from __future__ import annotations

from common import Source, TimedEntry, ran_at, wan_config

#: the merge of PR #436, the program its description measured after the fold
MERGED = "9c9b70754dc54cefa49193a15a51ab33b7830156"
SOURCE = Source(url="https://github.com/AI-Hypercomputer/maxdiffusion/pull/436",
                where="description: cp8 pure Ulysses, 7.00 s/step before the CFG batch fold, 3.43 s/step after")


def entries() -> list:
    from aoizora.models.wan.kernels.experts import FAST_V7_LIBTPU_ARGS
    from aoizora.models.wan.transformer.strategy import Strategy

    strategy = Strategy(data=1, context=8, attention="ulysses", weights="gathered",
                        kernel_profile="maxdiffusion-custom-fixed-m")
    config = wan_config("ulysses-cp8-fixed-m", "tpu7x:2x2x1", "wan2.2-t2v-a14b", "720p", 81, strategy,
                        generation="tpu7x", flags=" ".join(FAST_V7_LIBTPU_ARGS), rope_partner="reshape",
                        setup="compiled with JAX's splash at fitted blocks, costed with the fixed-m profile; "
                              "run_wan_fast_inference.sh flags")
    config = ran_at(config, "AI-Hypercomputer/maxdiffusion", MERGED, attention="ulysses_custom_fixed_m")
    return [TimedEntry("maxdiffusion/wan22-v7x-8-ulysses-cp8-fixed-m",
                       "Wan 2.2 A14B 720p/81f denoise step, v7x-8, pure Ulysses cp8, fixed-m custom kernel "
                       "(after the CFG batch fold)", SOURCE, config, 3.43,
                       measured_note="per denoising step, as published",
                       notes="held out; the 7.00 s/step run before the fold is a layout aoizora's program does "
                             "not have")]
