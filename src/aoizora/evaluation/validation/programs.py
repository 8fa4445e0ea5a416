"""Compiled test programs for validating Q2: collective micro-programs and a transformer block.

Each is compiled once with libtpu for the slice (over the jax-default mesh order; the replica
groups are in logical mesh positions, so one compile serves every placement).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.errors import MeshSpecError
from aoizora.hlo.builder import program_from_compiled
from aoizora.hlo.program import Program
from aoizora.placement import MeshSpec, jax_default_placement
from aoizora.topology import Topology
from aoizora.workloads.transformer import TransformerConfig, lower

MIB = 2**20


@dataclass(frozen=True)
class NamedProgram:
    name: str
    program: Program


def collective_microprograms(topology: Topology, mesh_spec: MeshSpec,
                             payload_bytes: int = 16 * MIB) -> Iterator[NamedProgram]:
    """psum, all_gather, psum_scatter, all_to_all and a ring ppermute over each mesh axis (and all axes)."""
    mesh = jax_default_placement(topology, mesh_spec).jax_mesh(topology)
    names = mesh_spec.axis_names
    elems = payload_bytes // 2
    rows = 256 * mesh.size
    cols = max(elems // 256, 128)
    spec_all = P(names, None)
    x = jax.ShapeDtypeStruct((rows, cols), jnp.bfloat16, sharding=NamedSharding(mesh, spec_all))

    def build(tag: str, body) -> NamedProgram:
        fn = jax.shard_map(body, mesh=mesh, in_specs=spec_all, out_specs=spec_all, check_vma=False)
        compiled = jax.jit(fn).lower(x).compile()
        return NamedProgram(tag, program_from_compiled(compiled))

    axes: list[str | tuple[str, ...]] = [a for a, n in zip(names, mesh_spec.axis_sizes, strict=True) if n > 1]
    if len(axes) > 1:
        axes.append(tuple(axes))  # type: ignore[arg-type]  # every entry so far is one axis's name
    for axis in axes:
        label = axis if isinstance(axis, str) else "+".join(axis)
        size = mesh_spec.axis_sizes[names.index(axis)] if isinstance(axis, str) else mesh.size
        yield build(f"psum[{label}]", lambda t, a=axis: jax.lax.psum(t, a))
        yield build(
            f"all_gather[{label}]",
            lambda t, a=axis: jax.lax.all_gather(t, a, axis=0, tiled=True)[: t.shape[0]] * 2,
        )
        yield build(
            f"psum_scatter[{label}]",
            lambda t, a=axis, n=size: jnp.tile(jax.lax.psum_scatter(t, a, scatter_dimension=0, tiled=True), (n, 1)),
        )
        yield build(f"all_to_all[{label}]", lambda t, a=axis: jax.lax.all_to_all(t, a, 0, 0, tiled=True))
        if isinstance(axis, str):
            perm = [(i, (i + 1) % size) for i in range(size)]
            yield build(f"ppermute[{label}]", lambda t, a=axis, p=perm: jax.lax.ppermute(t, a, p))


def transformer_program(topology: Topology, mesh_spec: MeshSpec, cfg: TransformerConfig, rules) -> NamedProgram:
    """A compiled scanned transformer for the mesh (jax-default order)."""
    mesh = jax_default_placement(topology, mesh_spec).jax_mesh(topology)
    compiled = lower(cfg, mesh, rules).compile()
    return NamedProgram(f"transformer[{cfg.layers}x{cfg.dim}]", program_from_compiled(compiled))


def default_suite(topology: Topology, mesh_spec: MeshSpec, which: str = "all") -> list[NamedProgram]:
    """Programs `aoizora validate` compiles when no HLO is given.

    micro: every collective over each mesh axis; transformer: a 4-layer scanned block whose
    logical axes (batch, seq, heads/mlp) follow the mesh axes in order.
    """
    programs: list[NamedProgram] = []
    if which in ("micro", "all"):
        programs.extend(collective_microprograms(topology, mesh_spec))
    if which in ("transformer", "all"):
        names = list(mesh_spec.axis_names)
        roles = ["batch", "seq", "heads"][-len(names):] if len(names) <= 3 else None
        if roles is None:
            raise MeshSpecError(f"the built-in transformer suite takes meshes of up to 3 axes, not {mesh_spec}")
        rules = {role: name for role, name in zip(roles, names, strict=True)}
        if "heads" in rules:
            rules["mlp"] = rules["heads"]
        cfg = TransformerConfig(layers=4, dim=1024, heads=16, head_dim=64, mlp=4096, seq=4096, batch=2)
        programs.append(transformer_program(topology, mesh_spec, cfg, rules))
    return programs
