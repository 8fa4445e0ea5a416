"""The expert Wan deployments aoizora is compared against: what MaxDiffusion documents, per TPU generation.

Each row is data: a name, the generations it is documented for, the strategy (MaxDiffusion's
``ici_data_parallelism``/``ici_context_parallelism``/``attention``, plus the Ulysses × ring split
of 2D context), the splash kernel's block sizes (``flash_block_sizes``: block_q, block_kv,
block_kv_compute), the ``LIBTPU_INIT_ARGS`` it runs with, and where it is documented (repository,
path, commit). The libtpu arguments are carried on the deployment for the compile path to apply;
the strategy alone is what the planner compiles.

MaxDiffusion's Wan mesh axes map onto aoizora's one to one: ``data`` splits the CFG batch of 2,
``context`` the sequence (``embed`` of every weight is sharded over context and fsdp, logical rule
``['embed', ['context', 'fsdp']]``: aoizora's ``weights="gathered"``); ``attention="flash"``
attends each device's query shard to all-gathered K/V (aoizora's ``allgather``) and
``ulysses_ring`` is 2D context. The documented commands fix data = 2 and leave context to the
remaining devices (``ici_context_parallelism: -1`` in ``base_wan_14b.yml``: the auto-sharded axis);
a deployment on another device count keeps that rule, and 2D context keeps its Ulysses degree
(the two TensorCores of a TPU7x chip) with the ring over the rest.
"""

from __future__ import annotations

from dataclasses import dataclass

from aoizora.models.wan.config import VideoShape, WanConfig
from aoizora.models.wan.strategy import SplashBlocks, Strategy, check_strategy

MAXDIFFUSION = "github.com/AI-Hypercomputer/maxdiffusion"
#: The commit every row below is read at (it adds 2D context for Wan; its README carries the Wan command).
MAXDIFFUSION_COMMIT = "4e694cebe7ab75a633ee818819f59b842a128cce"

#: LIBTPU_INIT_ARGS of the README's Wan 2.1 T2V command.
README_LIBTPU_ARGS: tuple[str, ...] = (
    "--xla_tpu_enable_async_collective_fusion=true",
    "--xla_tpu_enable_async_collective_fusion_fuse_all_reduce=true",
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true",
    "--xla_tpu_overlap_compute_collective_tc=true",
    "--xla_enable_async_all_reduce=true",
)

#: LIBTPU_INIT_ARGS of the TPU v7-8 DP=2 × CP=4 benchmark (benchmark_dp2_cp4.sh), whose results
#: BENCHMARK_RESULTS.md lists "with XLA optimization flags".
V7_BENCHMARK_LIBTPU_ARGS: tuple[str, ...] = (
    "--xla_tpu_dvfs_p_state=7",
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true",
    "--xla_tpu_megacore_fusion_allow_ags=false",
    "--xla_enable_async_collective_permute=true",
    "--xla_tpu_enable_ag_backward_pipelining=true",
    "--xla_tpu_enable_data_parallel_all_reduce_opt=true",
    "--xla_tpu_data_parallel_opt_different_sized_ops=true",
    "--xla_tpu_enable_async_collective_fusion=true",
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true",
    "--xla_tpu_overlap_compute_collective_tc=true",
    "--xla_enable_async_all_gather=true",
    "--xla_tpu_scoped_vmem_limit_kib=65536",
    "--xla_tpu_enable_async_all_to_all=true",
    "--xla_tpu_enable_all_experimental_scheduler_features=true",
    "--xla_tpu_enable_scheduler_memory_pressure_tracking=true",
    "--xla_tpu_host_transfer_overlap_limit=24",
    "--xla_tpu_aggressive_opt_barrier_removal=ENABLED",
    "--xla_lhs_prioritize_async_depth_over_stall=ENABLED",
    "--xla_should_allow_loop_variant_parameter_in_chain=ENABLED",
    "--xla_should_add_loop_invariant_op_in_chain=ENABLED",
    "--xla_max_concurrent_host_send_recv=100",
    "--xla_tpu_scheduler_percent_shared_memory_limit=100",
    "--xla_latency_hiding_scheduler_rerun=2",
    "--xla_tpu_use_minor_sharding_for_major_trivial_input=true",
    "--xla_tpu_relayout_group_size_threshold_for_reduce_scatter=1",
    "--xla_tpu_spmd_rng_bit_generator_unsafe=true",
    "--xla_tpu_assign_all_reduce_scatter_layout=true",
)


@dataclass(frozen=True)
class WanExpert:
    """One documented MaxDiffusion Wan deployment (a row of `WAN_EXPERTS`)."""

    name: str
    #: canonical generations it is documented for; () = any generation without a row of its own
    generations: tuple[str, ...]
    attention: str  # aoizora's self-attention variant
    context_ulysses: int  # Ulysses degree U of 2D context (1 otherwise)
    splash_blocks: SplashBlocks | None
    libtpu_args: tuple[str, ...]
    source: str  # repository, path(s) and commit
    documented: str  # what the source reports for it

    def strategy(self, num_devices: int, batch: int = 2, kernel: str = "auto") -> Strategy:
        """The deployment on `num_devices`: CFG on data = 2 (when the batch and devices split in
        two), the remaining devices on context; weights' embed sharded over context."""
        data = 2 if num_devices % 2 == 0 and batch % 2 == 0 else 1
        context = num_devices // data
        return Strategy(data=data, context=context, attention=self.attention,  # type: ignore[arg-type]
                        weights="gathered" if context > 1 else "replicated", kernel=kernel,  # type: ignore[arg-type]
                        context_ulysses=self.context_ulysses if self.attention == "ulysses_ring" else 1,
                        splash_blocks=self.splash_blocks)


_README = (f"{MAXDIFFUSION} README.md (Wan Models: the Wan2.1 T2V command: attention=flash, ici_data_parallelism=2, "
           f"ici_context_parallelism=2 on 4 devices, flash_block_sizes, LIBTPU_INIT_ARGS) and "
           f"src/maxdiffusion/configs/base_wan_14b.yml (the same block sizes under '# Use on v6e'; "
           f"ici_context_parallelism: -1), commit {MAXDIFFUSION_COMMIT}")
_README_DEFAULT_BLOCKS = (f"{MAXDIFFUSION} README.md (Wan Models: the Wan2.1 T2V command: attention=flash, "
                         f"ici_data_parallelism=2, ici_context_parallelism=2 on 4 devices, LIBTPU_INIT_ARGS) and "
                         f"src/maxdiffusion/configs/base_wan_14b.yml (default flash_block_sizes: 512 everywhere; "
                         f"ici_context_parallelism: -1), commit {MAXDIFFUSION_COMMIT}")
_V7 = (f"{MAXDIFFUSION} BENCHMARK_RESULTS.md (TPU v7-8, 4 chips × 2 cores, DP=2, CP=4, Wan 2.2 T2V A14B, "
       f"720x1280, 81 frames, 40 steps; flash_block_sizes block_q 2048, block_kv 2048, block_kv_compute 1024) "
       f"and benchmark_dp2_cp4.sh (its command and LIBTPU_INIT_ARGS), commit {MAXDIFFUSION_COMMIT}")

# both TPU7x runs of BENCHMARK_RESULTS.md use the blocks of benchmark_dp2_cp4.sh
_V7_BLOCKS = SplashBlocks(block_q=2048, block_kv=2048, block_kv_compute=1024)

WAN_EXPERTS: tuple[WanExpert, ...] = (
    WanExpert(
        name="maxdiffusion-2d-context", generations=("tpu7x",), attention="ulysses_ring", context_ulysses=2,
        splash_blocks=_V7_BLOCKS, libtpu_args=V7_BENCHMARK_LIBTPU_ARGS, source=_V7,
        documented="2D context Ulysses 2 × ring 2: 208.0 s generation without the XLA flags, 182.4 s with them",
    ),
    WanExpert(
        name="maxdiffusion-flash", generations=("tpu7x",), attention="allgather", context_ulysses=1,
        splash_blocks=_V7_BLOCKS, libtpu_args=V7_BENCHMARK_LIBTPU_ARGS, source=_V7,
        documented="flash, CP=4 (K/V all-gathered): 231.3 s generation without the XLA flags, 205.3 s with them",
    ),
    WanExpert(
        name="maxdiffusion-readme", generations=("v6e",), attention="allgather", context_ulysses=1,
        # the command's block_q 3024 (not a multiple of 128: splash pads each device's queries to
        # a multiple of it), block_kv 2048, block_kv_compute 1024
        splash_blocks=SplashBlocks(block_q=3024, block_kv=2048, block_kv_compute=1024),
        libtpu_args=README_LIBTPU_ARGS, source=_README,
        documented="the README's Wan 2.1 T2V 720p/81-frame inference command (no timing given)",
    ),
    WanExpert(
        # v5e and every generation without a row of its own: the README command with the config's
        # default blocks. base_wan_14b.yml gives the command's 3024/2048 blocks for v6e (and v5p
        # dkv variants) only, and on v5e a splash call with them needs ~23 MB of scoped VMEM, over
        # libtpu's default 16 MiB there (tests/models/wan/test_wan_tpu_compile.py); the README's
        # flags do not raise that limit.
        name="maxdiffusion-readme-default-blocks", generations=(), attention="allgather", context_ulysses=1,
        splash_blocks=SplashBlocks(block_q=512, block_kv=512, block_kv_compute=512),
        libtpu_args=README_LIBTPU_ARGS, source=_README_DEFAULT_BLOCKS,
        documented="the README's Wan 2.1 T2V command with base_wan_14b.yml's default flash_block_sizes (no timing given)",
    ),
)


def experts_for(generation: str, table: tuple[WanExpert, ...] = WAN_EXPERTS) -> list[WanExpert]:
    """The rows documented for `generation` (canonical name), else the generation-agnostic ones."""
    own = [e for e in table if generation in e.generations]
    return own or [e for e in table if not e.generations]


def legal_expert_strategies(config: WanConfig, video: VideoShape, generation: str, num_devices: int,
                            batch: int = 2, kernel: str = "auto") -> list[tuple[WanExpert, Strategy]]:
    """(row, strategy) for every documented deployment of `generation` that is legal here."""
    out = []
    for e in experts_for(generation):
        st = e.strategy(num_devices, batch, kernel)
        if not check_strategy(st, config, video, batch, num_devices):
            out.append((e, st))
    return out
