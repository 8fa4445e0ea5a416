"""The rotary embedding's two partner forms: the same rotation (against a complex multiplication
in float64), different compiled layouts (libtpu compile-only)."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from aoizora import toolchain
from aoizora.errors import ShapeError
from aoizora.models.wan.transformer.config import ROPE_PARTNERS, WAN_T2V_14B
from aoizora.models.wan.transformer.rope import apply_rope


def _complex_reference(x: np.ndarray, angles: np.ndarray) -> np.ndarray:
    """Channel pairs (2j, 2j+1) as complex numbers times exp(i·angle), in float64."""
    z = x[..., 0::2].astype(np.float64) + 1j * x[..., 1::2].astype(np.float64)
    z = z * np.exp(1j * angles)[None, :, None, :]
    out = np.empty(x.shape, np.float64)
    out[..., 0::2], out[..., 1::2] = z.real, z.imag
    return out


@pytest.mark.parametrize("partner", ROPE_PARTNERS)
@pytest.mark.parametrize("dtype, rtol", [(jnp.float32, 2e-6), (jnp.bfloat16, 8e-3)])
def test_each_partner_form_is_the_pairwise_complex_rotation(partner, dtype, rtol):
    rng = np.random.default_rng(7)
    x = np.asarray(jnp.asarray(rng.standard_normal((2, 48, 3, 128)) * 4, dtype)).astype(np.float64)
    angles = rng.uniform(-60.0, 60.0, (48, 64))
    table = np.repeat(angles, 2, axis=-1) if partner == "matmul" else angles  # as rope_tables makes them
    got = jax.jit(apply_rope, static_argnums=3)(
        jnp.asarray(x, dtype), jnp.asarray(np.cos(table), jnp.float32), jnp.asarray(np.sin(table), jnp.float32),
        partner)
    want = _complex_reference(x, angles)
    # a rotation keeps each pair's length, so the error scale is the pair's norm, not the channel
    scale = np.repeat(np.hypot(x[..., 0::2], x[..., 1::2]), 2, axis=-1) + 1e-6
    assert np.max(np.abs(np.asarray(got, np.float64) - want) / scale) < rtol


def test_an_unknown_partner_form_is_refused_with_the_choices():
    with pytest.raises(ShapeError, match="matmul, reshape"):
        WAN_T2V_14B.replace(rope_partner="complex")


def _minor_dims_of_two(partner: str) -> list[str]:
    """Array shapes of the compiled rotation (libtpu, one v5e device) whose minor dimension is 2."""
    dev = toolchain.compile_only_devices("v5e:2x2")[0]
    x = jax.ShapeDtypeStruct((1, 512, 8, 128), jnp.bfloat16, sharding=jax.sharding.SingleDeviceSharding(dev))
    table = jax.ShapeDtypeStruct((512, 128 if partner == "matmul" else 64), jnp.float32,
                                 sharding=jax.sharding.SingleDeviceSharding(dev))
    text = jax.jit(apply_rope, static_argnums=3).lower(x, table, table, partner).compile().as_text()
    return re.findall(r"\b(?:bf16|f32)\[[0-9,]*,2\]", text)


def test_the_matmul_form_keeps_the_head_dim_minor_where_the_reshape_form_does_not():
    assert _minor_dims_of_two("reshape"), "the (64, 2) view should reach the compiled program"
    assert _minor_dims_of_two("matmul") == []
