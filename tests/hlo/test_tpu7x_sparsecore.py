"""TPU7x programs: libtpu offloads collectives to the SparseCores as asynchronous calls."""

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.hlo.builder import program_from_compiled
from aoizora.hlo.parser import parse_hlo
from aoizora.hlo.program import CollectiveKind, CollectiveMode, NodeKind
from aoizora.placement import MeshSpec, jax_default_placement
from aoizora.topology import get_topology


def _compiled_psum():
    topo = get_topology("tpu7x:2x2x1")
    mesh = jax_default_placement(topo, MeshSpec.parse("u=2,r=4")).jax_mesh(topo)
    spec = P(("u", "r"), None)
    x = jax.ShapeDtypeStruct((2048, 1024), jnp.bfloat16, sharding=NamedSharding(mesh, spec))
    f = jax.jit(jax.shard_map(lambda t: jax.lax.psum(t, "u"), mesh=mesh, in_specs=spec, out_specs=spec))
    return f.lower(x).compile()


def test_sparsecore_call_of_an_all_reduce_is_an_async_collective():
    compiled = _compiled_psum()
    text = compiled.as_text()
    assert 'execution_thread="sparsecore"' in text and "call-start" in text  # what libtpu 0.0.42.1 prints
    module = parse_hlo(text)
    assert len(module.computations) >= 3
    program = program_from_compiled(compiled)
    (coll,) = program.collectives
    assert coll.kind == CollectiveKind.ALL_REDUCE and coll.mode == CollectiveMode.ASYNC
    assert sorted(map(sorted, coll.groups)) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert coll.operand_bytes == 256 * 1024 * 2
    kinds = [n.kind for n in program.nodes]
    assert kinds.index(NodeKind.COLLECTIVE_START) < kinds.index(NodeKind.COLLECTIVE_DONE)
    assert NodeKind.OPAQUE not in kinds  # PrepareAsyncCall* are bookkeeping, not kernels


def test_int64_max_cycle_estimate_means_no_estimate():
    from aoizora.hlo.costs import estimated_cycles

    sentinel = {"window_config": {"estimated_cycles": "9223372036854775807",
                                  "cost_model_type": "COST_MODEL_TYPE_INVALID"}}
    assert estimated_cycles(sentinel) is None  # libtpu 0.0.42.1 prints this for some TPU7x copies
    assert estimated_cycles({"window_config": {"estimated_cycles": "7388",
                                               "cost_model_type": "COST_MODEL_TYPE_INVALID"}}) == 7388
    assert estimated_cycles({"estimated_cycles": "12"}) == 12
