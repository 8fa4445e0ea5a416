"""The Wan 2.1 model through the Stage 1 protocol (lowering only, small video)."""

import pytest

from aoizora.models.wan.config import PRESETS, VideoShape
from aoizora.models.wan.strategy import Strategy
from aoizora.stage1 import analyse
from aoizora.stage1.wan_space import WanSpace, strategy_key

VIDEO = VideoShape(5, 128, 128)  # 2 latent frames x 8 x 8 tokens after patchify = 128 tokens


@pytest.fixture(scope="module")
def space():
    return WanSpace(PRESETS["t2v-1.3b"], VIDEO)


def test_candidates_and_reasons(space):
    cands = {c.key: c for c in space.candidates(8)}
    assert len(cands) == 20 * 3 * 4
    assert cands[strategy_key(Strategy(context=8, attention="ulysses", weights="replicated"))].legal is False  # 12 heads
    dup = cands[strategy_key(Strategy(data=2, tensor=4, attention="ring", weights="tensor"))]
    assert any("duplicate" in r for r in dup.reasons)
    assert cands[strategy_key(Strategy(data=2, context=4, attention="allgather", weights="replicated"))].legal


def test_allgather_context_lowers_with_explicit_gathers_and_costed_splash(space, topo_2x4):
    st = Strategy(data=2, context=4, attention="allgather", weights="replicated")
    pred, res, mem, _, _ = analyse(space, st, topo_2x4)
    explicit = [c for c in pred.comms if c.explicit]
    # K and V all-gathered over context in every one of the 30 layers
    assert {(c.kind, c.axes) for c in explicit} == {("all-gather", ("context",))}
    assert sum(c.multiplicity for c in explicit) == 2 * 30
    kernels = [n for n in pred.ops if n.opaque]
    assert kernels and all(n.flops > 0 for n in kernels)  # splash self- and cross-attention, costed
    assert res.seconds > 0 and mem.fits


def test_ulysses_uses_all_to_all(space, topo_2x4):
    st = Strategy(data=2, context=4, attention="ulysses", weights="replicated")
    pred, _, _, _, _ = analyse(space, st, topo_2x4)
    kinds = {(c.kind, c.axes) for c in pred.comms if c.explicit}
    assert kinds == {("all-to-all", ("context",))}


def test_compiled_splash_calls_are_costed_as_themselves():
    """Self- and cross-attention share a kernel name in compiled HLO; each call must get its own
    cost (a cross-attention call once took the far larger self-attention cost)."""
    from aoizora.hlo.program import NodeKind
    from aoizora.placement import enumerate_placements
    from aoizora.plan.stage2 import compile_strategy
    from aoizora.topology import get_topology

    topo = get_topology("v5e:2x2")
    config = PRESETS["t2v-14b"].replace(num_layers=1, num_attention_heads=4, ffn_dim=1024, text_dim=512)
    space = WanSpace(config, VideoShape(21, 480, 832))
    st = Strategy(fsdp=2, context=2, attention="allgather", weights="gathered")
    placement = enumerate_placements(topo, space.mesh_spec(st)).placements[0]
    program = compile_strategy(space, st, strategy_key(st), topo, placement, 600.0).program
    splash = [n for n in program.nodes if n.kind == NodeKind.OPAQUE and "splash" in n.name]
    assert len(splash) == 2  # self-attention over the gathered K/V, cross-attention over the text
    for n in splash:
        q, k = [s.dims for s in n.operand_shapes if s.dtype == "bf16" and len(s.dims) == 3][:2]
        heads, lq, d = q
        assert n.flops == 4.0 * heads * lq * k[1] * d
    assert sorted(n.operand_shapes[3].dims[1] for n in splash) == [512, 9472]  # text, gathered tokens


def test_stage1_and_stage2_cost_a_splash_call_alike():
    from aoizora.models.wan.attention import splash_cost
    from aoizora.stage1.dag import KernelCall
    from aoizora.stage1.ir import TensorType

    space = WanSpace(PRESETS["t2v-14b"], VIDEO)
    q = TensorType((40, 4736, 128), "bf16")
    kv = TensorType((40, 9472, 128), "bf16")
    out = TensorType((40, 4736, 128), "bf16")
    cost = space.kernel_cost(Strategy(context=2), KernelCall("tpu_custom_call", (q, kv, kv), (out,), True))
    flops, hbm = splash_cost(40, 4736, 9472, 128, 2, False)
    assert (cost.flops, cost.hbm_bytes) == (flops, int(hbm))
    assert hbm > 37 * 2 * kv.bytes  # K/V streamed once per 128-row Q block, not read once
