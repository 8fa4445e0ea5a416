"""Programs compiled live by libtpu (v5e:2x4, v5e:4x4); expectations worked out by hand.

Mesh conventions: on v5e:2x4 the mesh is (x=2, y=4) over libtpu's device order, so logical
id = 4*x + y, y-groups are {0,1,2,3},{4,5,6,7} and x-pairs are (j, j+4).
"""

from __future__ import annotations

import pytest

from aoizora.hlo import (  # noqa: E402
    CollectiveKind,
    CollectiveMode,
    NodeKind,
    OpaqueCost,
    analyze,
    summarize,
)
from tests.hlo import programs  # noqa: E402

Y_GROUPS = ((0, 1, 2, 3), (4, 5, 6, 7))


@pytest.fixture(scope="module")
def compiled():
    """Compile each program once per test module (lazily, on first use)."""
    cache: dict[str, object] = {}

    def get(name: str, *args):
        key = name + repr(args)
        if key not in cache:
            cache[key] = getattr(programs, name)(*args)
        return cache[key]

    return get


def only(program, kind):
    found = [c for c in program.collectives if c.kind is kind]
    assert len(found) == 1, [(c.kind, c.name) for c in program.collectives]
    return found[0]


def test_sharded_matmul_all_reduce(compiled):
    prog = analyze(compiled("matmul_allreduce"))
    ar = only(prog, CollectiveKind.ALL_REDUCE)
    # local partial product: [256, 512/4] @ [512/4, 1024] -> bf16[256,1024]
    payload = 256 * 1024 * 2
    assert ar.groups == Y_GROUPS
    assert (ar.operand_bytes, ar.result_bytes, ar.payload_bytes) == (payload, payload, payload)
    assert ar.send_bytes == ar.recv_bytes == 2 * 3 * payload // 4
    assert ar.dtype == "bf16" and ar.mode is CollectiveMode.SYNC and ar.multiplicity == 1
    assert ar.algorithm is not None and ar.algorithm.emitter
    assert ar.algorithm.strategy is not None and ar.algorithm.has_reordering_map is not None
    # the matmul feeding it: 2 * 256 * 1024 * 128 FLOPs, and the compiler's cycle estimate
    producer = prog.nodes[ar.start].deps
    assert [prog.nodes[i].flops for i in producer] == [2 * 256 * 1024 * 128]
    assert prog.nodes[producer[0]].estimated_cycles > 0
    assert prog.device_ids == tuple(range(8))  # compiled object: device assignment recorded


def test_all_gather(compiled):
    prog = analyze(compiled("allgather"))
    ag = only(prog, CollectiveKind.ALL_GATHER)
    shard = 64 * 512 * 2  # bf16[256/4, 512]
    assert ag.groups == Y_GROUPS
    assert (ag.operand_bytes, ag.result_bytes) == (shard, 4 * shard)
    assert ag.send_bytes == ag.recv_bytes == 3 * shard
    assert ag.array_bytes == 256 * 512 * 2
    assert ag.dimensions == (0,)


def test_reduce_scatter(compiled):
    prog = analyze(compiled("reduce_scatter"))
    rs = only(prog, CollectiveKind.REDUCE_SCATTER)
    full = 256 * 1024 * 2
    assert rs.groups == Y_GROUPS
    assert (rs.operand_bytes, rs.result_bytes) == (full, full // 4)
    assert rs.send_bytes == 3 * full // 4
    assert rs.array_bytes == full
    # libtpu 0.0.42.1 emits it as an all-reduce + dynamic-slice collective fusion
    assert rs.mode in (CollectiveMode.FUSION, CollectiveMode.SYNC)


def test_shard_map_psum_all_to_all_ppermute(compiled):
    prog = analyze(compiled("shard_map_collectives"))
    block = 32 * 64 * 4  # f32[64/2, 256/4]
    ar = only(prog, CollectiveKind.ALL_REDUCE)
    assert ar.groups == Y_GROUPS and ar.operand_bytes == block
    a2a = only(prog, CollectiveKind.ALL_TO_ALL)
    assert a2a.groups == Y_GROUPS and a2a.operand_bytes == block
    assert a2a.send_bytes == 3 * block // 4
    cp = only(prog, CollectiveKind.COLLECTIVE_PERMUTE)
    assert set(cp.source_target_pairs) == {(j, j + 4) for j in range(4)} | {(j + 4, j) for j in range(4)}
    assert cp.operand_bytes == block and cp.send_bytes == block and cp.recv_bytes == block
    if cp.mode is CollectiveMode.ASYNC:
        assert cp.done > cp.start
        assert all(prog.nodes[i].kind is not NodeKind.COLLECTIVE_DONE for i in cp.overlap)
    rep = summarize(prog)
    assert rep["totals"]["collective_bytes_per_device"] == 3 * block


@pytest.mark.parametrize("layers", [6, 3])
def test_scanned_layers_trip_count(compiled, layers):
    prog = analyze(compiled("scanned_layers", layers))
    assert len(prog.loops) == 1
    loop = prog.loops[0]
    assert (loop.trip_count, loop.trip_count_source) == (layers, "induction")
    inside = [c for c in prog.collectives if c.loop == loop.index]
    assert inside, "the per-layer all-gather of the activations sits in the loop body"
    for c in inside:
        assert c.kind is CollectiveKind.ALL_GATHER and c.multiplicity == layers
        assert c.groups == Y_GROUPS and c.operand_bytes == 128 * 64 * 2
    # per layer: [128,256] @ [256,256/4] = 2*128*64*256 matmul FLOPs (+ a little elementwise)
    body = prog.nodes[loop.start:loop.end]
    flops = sum(n.flops * n.multiplicity for n in body)
    assert layers * 2 * 128 * 64 * 256 <= flops <= layers * 2 * 128 * 64 * 256 * 1.02
    # the summary counts the in-loop collective once per iteration
    rep = summarize(prog)
    ag_count = sum(e["count"] for e in rep["collectives"] if e["kind"] == "all-gather")
    assert ag_count == layers + sum(1 for c in prog.collectives if c.loop is None)
    # schedule view: body nodes are a contiguous range, deps point backwards
    assert all(d < n.index for n in prog.nodes for d in n.deps)
    assert prog.nodes[loop.end].kind is NodeKind.LOOP
    walked = list(prog.execution_order())
    assert len(walked) == sum(n.multiplicity for n in prog.nodes)
    assert sum(1 for n, _ in walked if n.collective is not None and n.loop == loop.index) == (
        layers * len(inside))


def test_splash_attention_is_opaque_with_cost_hook(compiled):
    c = compiled("splash_attention")
    prog = analyze(c)
    assert prog.collectives == []  # batch over x, heads over y: attention is local
    opaque = [n for n in prog.nodes if n.kind is NodeKind.OPAQUE]
    assert len(opaque) == 1 and opaque[0].custom_call_target == "tpu_custom_call"
    op = prog.opaque_op(opaque[0])
    assert "splash" in (op.kernel_name or "")
    s, d = programs.SPLASH["seq"], programs.SPLASH["head_dim"]
    local_heads = programs.SPLASH["heads"] // 4
    qkv = f"bf16[{local_heads},{s},{d}]"
    assert [str(x) for x in op.operand_shapes].count(qkv) == 3

    def hook(o):
        if "splash" not in (o.kernel_name or ""):
            return None
        h, sq, hd = o.operand_shapes[-1].dims  # q/k/v: [heads, seq, head_dim]
        return OpaqueCost(flops=4.0 * h * sq * sq * hd, hbm_bytes=4 * h * sq * hd * 2)

    costed = analyze(c, opaque_cost=hook)
    expected = 4.0 * local_heads * s * s * d
    node = next(n for n in costed.nodes if n.kind is NodeKind.OPAQUE)
    assert node.flops == expected
    assert costed.total_flops() - prog.total_flops() == expected
    assert summarize(costed)["opaque"][0]["flops"] == expected


def test_async_collective_fusion_overlaps_matmul(compiled):
    prog = analyze(compiled("overlapped_allgather"))
    ag = only(prog, CollectiveKind.ALL_GATHER)
    shard = 512 * 4096 * 2  # bf16[2048/4, 4096]
    assert ag.mode is CollectiveMode.ASYNC_FUSION
    assert ag.groups == Y_GROUPS
    assert (ag.operand_bytes, ag.result_bytes) == (shard, 4 * shard)
    assert ag.start < ag.done
    assert ag.steps and set(ag.steps) <= set(ag.overlap)
    # the matmul fused with the collective's steps: x[2048,4096] @ w[4096,1024] per device
    assert max(prog.nodes[i].flops for i in ag.steps) == 2 * 2048 * 1024 * 4096
    assert prog.nodes[ag.done].kind is NodeKind.COLLECTIVE_DONE
    assert ag.async_fusion_configs  # flag_start / flag_end of the fused steps


def test_collective_matmul_on_4x4(compiled):
    prog = analyze(compiled("collective_matmul"))
    shard = 1024 * 5120 * 2  # bf16[16384/16, 5120]
    permutes = [c for c in prog.collectives if c.kind is CollectiveKind.COLLECTIVE_PERMUTE]
    assert permutes and all(c.operand_bytes == shard for c in permutes)
    for c in permutes:  # every step passes shards one hop along a ring of the 16 devices
        assert len(c.source_target_pairs) == 16
        assert {(b - a) % 16 for a, b in c.source_target_pairs} <= {1, 15}
    assert len(prog.loops) == 1 and prog.loops[0].trip_count_source == "induction"
    received = sum(c.recv_bytes * c.multiplicity for c in permutes)
    assert received >= 15 * shard  # at least the 15 remote shards arrive at each device
    in_loop = [c for c in permutes if c.loop == 0]
    assert in_loop and all(c.multiplicity == prog.loops[0].trip_count for c in in_loop)
    assert any(c.overlap for c in in_loop)  # partial matmuls run while shards move
    # total matmul work is the full [16384,5120] @ [5120,320] product per device
    mm = 2 * 16384 * 5120 * 320
    assert mm <= prog.total_flops() <= mm * 1.05


def test_all_reduce_on_4x4(compiled):
    prog = analyze(compiled("allreduce_4x4"))
    ar = only(prog, CollectiveKind.ALL_REDUCE)
    assert ar.groups == tuple(tuple(range(4 * i, 4 * i + 4)) for i in range(4))
    assert ar.operand_bytes == 512 * 256 * 2


def test_groups_are_logical_positions_and_device_ids_map_them(compiled):
    from aoizora.toolchain import compile_only_devices

    prog = analyze(compiled("permuted_mesh_allreduce"))
    ar = only(prog, CollectiveKind.ALL_REDUCE)
    assert ar.groups == Y_GROUPS  # positions in mesh.devices.flat, not device ids
    devs = compile_only_devices("v5e:2x4")
    assert prog.device_ids == tuple(devs[i].id for i in programs.PERMUTED_ORDER)
    assert ar.operand_bytes == 256 * 1024 * 2
    assert ar.algorithm is not None and ar.algorithm.has_reordering_map is not None


def test_fsdp_tp_scan_on_4x4_iota_groups_and_async_fusion(compiled):
    c = compiled("fsdp_tp_scan")
    text = c.as_text()
    assert "replica_groups=[4,4]<=[4,4]T(1,0)" in text  # the transposed-iota form, live
    prog = analyze(text)
    cfg = programs.FSDP_TP
    (loop,) = prog.loops
    assert (loop.trip_count, loop.trip_count_source) == (cfg["layers"], "induction")
    fsdp_groups = tuple(tuple(t + 4 * f for f in range(4)) for t in range(4))
    tensor_groups = tuple(tuple(4 * f + t for t in range(4)) for f in range(4))
    gathers = [x for x in prog.collectives if x.kind is CollectiveKind.ALL_GATHER]
    shard = (cfg["dim"] // 4) * (cfg["ffn"] // 4) * 2  # w1 / w2 block per device, bf16
    assert len(gathers) == 2  # w1 and w2, once per layer
    for g in gathers:
        assert g.groups == fsdp_groups and g.loop == loop.index
        assert (g.operand_bytes, g.result_bytes) == (shard, 4 * shard)
        assert g.multiplicity == cfg["layers"]
    fused = [g for g in gathers if g.mode is CollectiveMode.ASYNC_FUSION]
    assert fused and all(g.steps and g.start < g.done for g in fused)
    (ar,) = [x for x in prog.collectives if x.kind is CollectiveKind.ALL_REDUCE]
    partial = (cfg["tokens"] // 4) * cfg["dim"] * 2  # [T/4, F/4] @ [F/4, D] partial, bf16
    assert ar.groups == tensor_groups and ar.operand_bytes == partial
    assert ar.multiplicity == cfg["layers"]
    # per layer and device: [T/4, D] @ [D, F/4] and [T/4, F/4] @ [F/4, D]
    mm = cfg["layers"] * 2 * (2 * (cfg["tokens"] // 4) * cfg["dim"] * (cfg["ffn"] // 4))
    assert mm <= prog.total_flops() <= mm * 1.02


def test_shard_map_on_4x4(compiled):
    prog = analyze(compiled("shard_map_4x4"))
    block = 128 * 256 * 2  # bf16[512/4, 1024/4]
    a_groups = tuple(tuple(b + 4 * a for a in range(4)) for b in range(4))  # vary a, fix b
    b_groups = tuple(tuple(4 * a + b for b in range(4)) for a in range(4))
    ag = only(prog, CollectiveKind.ALL_GATHER)
    assert ag.groups == a_groups and (ag.operand_bytes, ag.result_bytes) == (block, 4 * block)
    ar = only(prog, CollectiveKind.ALL_REDUCE)
    assert ar.groups == b_groups and ar.operand_bytes == block
    a2a = only(prog, CollectiveKind.ALL_TO_ALL)
    assert a2a.groups == a_groups and a2a.operand_bytes == block
    assert a2a.array_bytes == 4 * block and a2a.send_bytes == 3 * block // 4
