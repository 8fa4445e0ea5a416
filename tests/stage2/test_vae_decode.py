"""The VAE decode compiled by libtpu for a small slice, sharded as MaxDiffusion shards it, and costed by Q2."""

from __future__ import annotations

import jax.numpy as jnp
import pytest

from aoizora.models.wan.vae.config import WanVAEConfig
from aoizora.stage2.compile_cache import default_compile_cache
from aoizora.stage2.vae_decode import vae_decode_cost
from aoizora.topology import get_topology

pytestmark = pytest.mark.tpu_compile
TINY_VAE21 = WanVAEConfig(base_dim=4, z_dim=4, latents_mean=(0.0,) * 4, latents_std=(1.0,) * 4, dtype=jnp.float32)


def test_a_tiny_decode_compiles_for_a_slice_and_costs_time():
    cost = vae_decode_cost(get_topology("v5e:2x2"), (1, TINY_VAE21.z_dim, 3, 8, 16), config=TINY_VAE21,
                           cache=default_compile_cache())  # the session's, which the compile seed fills
    assert cost.mesh == (1, 4)
    assert cost.video == (1, 3, 9, 64, 128)
    assert cost.seconds > 0 and cost.compute_seconds > 0
    assert cost.seconds >= cost.compute_seconds
    assert cost.collectives > 0  # the width's halos cross devices
    assert cost.memory_bytes is not None and cost.memory_bytes > 0
