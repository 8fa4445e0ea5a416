"""AI-Hypercomputer/accelerator-microbenchmarks, Ironwood all-gather guide (TPU7x).

`Ironwood/guides/collectives/all_gather.md` lists, for topology 2x2x1 (4 chips, 2 TensorCores
each: 8 devices), f32 per-device input [N, 8, 128], output [4N, 8, 128], achieved bandwidth
71.77, 129.19, 161.90, 174.77, 178.77 GB/s for N = 64, 256, 1024, 4096, 16384.

How the benchmark computes "achieved bandwidth" (`Ironwood/src/benchmark_collectives.py`,
`all_gather_benchmark` and `unified_ici_collectives_metrics`, same commit), read before comparing:
* config `Ironwood/configs/collectives/all_gather_tpu7x_2x2x1.yaml`, first sweep (the one whose
  output is 4x the input): `mesh_shape: 2x2x2` over the 8 devices built by
  `mesh_utils.create_device_mesh((2, 2, 2), jax.devices())`, axes d_0, d_1, d_2;
  `sharding_strategy: 2x2x1` -> the all-gather runs over (d_0, d_1): groups of 4 devices, two
  groups at once; `shard_map(all_gather(x, ('d_0','d_1'), tiled=True))` with every device holding
  its own full [N, 8, 128] input (in_specs P(None, None, None));
* time: the device duration of the marked op in a profiler trace, averaged over the runs;
* transferred data = input bytes x (rank - 1) x 2 when every member of the first replica group
  is even ("parallel" replica groups, as here: rank 4), so bandwidth = 6 x input bytes / time.
  The measured time per call is therefore 6 x N x 8 x 128 x 4 B / bandwidth.
The benchmark sets LIBTPU_INIT_ARGS (SparseCore all-gather offload flags, p-state 7,
`all_gather_benchmark`); the entries are compiled with the same flags.
"""

from __future__ import annotations

from common import Config, Source, TimedEntry, sharded

REPO = "AI-Hypercomputer/accelerator-microbenchmarks"
COMMIT = "ecd4c82fac418f597923c800f48883081d480ac3"
SOURCE = Source(REPO, "Ironwood/guides/collectives/all_gather.md", COMMIT, where="Expected Results, topology 2x2x1")
FLAGS = ("--xla_jf_debug_level=3 --xla_sc_disable_megacore_partitioning=true "
         "--xla_tpu_disable_sparse_core_collective_offload_remover=true "
         "--xla_tpu_enable_all_gather_offload_tracing=true "
         "--xla_tpu_enable_sparse_core_collective_offload_2d_all_gather=true "
         "--xla_tpu_enable_sparse_core_collective_offload_3d_all_gather=true "
         "--xla_tpu_enable_sparse_core_collective_offload_all_gather=true "
         "--xla_tpu_use_single_sparse_core_for_all_gather_offload=true --xla_tpu_use_tc_device_shape_on_sc=true "
         "--xla_tpu_dvfs_p_state=7")  # Ironwood/src/benchmark_collectives.py, all_gather_benchmark
POINTS = ((64, 71.7703034), (256, 129.1869148), (1024, 161.9040742), (4096, 174.765465), (16384, 178.7714158))


def _all_gather(n: int):
    def build(mesh):
        import jax
        import jax.numpy as jnp
        from jax.sharding import PartitionSpec as P

        def body(x):
            return jax.lax.all_gather(x, ("d_0", "d_1"), tiled=True)

        fn = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P(None, None, None), out_specs=P(None, None, None),
                                   check_vma=False))
        return fn, (sharded((n, 8, 128), jnp.float32, mesh, None, None, None),)

    return build


def entries() -> list:
    out = []
    for n, gbps in POINTS:
        input_bytes = n * 8 * 128 * 4
        seconds = 6 * input_bytes / (gbps * 1e9)
        setup = (f"tpu7x 2x2x1 (4 chips x 2 cores), mesh 2x2x2 (d_0, d_1, d_2; mesh_utils order), "
                 f"all_gather over (d_0, d_1) of f32[{n},8,128] per device; flags: {FLAGS}")
        out.append(TimedEntry(
            f"ironwood/all-gather-2x2x1-N{n}", f"all-gather f32[{n},8,128] x4, tpu7x 2x2x1", SOURCE,
            Config(f"ironwood-ag-N{n}", "tpu7x:2x2x1", (("d_0", 2), ("d_1", 2), ("d_2", 2)), _all_gather(n),
                   setup=setup,
                   flags=FLAGS),
            seconds, measured_note=f"{gbps:.1f} GB/s achieved = 6 x input bytes / time", group="ironwood-2x2x1",
        ))
    return out
