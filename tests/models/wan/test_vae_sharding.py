"""The VAE decode sharded as MaxDiffusion shards it (7cfb8801): its mesh and partition specs, and the
sharded decode computing what the unsharded one does, on the CPU devices conftest provides."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P
from wan_testutil import TINY_VAE21

from aoizora.models.wan.vae.config import WAN21_VAE
from aoizora.models.wan.vae.decoder import decode_latents
from aoizora.models.wan.vae.params import vae_param_shapes
from aoizora.models.wan.vae.sharding import (
    ACTIVATION_SPEC,
    COMPUTE_DTYPE,
    WEIGHTS_DTYPE,
    latent_shape,
    param_spec,
    param_specs,
    sharded_decode,
    vae_mesh_spec,
)
from aoizora.placement import MeshSpec

S = "vae_spatial"


def test_the_mesh_is_maxdiffusions_vae_mesh():
    """wan_pipeline.py: (devices / vae_spatial, vae_spatial) over ("redundant", "vae_spatial"); -1 is all."""
    assert vae_mesh_spec(8) == MeshSpec(("redundant", S), (1, 8))
    assert vae_mesh_spec(8, 2) == MeshSpec(("redundant", S), (4, 2))
    with pytest.raises(ValueError, match="multiple of vae_spatial"):
        vae_mesh_spec(8, 3)


def test_activations_and_weights_are_sharded_as_maxdiffusion_shards_them():
    """autoencoder_kl_wan.py: activations (b, t, h, w, c) split on the width; kernels on their output
    channels when they divide, the attention's proj on its input channels; the rest replicated."""
    assert ACTIVATION_SPEC == P("redundant", None, None, S, None)
    assert (COMPUTE_DTYPE, WEIGHTS_DTYPE) == (jnp.float32, jnp.bfloat16)
    specs = param_specs(WAN21_VAE, 8)
    assert specs["conv_in"]["w"] == P(None, None, None, None, S)  # (3, 3, 3, 16, 384)
    assert specs["conv_in"]["b"] == P()
    assert specs["conv_out"]["w"] == P()  # 3 output channels do not divide by 8
    assert specs["post_quant_conv"]["w"] == P(None, S)  # 16 channels
    assert specs["mid"]["attn"]["qkv"]["w"] == P(None, S)
    assert specs["mid"]["attn"]["proj"]["w"] == P(S, None)
    assert specs["mid"]["attn"]["norm"] == P()
    assert specs["up0"]["resample"]["w"] == P(None, None, None, S)
    assert specs["up0"]["time_conv"]["w"] == P(None, None, None, None, S)
    assert param_spec(("x", "w"), (3, 3, 3, 8, 12), 8) == P()  # 12 does not divide by 8


def test_the_latent_of_a_video():
    assert latent_shape(720, 1280, 81) == (1, 16, 21, 90, 160)
    assert latent_shape(480, 832, 81, batch=2) == (2, 16, 21, 60, 104)


@pytest.mark.slow  # runs the decode sharded and whole on CPU devices
@pytest.mark.parametrize("spatial,batch", [(8, 1), (4, 2)])
def test_the_sharded_decode_equals_the_unsharded_one(spatial, batch):
    devices = jax.devices("cpu")
    if len(devices) < 8:
        pytest.skip("needs 8 CPU devices (conftest's --xla_force_host_platform_device_count=8)")
    spec = vae_mesh_spec(8, spatial)
    mesh = Mesh(np.array(devices[:8]).reshape(spec.shape), spec.axis_names)
    latent = (batch, TINY_VAE21.z_dim, 3, 4, 8)
    rng = np.random.default_rng(0)
    params = jax.tree.map(lambda s: jnp.asarray(rng.normal(0, 0.3, s.shape), jnp.float32), vae_param_shapes(TINY_VAE21))
    z = jnp.asarray(rng.normal(size=latent), jnp.float32)
    want = decode_latents(params, z, config=TINY_VAE21)
    decode = sharded_decode(TINY_VAE21, latent, mesh, weights_dtype=jnp.float32, to_uint8=False)
    placed = jax.tree.map(lambda a, s: jax.device_put(a, s.sharding), params, decode.inputs[0])
    got = decode.fn(placed, jax.device_put(z, NamedSharding(mesh, P())))
    assert got.shape == want.shape
    np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=1e-4, atol=1e-4)
