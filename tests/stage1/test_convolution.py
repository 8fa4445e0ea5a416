"""Stage 1's convolution rule: the multiply-adds of the taps that read the input, split over the devices
that share the output's batch and spatial positions (the VAE decode's convolutions, width-sharded)."""

from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.stage1 import predict, read_module
from aoizora.stage1.op_rules import window_reads


def brute_force_reads(size: int, out_size: int, kernel: int, low: int, stride: int, dilation: int) -> int:
    return sum(0 <= o * stride + k * dilation - low < size for o in range(out_size) for k in range(kernel))


def output_size(size: int, kernel: int, low: int, high: int, stride: int, dilation: int) -> int:
    return (size + low + high - (kernel - 1) * dilation - 1) // stride + 1


WINDOWS = [(size, kernel, low, high, stride, dilation) for size, kernel, low, high, stride, dilation
           in itertools.product((1, 5, 8), (1, 3, 4), (0, 1, 2), (0, 1), (1, 2), (1, 2))
           if output_size(size, kernel, low, high, stride, dilation) >= 1]


@pytest.mark.parametrize("size, kernel, low, high, stride, dilation", WINDOWS)
def test_window_reads_counts_the_taps_inside_the_input(size, kernel, low, high, stride, dilation):
    out_size = output_size(size, kernel, low, high, stride, dilation)
    assert window_reads(size, out_size, kernel, low, stride, dilation) == \
        brute_force_reads(size, out_size, kernel, low, stride, dilation)


def test_a_width_sharded_3d_convolution_costs_each_device_its_share_of_the_real_taps(topo_2x4):
    """(batch 1, 3 frames, 8 × 64 pixels, 16 channels) → 32 channels by a 3×3×3 kernel, no temporal
    padding and one pixel of zeros around the image, the width over 8 devices: each device's
    flops are 2 · (the multiply-adds of taps that read the image) / 8, and the output keeps the
    input's width sharding."""
    mesh = Mesh(np.array(topo_2x4.devices).reshape(1, 8), ("redundant", "spatial"))
    x_spec = NamedSharding(mesh, P(None, None, None, "spatial", None))

    def conv(x, w):
        x = jax.lax.with_sharding_constraint(x, x_spec)
        y = jax.lax.conv_general_dilated(x, w, (1, 1, 1), ((0, 0), (1, 1), (1, 1)),
                                         dimension_numbers=("NDHWC", "DHWIO", "NDHWC"))
        return jax.lax.with_sharding_constraint(y, x_spec)

    x = jax.ShapeDtypeStruct((1, 3, 8, 64, 16), jnp.float32, sharding=x_spec)
    w = jax.ShapeDtypeStruct((3, 3, 3, 16, 32), jnp.float32, sharding=NamedSharding(mesh, P()))
    module = read_module(jax.jit(conv).lower(x, w).compiler_ir("stablehlo"))
    prediction = predict(module)
    nodes = [n for n in prediction.ops if n.op == "stablehlo.convolution"]
    assert len(nodes) == 1
    taps = (brute_force_reads(3, 1, 3, 0, 1, 1) * brute_force_reads(8, 8, 3, 1, 1, 1)
            * brute_force_reads(64, 64, 3, 1, 1, 1))
    assert nodes[0].flops == pytest.approx(2 * 1 * 32 * 16 * taps / 8)
    # no collective moves the activations: the width stays split, only the (replicated) kernel is whole
    assert not [c for c in prediction.comms if c.payload_bytes > 0.01 * 3 * 8 * 64 * 16 * 4]
