"""Parser, attribute readers and builder on hand-written HLO (syntax edge cases, bad input)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from aoizora.errors import HloParseError
from aoizora.hlo import CollectiveKind, CollectiveMode, NodeKind, OpaqueCost, analyze, parse_hlo
from aoizora.hlo.algorithm import parse_algorithm_config
from aoizora.hlo.attrs import iota_ids, parse_pairs, parse_replica_groups

FIXTURE = Path(__file__).parent / "fixtures" / "syntax_edge_cases.hlo"


def _mini(body: str, header: str = "HloModule m, num_partitions=8") -> str:
    return f"{header}\n\nENTRY %main () -> f32[] {{\n{body}\n}}\n"


# -- shapes -----------------------------------------------------------------------------------
def test_tpu_layout_shape_sizes_and_memory_space():
    text = _mini(
        "  ROOT %p = bf16[1,75600,5120]{2,1,0:T(8,128)(2,1)S(1)} parameter(0)"
    )
    inst = parse_hlo(text).entry.root
    assert inst.shape.dtype == "bf16"
    assert inst.shape.dims == (1, 75600, 5120)
    assert inst.shape.layout == "2,1,0:T(8,128)(2,1)S(1)"
    assert inst.shape.byte_size == 75600 * 5120 * 2
    assert inst.shape.memory_space == 1


def test_tuple_shape_with_index_comments_and_scalars():
    text = _mini(
        "  ROOT %p = (s32[]{:T(128)}, f32[4,4]{1,0}, /*index=2*/(pred[], u8[3]), token[]) parameter(0)"
    )
    shape = parse_hlo(text).entry.root.shape
    assert shape.is_tuple
    assert [str(s) for s in shape.leaves()] == ["s32[]", "f32[4,4]", "pred[]", "u8[3]", "token[]"]
    assert shape.byte_size == 4 + 64 + 1 + 3 + 0


# -- replica groups in every printed form -----------------------------------------------------
@pytest.mark.parametrize(
    ("raw", "device_ids", "n", "expected"),
    [
        ("{{0,4},{1,5}}", None, 8, ((0, 4), (1, 5))),
        ("{}", None, 4, ((0, 1, 2, 3),)),
        ("[2,4]<=[8]", None, 8, ((0, 1, 2, 3), (4, 5, 6, 7))),
        ("[4,2]<=[2,4]T(1,0)", None, 8, ((0, 4), (1, 5), (2, 6), (3, 7))),
        ("[2,4]<=[2,2,2]T(2,1,0)", None, 8, ((0, 4, 2, 6), (1, 5, 3, 7))),
        ("mesh['axis_0'=16,'axis_1'=1] {'axis_0'}", None, 16, (tuple(range(16)),)),
        # as libtpu 0.0.42.1 prints a y-axis all-reduce on a (2,4) mesh of v5e:2x4
        ("mesh['axis_0'=1,'axis_1'=4,'axis_2'=2]", "([2,4]T(1,0)) {'axis_1'}", 8,
         ((0, 1, 2, 3), (4, 5, 6, 7))),
        ("mesh['axis_0'=4,'axis_1'=1,'axis_2'=2]", "([2,4]T(1,0)) {'axis_2'}", 8,
         ((0, 4), (1, 5), (2, 6), (3, 7))),
        ("mesh['a'=2,'b'=4] {'b','a'}", None, 8, ((0, 4, 1, 5, 2, 6, 3, 7),)),
        ("mesh['a'=2,'b'=4]", "(7,6,5,4,3,2,1,0) {'a'}", 8, ((7, 3), (6, 2), (5, 1), (4, 0))),
        ("mesh['a'=8] {'a':(1)2}", None, 8, ((0, 4), (1, 5), (2, 6), (3, 7))),
        ("mesh['a'=8] {'a':(2)2}", None, 8, ((0, 2), (1, 3), (4, 6), (5, 7))),
        ("mesh['a'=8] {'a':(1)2,'a':(4)2}", None, 8, ((0, 1, 4, 5), (2, 3, 6, 7))),
    ],
)
def test_replica_group_forms(raw, device_ids, n, expected):
    assert parse_replica_groups(raw, device_ids, n) == expected


def test_iota_transpose_matches_numpy():
    ref = np.arange(24).reshape(2, 3, 4).transpose(2, 0, 1).ravel().tolist()
    assert iota_ids([2, 3, 4], [2, 0, 1]) == ref


def test_pairs_and_bad_group_text():
    assert parse_pairs("{{0,1},{1,0}}") == ((0, 1), (1, 0))
    with pytest.raises(HloParseError, match="column"):
        parse_replica_groups("{{0,1},{2,x}}", None, 4)
    with pytest.raises(HloParseError):
        parse_replica_groups("[2,4]<=[7]", None, 8)
    with pytest.raises(HloParseError):
        parse_pairs("{{0,1,2}}")


def test_algorithm_config_fields():
    cfg = parse_algorithm_config({
        "emitter": "RotatedPincerEmitter",
        "strategy": "UniDirection1DRingStrategy",
        "debug": "\nStrategyRing{colors:2 phases:1 cores:{4} has_reordering_map:0},is_multistep:1",
    })
    assert cfg.emitter == "RotatedPincerEmitter"
    assert cfg.strategy == "UniDirection1DRingStrategy"
    assert cfg.strategies == ("StrategyRing",)
    assert (cfg.colors, cfg.phases, cfg.has_reordering_map, cfg.is_multistep) == (2, 1, False, True)
    ag = parse_algorithm_config({"emitter": "1DAllGatherNonMajorDim",
                                 "debug": "\ngroup_size = 4 \nhas_reordering_map: true \n"})
    assert ag.has_reordering_map is True and ag.fields["group_size"] == "4"


# -- the hand-written module --------------------------------------------------------------------
@pytest.fixture(scope="module")
def edge():
    return analyze(FIXTURE.read_text())


def test_fixture_loops_trip_counts(edge):
    induction, known = edge.loops
    assert (induction.trip_count, induction.trip_count_source) == (10, "induction")
    assert (known.trip_count, known.trip_count_source) == (3, "backend_config")
    # body emitted once per while, inline, closed by the loop node
    assert edge.nodes[induction.end].kind is NodeKind.LOOP
    body = edge.nodes[induction.start:induction.end]
    assert {n.multiplicity for n in body} == {10}
    assert {n.loop for n in body} == {0}


def test_fixture_async_pairs_and_overlap(edge):
    ars = [c for c in edge.collectives if c.name == "b.ars"]
    assert [c.multiplicity for c in ars] == [10, 3]
    first = ars[0]
    assert first.kind is CollectiveKind.ALL_REDUCE and first.mode is CollectiveMode.ASYNC
    assert first.groups == ((0, 2), (1, 3))
    assert [edge.nodes[i].name for i in first.overlap] == ["b.t"]
    assert first.algorithm.colors == 2 and first.algorithm.has_reordering_map is False
    # f32[8,128] = 4096 B; ring all-reduce over 2: each device sends 2*(1/2)*4096
    assert (first.operand_bytes, first.send_bytes) == (4096, 4096)

    ag = next(c for c in edge.collectives if c.name == "ags")
    assert (ag.kind, ag.operand_bytes, ag.result_bytes, ag.send_bytes) == (
        CollectiveKind.ALL_GATHER, 1024, 4096, 3 * 1024)
    assert [edge.nodes[i].name for i in ag.overlap] == ["mystery"]

    rs = next(c for c in edge.collectives if c.name == "as")
    assert rs.kind is CollectiveKind.REDUCE_SCATTER and rs.mode is CollectiveMode.ASYNC
    assert (rs.operand_bytes, rs.result_bytes, rs.send_bytes) == (4096, 1024, 3072)
    assert rs.groups == ((0, 1, 2, 3),)


def test_fixture_sync_collectives(edge):
    a2a = next(c for c in edge.collectives if c.name == "a2a")
    assert a2a.operand_bytes == 2 * 1024 and a2a.send_bytes == 1024
    cp = next(c for c in edge.collectives if c.name == "cp")
    assert cp.source_target_pairs == ((0, 1), (1, 2), (2, 3), (3, 0))
    assert cp.groups == () and cp.send_bytes == 1024


def test_fixture_unknown_and_opaque_ops(edge):
    assert edge.unknown_ops == ["mystery (frobnicate)"]
    kinds = {n.name: n.kind for n in edge.nodes}
    assert kinds["mystery"] is NodeKind.UNKNOWN
    assert kinds["kern"] is NodeKind.OPAQUE
    # the dot that consumes the unknown op still depends on it
    dot = next(n for n in edge.nodes if n.name == "dot")
    assert edge.nodes[dot.deps[0]].name == "mystery"
    assert dot.flops == 2 * 8 * 8 * 128


def test_fixture_call_inlined_and_free_ops_skipped(edge):
    names = [n.name for n in edge.nodes]
    assert "q.exp" in names  # the callee's instruction, inlined
    for free in ("arg", "zero", "init", "looped", "called", "out"):
        assert free not in names


def test_opaque_cost_hook_receives_op(edge):
    seen = []

    def hook(op):
        seen.append(op)
        if op.target == "tpu_custom_call":
            return OpaqueCost(flops=1e6, seconds=2e-6)
        return None

    costed = edge.with_opaque_cost(hook)
    kern = next(n for n in costed.nodes if n.name == "kern")
    assert (kern.flops, kern.seconds) == (1e6, 2e-6)
    assert {op.target for op in seen} == {"tpu_custom_call", "frobnicate"}
    op = next(op for op in seen if op.target == "tpu_custom_call")
    assert [str(s) for s in op.operand_shapes] == ["f32[2,128]", "f32[2,128]"]
    assert op.backend_config == "opaque-string-config"
    # the original program is untouched
    assert next(n for n in edge.nodes if n.name == "kern").flops == 0.0


# -- bad input ---------------------------------------------------------------------------------
def test_truncated_text_names_line_and_column():
    text = FIXTURE.read_text()
    cut = text[: text.index("%dot = ")]  # ends inside the entry computation
    with pytest.raises(HloParseError) as exc:
        parse_hlo(cut)
    assert exc.value.line == cut.count("\n") + 1
    assert "line" in str(exc.value) and "column" in str(exc.value)


def test_truncated_inside_an_attribute():
    text = FIXTURE.read_text()
    cut = text[: text.index("source_target_pairs={{0,1},{1,2}") + 25]
    with pytest.raises(HloParseError, match=r"line \d+, column \d+"):
        parse_hlo(cut)


@pytest.mark.parametrize(
    ("text", "line", "column"),
    [
        ("hello world\n", 1, 1),
        ("", 1, 1),
        ("HloModule m\n\nENTRY %main () -> f32[] {\n  %x = f32[] parameter(0)\n  %y = f32[] add(%x %x)\n}\n", 5, 21),
        ("HloModule m\n\nENTRY %main () -> f32[] {\n  %x = f32[ parameter(0)\n}\n", 4, 11),
        ("HloModule m\n\n%c () -> f32[] {\n  ROOT %x = f32[] parameter(0)\n}\n", 6, 1),
        ('HloModule m\n\nENTRY %e () -> f32[] {\n  ROOT %x = f32[] parameter(0), backend_config={"a":}\n}\n', 4, 53),
    ],
)
def test_error_positions(text, line, column):
    with pytest.raises(HloParseError) as exc:
        parse_hlo(text)
    assert (exc.value.line, exc.value.column) == (line, column), str(exc.value)


_LOOP_TEMPLATE = """HloModule loops, num_partitions=1

%fused_cmp (fp0: s32[], fp1: s32[]) -> pred[] {{
  %fp0 = s32[] parameter(0)
  %fp1 = s32[] parameter(1)
  ROOT %fcmp = pred[] compare(%fp0, %fp1), direction={fdir}
}}

%fused_inc (gp0: s32[]) -> s32[] {{
  %gp0 = s32[] parameter(0)
  %gstep = s32[] constant({step})
  ROOT %ginc = s32[] {incop}(%gp0, %gstep)
}}

%cond (cp: (f32[4], s32[])) -> pred[] {{
  %cp = (f32[4], s32[]) parameter(0)
  %ci = s32[] get-tuple-element(%cp), index=1
  %cc = s32[] copy(%ci)
  %climit = s32[] constant({limit})
  ROOT %cr = pred[] {cond_root}
}}

%body (bp: (f32[4], s32[])) -> (f32[4], s32[]) {{
  %bp = (f32[4], s32[]) parameter(0)
  %bx = f32[4] get-tuple-element(%bp), index=0
  %bi = s32[] get-tuple-element(%bp), index=1
  %by = f32[4] wiggle(%bx)
  %bn = s32[] fusion(%bi), kind=kLoop, calls=%fused_inc
  ROOT %bt = (f32[4], s32[]) tuple(%by, %bn)
}}

ENTRY %main (x: f32[4]) -> f32[4] {{
  %x = f32[4] parameter(0)
  %i0 = s32[] constant({init})
  %t = (f32[4], s32[]) tuple(%x, %i0)
  %w = (f32[4], s32[]) while(%t), condition=%cond, body=%body
  ROOT %r = f32[4] get-tuple-element(%w), index=0
}}
"""


@pytest.mark.parametrize(
    ("init", "limit", "step", "incop", "direction", "fused", "expected"),
    [
        (0, 40, 1, "add", "LT", True, 40),
        (0, 40, 3, "add", "LT", False, 14),
        (2, 10, 2, "add", "LE", False, 5),
        (10, 0, 1, "subtract", "GT", True, 10),
        (10, 0, 2, "subtract", "GE", False, 6),
        (0, 12, 4, "add", "NE", False, 3),
        (0, 12, 5, "add", "NE", False, None),  # never equal: not a counted loop
        (5, 0, 1, "add", "LT", False, 0),
    ],
)
def test_induction_trip_counts(init, limit, step, incop, direction, fused, expected):
    flipped = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "NE": "NE"}[direction]
    cond_root = (
        "fusion(%cc, %climit), kind=kLoop, calls=%fused_cmp" if fused
        else f"compare(%climit, %cc), direction={flipped}"
    )
    text = _LOOP_TEMPLATE.format(init=init, limit=limit, step=step, incop=incop,
                                 fdir=direction, cond_root=cond_root)
    prog = analyze(text)
    (loop,) = prog.loops
    assert loop.trip_count == expected
    assert loop.trip_count_source == ("induction" if expected is not None else "unknown")
    sine = next(n for n in prog.nodes if n.name == "by")
    assert sine.multiplicity == (expected if expected is not None else 1)
    assert "by (wiggle)" in prog.unknown_ops  # not an HLO opcode: kept, listed


def test_execution_order_repeats_loop_bodies(edge):
    order = list(edge.execution_order())
    assert len(order) == sum(n.multiplicity for n in edge.nodes)
    first = edge.loops[0]
    body_names = [n.name for n in edge.nodes[first.start:first.end]]
    walked = [n.name for n, its in order[: 10 * len(body_names)]]
    assert walked == body_names * 10
    assert [its for n, its in order if n.name == "b.t"][:3] == [(0,), (1,), (2,)]
    assert order[10 * len(body_names)][0].name == "loop"


def test_unknown_op_inside_a_fusion_is_listed():
    text = """HloModule f, num_partitions=1

%fused (p: f32[4]) -> f32[4] {
  %p = f32[4] parameter(0)
  ROOT %w = f32[4] wobble(%p)
}

ENTRY %e (x: f32[4]) -> f32[4] {
  %x = f32[4] parameter(0)
  ROOT %fu = f32[4] fusion(%x), kind=kLoop, calls=%fused
}
"""
    prog = analyze(text)
    assert prog.unknown_ops == ["w (wobble) in fusion fu"]
    assert prog.nodes[0].kind is NodeKind.COMPUTE and prog.nodes[0].hbm_bytes == 32


def test_program_json_round_trips(edge):
    import json

    data = json.loads(json.dumps(edge.to_json()))
    assert len(data["nodes"]) == len(edge.nodes)
    assert data["loops"][0]["trip_count"] == 10
    assert data["collectives"][0]["groups"] == [[0, 2], [1, 3]]
    assert data["unknown_ops"] == ["mystery (frobnicate)"]


def test_bare_async_collective_custom_calls():
    """AsyncCollectiveStart / Done as top-level custom calls (the form without a wrapping
    kCustom fusion), with a matmul between them."""
    text = """HloModule acs, num_partitions=4

%ag_body (p: bf16[64,128]) -> bf16[256,128] {
  %p = bf16[64,128] parameter(0)
  ROOT %ag = bf16[256,128] all-gather(%p), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}, \
use_global_device_ids=true
}

ENTRY %e (x: bf16[64,128], w: bf16[128,128]) -> (bf16[256,128], bf16[64,128]) {
  %x = bf16[64,128] parameter(0)
  %w = bf16[128,128] parameter(1)
  %start = (bf16[64,128], bf16[256,128], u32[]) custom-call(%x), custom_call_target="AsyncCollectiveStart", \
called_computations={%ag_body}
  %mm = bf16[64,128] dot(%x, %w), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %done = bf16[256,128] custom-call(%start), custom_call_target="AsyncCollectiveDone"
  ROOT %t = (bf16[256,128], bf16[64,128]) tuple(%done, %mm)
}
"""
    prog = analyze(text)
    (c,) = prog.collectives
    assert c.kind is CollectiveKind.ALL_GATHER and c.mode is CollectiveMode.ASYNC_FUSION
    assert c.groups == ((0, 1, 2, 3),)
    assert (c.operand_bytes, c.result_bytes, c.send_bytes) == (64 * 128 * 2, 256 * 128 * 2, 3 * 64 * 128 * 2)
    assert [prog.nodes[i].name for i in c.overlap] == ["mm"]
    assert prog.nodes[c.done].name == "done" and prog.opaque == []


def test_conditional_costed_as_costliest_branch_and_collectives_flagged():
    text = """HloModule cnd, num_partitions=2

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%cheap (p: f32[8]) -> f32[8] {
  %p = f32[8] parameter(0)
  ROOT %n = f32[8] negate(%p)
}

%costly (q: f32[8]) -> f32[8] {
  %q = f32[8] parameter(0)
  %e = f32[8] exponential(%q)
  %r = f32[8] all-reduce(%e), channel_id=1, replica_groups={{0,1}}, to_apply=%add
  ROOT %m = f32[8] multiply(%r, %e)
}

ENTRY %main (c: pred[], x: f32[8]) -> f32[8] {
  %c = pred[] parameter(0)
  %x = f32[8] parameter(1)
  ROOT %k = f32[8] conditional(%c, %x, %x), true_computation=%costly, false_computation=%cheap
}
"""
    prog = analyze(text)
    (node,) = prog.nodes
    assert node.opcode == "conditional" and node.flops == 16.0
    assert prog.unknown_ops == ["k (conditional with collectives in its branches)"]


def test_a_conditional_whose_branches_call_kernels_runs_the_larger_branchs_kernels():
    """A Pallas kernel picked at run time (MaxDiffusion's fixed-m or online softmax per head): the
    branches' FLOPs cannot count a kernel, so each kernel of the branch moving the most bytes is an
    opaque node, as outside a conditional, before the conditional's own compute."""
    text = """HloModule cnd, num_partitions=1

%fixed (p: bf16[4,256,128]) -> f32[4,256,128] {
  %p = bf16[4,256,128] parameter(0)
  %k1 = f32[4,256,128] custom-call(%p, %p, %p), custom_call_target="tpu_custom_call", \
metadata={op_name="jit(step)/apply_attention/shard_map/vmap()/cond/branch_0_fun/pallas_call"}
  ROOT %k2 = f32[4,256,128] custom-call(%p, %p, %p), custom_call_target="tpu_custom_call", \
metadata={op_name="jit(step)/apply_attention/shard_map/vmap()/cond/branch_0_fun/pallas_call"}
}

%online (q: bf16[4,256,128]) -> f32[4,256,128] {
  %q = bf16[4,256,128] parameter(0)
  %e = bf16[4,256,128] exponential(%q)
  ROOT %k3 = f32[4,256,128] custom-call(%e, %q, %q), custom_call_target="tpu_custom_call", \
metadata={op_name="jit(step)/apply_attention/shard_map/vmap()/cond/branch_1_fun/pallas_call"}
}

ENTRY %main (c: pred[], x: bf16[4,256,128]) -> f32[4,256,128] {
  %c = pred[] parameter(0)
  %x = bf16[4,256,128] parameter(1)
  ROOT %k = f32[4,256,128] conditional(%c, %x, %x), true_computation=%fixed, false_computation=%online
}
"""
    prog = analyze(text)
    first, second, cond = prog.nodes
    assert [first.name, second.name, cond.opcode] == ["k1", "k2", "conditional"]
    assert first.kind is second.kind is NodeKind.OPAQUE and cond.kind is NodeKind.COMPUTE
    assert second.deps == (first.index,) and cond.deps == (second.index,)
    op = prog.opaque_op(first)
    assert "apply_attention" in (op.op_name or "") and len(op.operand_shapes) == 3
    costed = prog.with_opaque_cost(lambda o: OpaqueCost(flops=1e9, hbm_bytes=10))
    assert [n.flops for n in costed.nodes[:2]] == [1e9, 1e9]
