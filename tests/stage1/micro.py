"""Small programs whose partitioned collectives are known from their compiled HLO (shared by tests)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.hlo.builder import program_from_compiled
from aoizora.hlo.program import Program
from aoizora.stage1.dag import Prediction
from aoizora.stage1.ir import IRModule, group_axes, read_module
from aoizora.stage1.predict import predict


@dataclass
class Case:
    name: str
    lowered: Any
    module: IRModule
    prediction: Prediction
    _compiled: Any = None

    @property
    def compiled(self) -> Any:
        if self._compiled is None:
            self._compiled = self.lowered.compile()
        return self._compiled

    @property
    def program(self) -> Program:
        return program_from_compiled(self.compiled)

    def compiled_collectives(self) -> Counter:
        """(kind, mesh axes, per-device payload bytes) -> count per execution, from compiled HLO."""
        out: Counter = Counter()
        for c in self.program.collectives:
            axes = group_axes(c.groups, self.module.mesh) if c.groups else ("permute",)
            out[(c.kind.value, axes, c.payload_bytes)] += c.multiplicity
        return out

    def predicted_collectives(self) -> Counter:
        out: Counter = Counter()
        for c in self.prediction.comms:
            out[(c.kind, c.axes, int(c.payload_bytes))] += c.multiplicity
        return out


def mesh_2x4(topology, names=("x", "y"), shape=(2, 4)) -> Mesh:
    return Mesh(np.array(topology.devices, dtype=object).reshape(shape), names)


def case(name: str, fn, *args, **jit_kwargs) -> Case:
    lowered = jax.jit(fn, **jit_kwargs).lower(*args)
    module = read_module(lowered)
    return Case(name, lowered, module, predict(module))


def sds(mesh: Mesh, shape, spec: P, dtype=jnp.bfloat16) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))


def micro_cases(topology) -> list[Case]:
    """One program per implicit-communication rule, on a (x=2, y=4) mesh."""
    mesh = mesh_2x4(topology)
    ns = lambda spec: NamedSharding(mesh, spec)  # noqa: E731
    a_k = sds(mesh, (256, 1024), P(None, "y"))
    b_k = sds(mesh, (1024, 512), P("y", None))
    cases = [
        # contraction over a dimension both operands split: local dot + all-reduce
        case("contract-allreduce", lambda a, b: a @ b, a_k, b_k, out_shardings=ns(P())),
        # ... whose result is wanted split over the same axis: reduce-scatter
        case("contract-reducescatter", lambda a, b: a @ b, a_k, b_k, out_shardings=ns(P("y", None))),
        # an axis moving from one dimension to another: all-to-all
        case(
            "move-alltoall",
            lambda a: jax.lax.with_sharding_constraint(a * 2, ns(P(None, "y"))) + 1,
            sds(mesh, (1024, 1024), P("y", None)),
            out_shardings=ns(P(None, "y")),
        ),
        # an axis disappearing: all-gather
        case("drop-allgather", lambda a: a * 2, sds(mesh, (1024, 512), P("x", None)), out_shardings=ns(P())),
        # an axis appearing: a local slice, no communication
        case("add-slice", lambda a: a * 2, sds(mesh, (1024, 512), P()), out_shardings=ns(P("x", "y"))),
    ]
    # a shard_map written for another sharding: its operands must arrive in its in_specs
    body = jax.shard_map(lambda t: jax.lax.psum(t, "x"), mesh=mesh, in_specs=P("x", "y"), out_specs=P(None, "y"))
    cases.append(case("shard_map-boundary", body, sds(mesh, (1024, 512), P("y", None))))
    return cases


def splash_case(topology, heads: int = 8, seq: int = 1024, head_dim: int = 128) -> Case:
    """Splash attention (a Pallas `tpu_custom_call`) under shard_map with heads over `y`, fed
    sequence-sharded q/k/v: the kernel's operands must arrive heads-sharded (all-to-all over y)."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    mesh = mesh_2x4(topology)
    local_heads = heads // mesh.shape["y"]
    mask = sm.MultiHeadMask([sm.FullMask((seq, seq)) for _ in range(local_heads)])
    kernel = sk.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
    spec = P("y", None, None)
    body = jax.shard_map(lambda q, k, v: kernel(q, k, v), mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec,
                         check_vma=False)
    x = sds(mesh, (heads, seq, head_dim), P(None, "y", None))
    return case("kernel-boundary", body, x, x, x, out_shardings=NamedSharding(mesh, spec))
