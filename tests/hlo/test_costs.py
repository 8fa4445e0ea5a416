"""FLOPs of dots that libtpu lowers to padded convolutions, checked against the dot they came from."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.hlo import analyze
from aoizora.hlo.builder import build_program
from aoizora.placement import MeshSpec, jax_default_placement
from aoizora.topology import get_topology

PADDED_CONV = """HloModule m, \
entry_computation_layout={(bf16[2,64,32]{2,1,0}, bf16[32,16,8]{2,1,0})->bf16[2,64,16,8]{3,2,1,0}}

ENTRY %main (p0: bf16[2,64,32], p1: bf16[32,16,8]) -> bf16[2,64,16,8] {
  %p0 = bf16[2,64,32]{2,1,0} parameter(0)
  %p1 = bf16[32,16,8]{2,1,0} parameter(1)
  %b0 = bf16[2,64,32,1]{3,2,1,0} bitcast(%p0)
  %b1 = bf16[32,16,8,1]{3,2,1,0} bitcast(%p1)
  ROOT %conv = bf16[2,64,16,8]{3,2,1,0} convolution(%b0, %b1), window={size=1x16 pad=0_0x15_15 rhs_reversal=0x1}, \
dim_labels=0bf1_i1o0->0b1f
}
"""


def test_padded_window_counts_only_real_input():
    # einsum bsd,dhk->bshk with b=2, s=64, d=32, h=16, k=8, written as libtpu writes it: the
    # head axis is a window of 16 sliding over a spatial dimension of size 1 padded by 15.
    prog = build_program(PADDED_CONV)
    (conv,) = [n for n in prog.nodes if n.opcode == "convolution"]
    assert conv.flops == 2 * (2 * 64) * 32 * (16 * 8)


def test_compiled_einsum_flops_match_the_math():
    topo = get_topology("v5e:2x2")
    mesh = jax_default_placement(topo, MeshSpec.parse("c=4")).jax_mesh(topo)
    b, s, d, h, k = 2, 4096, 1024, 16, 64
    x = jax.ShapeDtypeStruct((b, s, d), jnp.bfloat16, sharding=NamedSharding(mesh, P(None, "c", None)))
    w = jax.ShapeDtypeStruct((d, h, k), jnp.bfloat16, sharding=NamedSharding(mesh, P()))
    compiled = jax.jit(lambda x, w: jnp.einsum("bsd,dhk->bshk", x, w)).lower(x, w).compile()
    prog = analyze(compiled)
    per_device = 2 * b * (s // 4) * d * h * k
    assert np.isclose(prog.total_flops(), per_device, rtol=0.05)
