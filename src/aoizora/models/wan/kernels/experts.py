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

import dataclasses
from dataclasses import dataclass

from aoizora.models.wan.transformer.config import VideoShape, WanConfig
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy, check_strategy
from aoizora.toolchain import SCOPED_VMEM_FLAG

MAXDIFFUSION = "github.com/AI-Hypercomputer/maxdiffusion"
#: The commit every row below is read at (it adds 2D context for Wan; its README carries the Wan command).
MAXDIFFUSION_COMMIT = "4e694cebe7ab75a633ee818819f59b842a128cce"
MAXDIFFUSION_DATE = "2026-04-25"

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
    f"--{SCOPED_VMEM_FLAG}=65536",
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
    #: MaxDiffusion's `attention` value: the kernel family the deployment runs
    maxdiffusion_attention: str = ""
    #: ISO date of the source's commit (the newest rows of a generation are today's expert)
    date: str = ""
    #: documented device count -> (ici_data_parallelism, ici_context_parallelism); empty: the
    #: generation-agnostic rule (data = 2 for the CFG pair, context the rest)
    meshes: tuple[tuple[int, tuple[int, int]], ...] = ()
    #: the generate_wan.py config and overrides as the source gives them (for its first mesh)
    command: str = ""
    #: flash_block_sizes keys the MaxDiffusion kernel reads beyond the three splash blocks
    kernel_options: tuple[tuple[str, int], ...] = ()

    @property
    def kernel_profile(self) -> str:
        """The attention kernel the deployment runs: JAX's splash (what aoizora compiles and costs),
        tokamax's splash, or MaxDiffusion's own kernels (plain or fixed-m softmax). Read from the
        name as at the row's commit: `ulysses_ring` ran JAX's splash at 4e694ceb (the dated row)
        and runs tokamax's at 7cfb8801, where no row of today uses it."""
        name = self.maxdiffusion_attention
        if "custom" in name:
            return "maxdiffusion-custom-fixed-m" if name.endswith("fixed_m") else "maxdiffusion-custom"
        return "tokamax-splash" if name.startswith("tokamax") else "jax-splash"

    @property
    def scoped_vmem_limit_kib(self) -> int | None:
        """The scoped-VMEM limit its flags set (`SCOPED_VMEM_FLAG`; None: libtpu's default)."""
        prefix = f"--{SCOPED_VMEM_FLAG}="
        for arg in self.libtpu_args:
            if arg.startswith(prefix):
                return int(arg[len(prefix):])
        return None

    def strategy(self, num_devices: int, batch: int = 2, kernel: str = "auto") -> Strategy:
        """The deployment on `num_devices`: its documented mesh for that count, else CFG on data = 2
        (when the batch and devices split in two) and the remaining devices on context; weights'
        embed sharded over context."""
        data = 2 if num_devices % 2 == 0 and batch % 2 == 0 else 1
        data, context = dict(self.meshes).get(num_devices, (data, num_devices // data))
        return Strategy(data=data, context=context, attention=self.attention,  # type: ignore[arg-type]  # a variant's name
                        weights="gathered" if context > 1 else "replicated", kernel=kernel,  # type: ignore[arg-type]  # a kernel's name
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
        maxdiffusion_attention="ulysses_ring", date=MAXDIFFUSION_DATE,
    ),
    WanExpert(
        name="maxdiffusion-flash", generations=("tpu7x",), attention="allgather", context_ulysses=1,
        splash_blocks=_V7_BLOCKS, libtpu_args=V7_BENCHMARK_LIBTPU_ARGS, source=_V7,
        documented="flash, CP=4 (K/V all-gathered): 231.3 s generation without the XLA flags, 205.3 s with them",
        maxdiffusion_attention="flash", date=MAXDIFFUSION_DATE,
    ),
    WanExpert(
        name="maxdiffusion-readme", generations=("v6e",), attention="allgather", context_ulysses=1,
        # the command's block_q 3024 (not a multiple of 128: splash pads each device's queries to
        # a multiple of it), block_kv 2048, block_kv_compute 1024
        splash_blocks=SplashBlocks(block_q=3024, block_kv=2048, block_kv_compute=1024),
        libtpu_args=README_LIBTPU_ARGS, source=_README,
        documented="the README's Wan 2.1 T2V 720p/81-frame inference command (no timing given)",
        maxdiffusion_attention="flash", date=MAXDIFFUSION_DATE,
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
        documented="the README's Wan 2.1 T2V command with base_wan_14b.yml's default flash_block_sizes "
                   "(no timing given)",
        maxdiffusion_attention="flash", date=MAXDIFFUSION_DATE,
    ),
)


TPU_RECIPES = "github.com/AI-Hypercomputer/tpu-recipes"
#: The MaxDiffusion commit today's rows are read at, and the commit that last changed the fast-inference script.
MAXDIFFUSION_HEAD = "7cfb8801d41d1728f0232cd7ee59e900a151fecf"
FAST_INFERENCE_COMMIT = "8dd630549ce1cb55e167a66102dcc3aef4cc1926"


def _flags(text: str) -> tuple[str, ...]:
    return tuple(text.split())


#: LIBTPU_INIT_ARGS of end_to_end/tpu/run_wan_fast_inference.sh ("tuned collective/scheduler flag set for v7").
FAST_V7_LIBTPU_ARGS = _flags(
    "--xla_tpu_spmd_rng_bit_generator_unsafe=true --xla_tpu_enable_dot_strength_reduction=true "
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true --xla_enable_async_collective_permute=true "
    "--xla_tpu_enable_data_parallel_all_reduce_opt=true --xla_tpu_data_parallel_opt_different_sized_ops=true "
    "--xla_tpu_enable_async_collective_fusion=true --xla_tpu_enable_async_collective_fusion_multiple_steps=true "
    "--xla_tpu_overlap_compute_collective_tc=true --xla_enable_async_all_gather=true "
    f"--{SCOPED_VMEM_FLAG}=65536 --xla_tpu_enable_async_all_to_all=true "
    "--xla_tpu_enable_all_experimental_scheduler_features=true "
    "--xla_tpu_enable_scheduler_memory_pressure_tracking=true "
    "--xla_tpu_host_transfer_overlap_limit=24 --xla_tpu_aggressive_opt_barrier_removal=ENABLED "
    "--xla_lhs_prioritize_async_depth_over_stall=ENABLED --xla_should_allow_loop_variant_parameter_in_chain=ENABLED "
    "--xla_should_add_loop_invariant_op_in_chain=ENABLED --xla_tpu_enable_ici_ag_pipelining=true "
    "--xla_max_concurrent_host_send_recv=100 --xla_tpu_scheduler_percent_shared_memory_limit=100 "
    "--xla_latency_hiding_scheduler_rerun=2 --xla_tpu_use_minor_sharding_for_major_trivial_input=true "
    "--xla_tpu_relayout_group_size_threshold_for_reduce_scatter=1 --xla_tpu_enable_latency_hiding_scheduler=true "
    "--xla_tpu_enable_ag_backward_pipelining=true --xla_tpu_enable_megacore_fusion=true "
    "--xla_tpu_megacore_fusion_allow_ags=true --xla_tpu_use_single_sparse_core_for_all_gather_offload=true "
    "--xla_tpu_sparse_core_all_gather_latency_multiplier=1 --xla_tpu_sparse_core_reduce_scatter_latency_multiplier=3 "
    "--xla_tpu_enable_sparse_core_collective_aggregator=true --xla_tpu_enable_sparse_core_offload_queuing_in_lhs=true "
    "--xla_tpu_enable_sparse_core_reduce_scatter_v2=true "
    "--xla_tpu_enable_sparse_core_collective_offload_all_gather=true "
    "--xla_tpu_enable_sparse_core_collective_offload_2d_all_gather=true "
    "--xla_tpu_enable_sparse_core_collective_offload_all_reduce=true "
    "--xla_tpu_enable_sparse_core_collective_offload_reduce_scatter=true "
    "--xla_tpu_enable_sparse_core_collective_offload_3d_all_gather=true "
    "--xla_tpu_enable_concurrent_sparse_core_offloading=true --xla_tpu_assign_all_reduce_scatter_layout=true")
#: The XLA_FLAGS of tpu-recipes' MaxDiffusion Wan recipes (Ironwood: the first flag and no scoped-VMEM
#: limit; Trillium: the limit at 32 MiB, without the first flag); the same list otherwise.
_RECIPE_FLAGS = (
    "--xla_tpu_spmd_rng_bit_generator_unsafe=true --xla_tpu_enable_dot_strength_reduction=true "
    "--xla_tpu_enable_async_collective_fusion_fuse_all_gather=true --xla_enable_async_collective_permute=true "
    "--xla_tpu_enable_data_parallel_all_reduce_opt=true --xla_tpu_data_parallel_opt_different_sized_ops=true "
    "--xla_tpu_enable_async_collective_fusion=true --xla_tpu_enable_async_collective_fusion_multiple_steps=true "
    "--xla_tpu_overlap_compute_collective_tc=true --xla_enable_async_all_gather=true {vmem}"
    "--xla_tpu_enable_async_all_to_all=true --xla_tpu_enable_all_experimental_scheduler_features=true "
    "--xla_tpu_enable_scheduler_memory_pressure_tracking=true --xla_tpu_host_transfer_overlap_limit=24 "
    "--xla_max_concurrent_host_send_recv=100 --xla_tpu_scheduler_percent_shared_memory_limit=100 "
    "--xla_latency_hiding_scheduler_rerun=2 --xla_tpu_use_minor_sharding_for_major_trivial_input=true "
    "--xla_tpu_relayout_group_size_threshold_for_reduce_scatter=1 --xla_tpu_enable_latency_hiding_scheduler=true "
    "--xla_tpu_memory_bound_loop_optimizer_options=enabled:true "
    "--xla_tpu_use_single_sparse_core_for_all_gather_offload=true "
    "--xla_tpu_sparse_core_all_gather_latency_multiplier=1 --xla_tpu_sparse_core_reduce_scatter_latency_multiplier=3 "
    "--xla_tpu_enable_sparse_core_collective_aggregator=true --xla_tpu_enable_sparse_core_offload_queuing_in_lhs=true "
    "--xla_tpu_enable_sparse_core_reduce_scatter_v2=true "
    "--xla_tpu_enable_sparse_core_collective_offload_all_gather=true "
    "--xla_tpu_enable_sparse_core_collective_offload_2d_all_gather=true "
    "--xla_tpu_enable_sparse_core_collective_offload_all_reduce=true "
    "--xla_tpu_enable_sparse_core_collective_offload_reduce_scatter=true "
    "--xla_tpu_enable_sparse_core_collective_offload_3d_all_gather=true "
    "--xla_tpu_enable_concurrent_sparse_core_offloading=true --xla_tpu_assign_all_reduce_scatter_layout=true")
IRONWOOD_RECIPE_LIBTPU_ARGS = _flags("--xla_tpu_dvfs_p_state=7 " + _RECIPE_FLAGS.format(vmem=""))
TRILLIUM_RECIPE_LIBTPU_ARGS = _flags(_RECIPE_FLAGS.format(vmem=f"--{SCOPED_VMEM_FLAG}=32768 "))

_FAST = (f"{MAXDIFFUSION} end_to_end/tpu/run_wan_fast_inference.sh (the tuned v7 2D-ring recipe: "
         "ici_data_parallelism=2, ici_context_parallelism=4, ulysses_shards=2, per_device_batch_size=0.125, "
         "720x1280, 81 frames, Wan 2.2 by default), "
         f"last changed at {FAST_INFERENCE_COMMIT}, read at {MAXDIFFUSION_HEAD}")
_CP_COMMENT = (f"{MAXDIFFUSION} src/maxdiffusion/configs/base_wan_27b.yml (comment: 'Best 2D-ring / USP (Ulysses x "
               "ring) configs for WAN2.2-T2V-A14B (720x1280, 81 frames)', attention=ulysses_ring_custom; the comment "
               "gives block_q only: block_kv 1024 as run_wan_fast_inference.sh pairs with BQ=9472), "
               f"commit {MAXDIFFUSION_HEAD}")


def _cp_comment_row(context: int, ulysses: int, slice_name: str) -> WanExpert:
    """One line of base_wan_27b.yml's comment: pure context parallelism over the slice (data 1)."""
    return WanExpert(
        name=f"maxdiffusion-27b-cp{context}", generations=("tpu7x",), attention="ulysses_ring",
        context_ulysses=ulysses, splash_blocks=SplashBlocks(9472, 1024, 1024), libtpu_args=FAST_V7_LIBTPU_ARGS,
        source=_CP_COMMENT, documented=f"CP{context} ({slice_name}): ulysses_shards={ulysses} "
                                       f"(R={context // ulysses}), BQ=9472 (no timing given)",
        maxdiffusion_attention="ulysses_ring_custom", date="2026-08-21", meshes=((context, (1, context)),),
        command=f"{_MD}base_wan_27b.yml attention=ulysses_ring_custom ulysses_shards={ulysses} ici_data_parallelism=1 "
                f"ici_context_parallelism={context} per_device_batch_size={1 / context} {_SHAPE} "
                "flash_block_sizes='{\"block_q\":9472,\"block_kv\":1024,\"block_kv_compute\":1024}'",
    )


def _recipe(path: str, commit: str) -> str:
    return f"{TPU_RECIPES} {path} (its 8- and 16-device meshes, flash_block_sizes and XLA_FLAGS), commit {commit}"


_MD = "src/maxdiffusion/configs/"
_SHAPE = "height=720 width=1280 num_frames=81"
_CUSTOM_4864 = (("block_kv_compute_in", 1024), ("heads_per_tile", 1))
#: the flash_block_sizes override both Ironwood recipes pass
_IRONWOOD_BLOCKS = ("flash_block_sizes='{\"block_kv\":1024,\"block_kv_compute\":1024,\"block_kv_compute_in\":1024,"
                    "\"block_kv_dkv\":1024,\"block_kv_dkv_compute\":1024,\"block_q\":4864,\"block_q_dkv\":4864,"
                    "\"block_q_dq\":4864,\"heads_per_tile\":1}'")

#: Today's documented MaxDiffusion Wan deployments (June to August 2026). They run MaxDiffusion's own
#: attention kernels (`kernel_profile`), which aoizora neither compiles nor costs yet, so they are
#: data to compare against and to read back (`aoizora plan --from-maxdiffusion`), not Stage 2
#: candidates; `WAN_EXPERTS` holds the rows the planner compiles.
TODAYS_WAN_EXPERTS: tuple[WanExpert, ...] = (
    WanExpert(
        name="maxdiffusion-fast-v7-fixed-m", generations=("tpu7x",), attention="ulysses_ring", context_ulysses=2,
        splash_blocks=SplashBlocks(6400, 2048, 2048), libtpu_args=FAST_V7_LIBTPU_ARGS, source=_FAST,
        documented="720p 81f / 40 steps denoise: fixed-m 105.3 s (the script's header)",
        maxdiffusion_attention="ulysses_ring_custom_fixed_m", date="2026-07-27", meshes=((8, (2, 4)),),
        kernel_options=(("block_kv_compute_in", 1024), ("heads_per_tile", 1), ("vmem_limit_bytes", 67108864)),
        command=f"{_MD}base_wan_27b.yml attention=ulysses_ring_custom_fixed_m ulysses_shards=2 ici_data_parallelism=2 "
                "ici_fsdp_parallelism=1 ici_context_parallelism=4 ici_tensor_parallelism=1 "
                "per_device_batch_size=0.125 "
                f"{_SHAPE} flash_block_sizes='{{\"block_q\":6400,\"block_kv\":2048,\"block_kv_compute\":2048}}'",
    ),
    WanExpert(
        name="maxdiffusion-fast-v7-plain", generations=("tpu7x",), attention="ulysses_ring", context_ulysses=2,
        splash_blocks=SplashBlocks(9472, 1024, 1024), libtpu_args=FAST_V7_LIBTPU_ARGS, source=_FAST,
        documented="720p 81f / 40 steps denoise: plain 109.6 s (the script's header; FIXEDM=0)",
        maxdiffusion_attention="ulysses_ring_custom", date="2026-07-27", meshes=((8, (2, 4)),),
        kernel_options=(("block_kv_compute_in", 1024), ("heads_per_tile", 1), ("vmem_limit_bytes", 67108864)),
        command=f"{_MD}base_wan_27b.yml attention=ulysses_ring_custom ulysses_shards=2 ici_data_parallelism=2 "
                "ici_fsdp_parallelism=1 ici_context_parallelism=4 ici_tensor_parallelism=1 "
                "per_device_batch_size=0.125 "
                f"{_SHAPE} flash_block_sizes='{{\"block_q\":9472,\"block_kv\":1024,\"block_kv_compute\":1024}}'",
    ),
    _cp_comment_row(context=8, ulysses=4, slice_name="v7x-8"),
    _cp_comment_row(context=16, ulysses=8, slice_name="v7x-16"),
    WanExpert(
        name="tpu-recipes-trillium-wan22", generations=("v6e",), attention="ulysses", context_ulysses=1,
        splash_blocks=SplashBlocks(3328, 2816, 256), libtpu_args=TRILLIUM_RECIPE_LIBTPU_ARGS,
        source=_recipe("inference/trillium/MaxDiffusion/Wan2.x/Wan2.2-T2V/run_recipe.sh",
                       "929aa28627f5b205a7d507fd3449f7378c65bddc"),
        documented="Wan 2.2 T2V on v6e-8 and v6e-16, 720p, 81 frames, 40 steps (no timing in the recipe)",
        maxdiffusion_attention="ulysses_custom", date="2026-06-20", meshes=((8, (2, 4)), (16, (2, 8))),
        kernel_options=(("block_kv_compute_in", 256), ("heads_per_tile", 1)),
        command=f"{_MD}base_wan_27b.yml attention=ulysses_custom num_inference_steps=40 num_frames=81 height=720 "
                "per_device_batch_size=0.125 ici_data_parallelism=2 ici_context_parallelism=4 "
                "flash_block_sizes='{\"block_q\":3328,\"block_kv_compute\":256,\"block_kv\":2816,"
                "\"block_kv_compute_in\":256,\"block_q_dkv\":3328,\"block_kv_dkv\":2816,"
                "\"block_kv_dkv_compute\":256,\"block_q_dq\":3328,\"block_kv_dq\":2816,\"heads_per_tile\":1}'",
    ),
    WanExpert(
        name="tpu-recipes-ironwood-wan22", generations=("tpu7x",), attention="ulysses", context_ulysses=1,
        splash_blocks=SplashBlocks(4864, 1024, 1024), libtpu_args=IRONWOOD_RECIPE_LIBTPU_ARGS,
        source=_recipe("inference/ironwood/MaxDiffusion/Wan2.x/Wan2.2-T2V/run_recipe.sh",
                       "acef142a1df623319f19e85b53e8ba8c25e800c4"),
        documented="Wan 2.2 T2V on 7x-8 and 7x-16, 720p, 81 frames (no timing in the recipe)",
        maxdiffusion_attention="ulysses_custom", date="2026-06-08", meshes=((8, (2, 4)), (16, (2, 8))),
        kernel_options=_CUSTOM_4864,
        command=f"{_MD}base_wan_27b.yml attention=ulysses_custom num_frames=81 height=720 per_device_batch_size=0.125 "
                "ici_data_parallelism=2 ici_context_parallelism=4 " + _IRONWOOD_BLOCKS,
    ),
    WanExpert(
        name="tpu-recipes-ironwood-wan21", generations=("tpu7x",), attention="ulysses_ring", context_ulysses=2,
        splash_blocks=SplashBlocks(4864, 1024, 1024), libtpu_args=IRONWOOD_RECIPE_LIBTPU_ARGS,
        source=_recipe("inference/ironwood/MaxDiffusion/Wan2.x/Wan2.1-T2V/run_recipe.sh",
                       "0d439c1a916fd7d8459e1d29f3d2ecb7ede8482b"),
        documented="Wan 2.1 T2V on 7x-8 and 7x-16, 720p, 81 frames (no timing in the recipe)",
        maxdiffusion_attention="ulysses_ring_custom", date="2026-08-03", meshes=((8, (2, 4)), (16, (2, 8))),
        kernel_options=_CUSTOM_4864,
        command=f"{_MD}base_wan_14b.yml attention=ulysses_ring_custom ulysses_shards=2 num_frames=81 height=720 "
                "per_device_batch_size=0.125 ici_data_parallelism=2 ici_context_parallelism=4 " + _IRONWOOD_BLOCKS,
    ),
)


def newest_documented(generation: str) -> WanExpert | None:
    """The most recently documented row of `generation` among all rows (today's expert)."""
    rows = [e for e in (*WAN_EXPERTS, *TODAYS_WAN_EXPERTS) if generation in e.generations]
    return max(rows, key=lambda e: e.date) if rows else None


def experts_for(generation: str, table: tuple[WanExpert, ...] = WAN_EXPERTS) -> list[WanExpert]:
    """The rows documented for `generation` (canonical name), else the generation-agnostic ones."""
    own = [e for e in table if generation in e.generations]
    return own or [e for e in table if not e.generations]


def legal_expert_strategies(config: WanConfig, video: VideoShape, generation: str, num_devices: int,
                            batch: int = 2, kernel: str = "auto",
                            kernel_profile: str = "jax-splash") -> list[tuple[WanExpert, Strategy]]:
    """(row, strategy) for every documented deployment of `generation` that runs `kernel_profile`
    and is legal here: `experts_for` for JAX's splash, else the rows of that kernel (dated and today's)."""
    if kernel_profile == "jax-splash":
        rows = experts_for(generation)
    else:
        rows = [e for e in (*WAN_EXPERTS, *TODAYS_WAN_EXPERTS)
                if generation in e.generations and e.kernel_profile == kernel_profile]
    out = []
    for e in rows:
        st = dataclasses.replace(e.strategy(num_devices, batch, kernel), kernel_profile=kernel_profile)
        if not check_strategy(st, config, video, batch, num_devices):
            out.append((e, st))
    return out


#: The deployment name of the MaxDiffusion command given with `aoizora plan --from-maxdiffusion`.
USER_DEPLOYMENT = "your-maxdiffusion-command"


def expert_key_suffixes() -> frozenset[str]:
    """The segments an expert deployment's Stage 2 key may add after its strategy's key (`<name>
    flags`, when it compiles with its own flags): a closed vocabulary, so a plan's key holds nothing
    else (a plan file is data, never text a shell runs)."""
    return frozenset(f"{e.name} flags" for e in (*WAN_EXPERTS, *TODAYS_WAN_EXPERTS)) | {f"{USER_DEPLOYMENT} flags"}
