"""The IR reader on real lowered programs: a scan, a shard_map body, a Pallas custom call."""

from jax.sharding import PartitionSpec as P

from aoizora.stage1.ir import Sharding, group_axes, read_module
from aoizora.workloads.transformer import TransformerConfig, lower


def test_scan_trip_count_calls_and_shardings(topo_2x4):
    from micro import mesh_2x4

    mesh = mesh_2x4(topo_2x4, ("data", "tensor"), (2, 4))
    rules = {"batch": "data", "seq": None, "heads": "tensor", "mlp": "tensor", "embed": None}
    cfg = TransformerConfig(layers=5, dim=128, heads=4, head_dim=32, mlp=256, seq=64, batch=2)
    mod = read_module(lower(cfg, mesh, rules))
    assert mod.mesh.axes == (("data", 2), ("tensor", 4))
    assert mod.num_partitions == 8
    loops = mod.while_loops()
    assert [lp.trip_count for lp in loops] == [5]
    callees = {callee for _, callee in mod.calls()}
    assert any(name.startswith("closed_call") for name in callees)
    assert all(callee in mod.funcs for callee in callees)
    entry = mod.entry
    # activations [batch, seq, dim] sharded over data on the batch dimension
    x = next(s for s, t in zip(entry.arg_shardings, entry.arg_types, strict=True) if t.shape == (2, 64, 128))
    assert x.dims == (("data",), (), ())
    # w1 [layers, dim, mlp] sharded over tensor on mlp
    w1 = next(s for s, t in zip(entry.arg_shardings, entry.arg_types, strict=True) if t.shape == (5, 128, 256))
    assert w1.dims == ((), (), ("tensor",))
    cons = mod.sharding_constraints()
    assert Sharding("mesh", (("data",), (), ("tensor",), ())) in cons  # q/k/v heads constraint
    assert Sharding("mesh", (("data",), (), ())) in cons  # residual constraint


def test_shard_map_body_and_collectives(topo_2x4):
    import jax
    from micro import mesh_2x4, sds

    mesh = mesh_2x4(topo_2x4, ("data", "tensor"), (2, 4))

    def body(t):
        s = jax.lax.psum(t, "tensor")
        g = jax.lax.all_gather(t, "data", axis=0, tiled=True)
        p = jax.lax.ppermute(t, "tensor", [(i, (i + 1) % 4) for i in range(4)])
        return s + g[: t.shape[0]] + p

    fn = jax.shard_map(body, mesh=mesh, in_specs=P("data", "tensor"), out_specs=P("data", "tensor"))
    mod = read_module(jax.jit(fn).lower(sds(mesh, (64, 256), P("data", "tensor"))))
    (mc,) = mod.manual_computations()
    assert set(mc.manual_axes) == {"data", "tensor"}
    assert mc.in_shardings[0].dims == (("data",), ("tensor",))
    kinds = {c.kind: c for c in mc.collectives}
    assert set(kinds) == {"all-reduce", "all-gather", "collective-permute"}
    assert group_axes(kinds["all-reduce"].replica_groups, mod.mesh) == ("tensor",)
    assert group_axes(kinds["all-gather"].replica_groups, mod.mesh) == ("data",)
    assert kinds["all-gather"].dimension == 0
    assert len(kinds["collective-permute"].source_target_pairs) == 8
    # the body's block arguments are the local shard
    manual_op = next(op for op, _ in mod.walk() if op.name == "sdy.manual_computation")
    assert manual_op.regions[0].arg_types[0].shape == (32, 64)


def test_pallas_custom_call(micro):
    case = micro["kernel-boundary"]
    calls = case.module.custom_calls()
    assert [c.target for c in calls] == ["tpu_custom_call"]
    assert calls[0].in_manual
    # splash attention receives the local q: 8 heads / 4 = 2 heads
    assert calls[0].operand_types[0] is not None
    assert any(t is not None and t.shape[:1] == (2,) and 128 in t.shape for t in calls[0].operand_types)
    (mc,) = case.module.manual_computations()
    assert mc.custom_call_targets == ["tpu_custom_call"]


def test_reader_needs_no_mlir_after_conversion(topo_2x4):
    """The converted module is plain Python: walking it twice gives the same ops."""
    from micro import micro_cases

    mod = micro_cases(topo_2x4)[0].module
    first = [op.name for op, _ in mod.walk()]
    assert first == [op.name for op, _ in mod.walk()]
    assert "stablehlo.dot_general" in first
