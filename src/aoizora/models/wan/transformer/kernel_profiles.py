"""Attention kernel profiles: how a deployment's attention kernel is costed.

aoizora compiles every program with JAX's splash kernel (the only one it traces), and the kernel is
opaque to the compiler's estimates, so its time comes from a profile of the kernel the deployment
runs (`Strategy.kernel_profile`):

* ``jax-splash`` — JAX's Pallas splash attention, what aoizora compiles and runs: the slowest of
  the MXU at peak (head_dim below the systolic array's side leaves part of it empty, for all its
  FLOPs), HBM (K/V re-streamed per Q block), and the softmax's vector work per score element at
  `HardwareProfile.attention_score_elements_per_s`, plus a fixed cost per grid step
  (`HardwareProfile.roofline_seconds`). The vector rate and grid-step cost are derived from
  openxla/tokamax's published splash autotuning times (see `data/hardware.json`'s sources).
* ``tokamax-splash`` — tokamax's splash kernel (MaxDiffusion's ``tokamax_*`` attentions, and its
  ``ulysses_ring`` at 7cfb8801): the same model, whose per-element and per-step figures were
  measured on it.
* ``maxdiffusion-custom`` and ``maxdiffusion-custom-fixed-m`` — MaxDiffusion's own splash kernels
  (``ulysses_custom``, ``ulysses_ring_custom`` and their fixed-m variants). Their author reports
  them MXU-bound: at the production tiles the in-kernel ring hop takes 22.65 ms with online
  softmax and 21.15 ms with fixed-m, "85% -> 91% of the K=128 MXU roofline" (maxdiffusion commit
  8dd630549ce1cb55e167a66102dcc3aef4cc1926, v7x-8, Wan 2.2 720p/81, dp2 x (ring2 x uly2)). That
  roofline is the QK^T half of the FLOPs contracting over head_dim 128 (half of TPU7x's 256-wide
  MXU) and the PV half over the key block (the full array): `narrow_fraction` 0.5. The profile is
  that roofline at the reported efficiency; the fixed-m kernel drops the online softmax's running
  max and rescale chain, which is why the source finds it flat across tiles, so neither profile
  depends on the tile. The plain kernel's tile sensitivity the same source reports (its best tile
  9,472/1,024; ~15% slower steps at 6,400/2,048) has no published mechanism and is not modelled;
  `custom_tiles` says what the data rule out, and chooses the tile a custom kernel runs with.
"""

from __future__ import annotations

from dataclasses import dataclass

from aoizora.topology import KernelWork

#: The commit whose message reports the custom kernels' share of the MXU roofline.
FIXED_M_COMMIT = "8dd630549ce1cb55e167a66102dcc3aef4cc1926"
_SOURCE = (f"github.com/AI-Hypercomputer/maxdiffusion commit {FIXED_M_COMMIT} (message: 'In-kernel the ring hop "
           "goes 22.65 -> 21.15 ms, i.e. 85% -> 91% of the K=128 MXU roofline', v7x-8, 720p 81f, dp2 x (ring2 x uly2))")


#: The variants MaxDiffusion deploys each kernel family with (src/maxdiffusion/models/attention_flax.py @
#: 7cfb8801d41d1728f0232cd7ee59e900a151fecf, its @register_kernel names): tokamax's splash as
#: tokamax_flash, tokamax_ring and ulysses_ring; its custom kernels as ulysses_custom and
#: ulysses_ring_custom (and their fixed-m forms) only.
_TOKAMAX_VARIANTS = ("allgather", "ring", "ulysses_ring")
_CUSTOM_VARIANTS = ("ulysses", "ulysses_ring")


@dataclass(frozen=True)
class KernelProfile:
    """How one attention kernel's calls are costed (see the module docstring)."""

    name: str
    #: None: aoizora's splash model (MXU, HBM, vector work, grid steps); else the kernel's measured
    #: share of the MXU roofline with `narrow_fraction` of its FLOPs contracting over head_dim
    mxu_efficiency: float | None
    narrow_fraction: float
    source: str
    #: where a published figure gives the kernel's time: (what, milliseconds)
    reported_ms: tuple[tuple[str, float], ...] = ()
    #: the self-attention variants the kernel is deployed with (with context 1 every variant is
    #: local attention, which each kernel runs)
    variants: tuple[str, ...] = ("allgather", "ulysses", "ring", "ulysses_ring")

    def work(self, flops: float, head_dim: int, grid_steps: int, compute_blocks_per_step: int = 1,
             kv_stream_bytes: float | None = None) -> KernelWork:
        """What bounds one call of `flops` FLOPs with this head dim and grid (JAX's and tokamax's
        splash: `compute_blocks_per_step` K/V compute sub-blocks in each grid step, and
        `kv_stream_bytes` of K/V re-read by its Q blocks)."""
        if self.mxu_efficiency is None:
            return KernelWork(matmul_dim=head_dim, score_elements=flops / (4.0 * head_dim), grid_steps=grid_steps,
                              compute_blocks_per_step=compute_blocks_per_step, kv_stream_bytes=kv_stream_bytes)
        return KernelWork(matmul_dim=head_dim, narrow_fraction=self.narrow_fraction,
                          mxu_efficiency=self.mxu_efficiency)


KERNEL_PROFILES: dict[str, KernelProfile] = {
    "jax-splash": KernelProfile("jax-splash", None, 1.0, "aoizora's splash model (data/hardware.json sources)"),
    "tokamax-splash": KernelProfile("tokamax-splash", None, 1.0,
                                    "aoizora's splash model, whose vector rate and grid-step cost are tokamax's "
                                    "published splash times (data/hardware.json sources)",
                                    variants=_TOKAMAX_VARIANTS),
    "maxdiffusion-custom": KernelProfile("maxdiffusion-custom", 0.85, 0.5, _SOURCE,
                                         (("ring hop, online softmax", 22.65),), variants=_CUSTOM_VARIANTS),
    "maxdiffusion-custom-fixed-m": KernelProfile("maxdiffusion-custom-fixed-m", 0.91, 0.5, _SOURCE,
                                                 (("ring hop, fixed-m softmax", 21.15),), variants=_CUSTOM_VARIANTS),
}
DEFAULT_KERNEL_PROFILE = "jax-splash"
