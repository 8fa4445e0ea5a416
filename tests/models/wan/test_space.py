"""The Wan 2.1 model through the Stage 1 protocol (lowering only, small video)."""

import dataclasses
import json
import re

import pytest

from aoizora.errors import StrategyError
from aoizora.models.wan.space.space import WanSpace
from aoizora.models.wan.transformer.config import PRESETS, VideoShape
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy
from aoizora.stage1 import analyse

VIDEO = VideoShape(5, 128, 128)  # 2 latent frames x 8 x 8 tokens after patchify = 128 tokens


@pytest.fixture(scope="module")
def space():
    return WanSpace(PRESETS["t2v-1.3b"], VIDEO)


def test_candidates_and_reasons(space):
    cands = {c.key: c for c in space.candidates(8)}
    # 20 meshes × 4 weight modes × (allgather, ring in 2 layouts, ulysses in 3 chunkings), plus 2D
    # context: context=4 (3 meshes) splits 2×2, context=8 (1 mesh) splits 2×4 and 4×2, each in 3
    # chunkings and 2 layouts
    assert len(cands) == 20 * 4 * (1 + 2 + 3) + (3 * 1 + 1 * 2) * 3 * 4 * 2
    # the ring's K/V rotation in the kernel's layout is a candidate of its own, without a ring a duplicate
    heads_major = Strategy(data=2, context=4, attention="ring", weights="replicated", ring_layout="heads_major")
    assert cands[heads_major.key()].legal and "ring_layout=heads_major" in heads_major.key()
    no_ring = cands[Strategy(data=8, attention="ring", weights="replicated", ring_layout="heads_major").key()]
    assert any("has no ring (duplicate)" in r for r in no_ring.reasons)
    assert len({k for k in cands if "ring_layout" in k}) == 20 * 4 + 5 * 3 * 4
    assert len(WanSpace(PRESETS["t2v-1.3b"], VIDEO, ring_layouts=("sequence_major",)).candidates(8)) == (
        20 * 4 * (1 + 1 + 3) + (3 * 1 + 1 * 2) * 3 * 4)
    two_d = Strategy(data=2, context=4, context_ulysses=2, attention="ulysses_ring", weights="replicated")
    assert cands[two_d.key()].legal
    # 12 heads: 12/(U=4) = 3 heads per device after the all-to-all, not divisible into 2 chunks
    odd = Strategy(context=8, context_ulysses=4, attention="ulysses_ring", weights="replicated", ulysses_chunks=2)
    assert any("chunk" in r for r in cands[odd.key()].reasons)
    assert cands[Strategy(context=8, context_ulysses=4, attention="ulysses_ring",
                                       weights="replicated").key()].legal
    # U = 1 and U = context are ring and Ulysses: never enumerated as 2D
    assert not any(c.strategy.attention == "ulysses_ring"
                   and min(c.strategy.context_ulysses, c.strategy.context_ring) < 2
                   for c in cands.values())
    # 12 heads do not split over 8 Ulysses shards
    assert cands[Strategy(context=8, attention="ulysses", weights="replicated").key()].legal is False
    dup = cands[Strategy(data=2, tensor=4, attention="ring", weights="tensor").key()]
    assert any("duplicate" in r for r in dup.reasons)
    assert cands[Strategy(data=2, context=4, attention="allgather", weights="replicated").key()].legal


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


@pytest.mark.tpu_compile
def test_compiled_splash_calls_are_costed_as_themselves():
    """Self- and cross-attention share a kernel name in compiled HLO; each call must get its own
    cost (a cross-attention call once took the far larger self-attention cost)."""
    from aoizora.hlo.program import NodeKind
    from aoizora.placement import enumerate_placements
    from aoizora.stage2.compile_cache import default_compile_cache
    from aoizora.stage2.compiling import compile_strategy
    from aoizora.topology import get_topology

    topo = get_topology("v5e:2x2")
    config = PRESETS["t2v-14b"].replace(num_layers=1, num_attention_heads=4, ffn_dim=1024, text_dim=512)
    space = WanSpace(config, VideoShape(21, 480, 832))
    st = Strategy(fsdp=2, context=2, attention="allgather", weights="gathered")
    placement = enumerate_placements(topo, space.mesh_spec(st)).placements[0]
    program = compile_strategy(space, st, st.key(), topo, placement, 600.0, default_compile_cache()).program
    splash = [n for n in program.nodes if n.kind == NodeKind.OPAQUE and "splash" in n.name]
    assert len(splash) == 2  # self-attention over the gathered K/V, cross-attention over the text
    for n in splash:
        q, k = [s.dims for s in n.operand_shapes if s.dtype == "bf16" and len(s.dims) == 3][:2]
        heads, lq, d = q
        assert n.flops == 4.0 * heads * lq * k[1] * d
        # the grid the compiled kernel runs: one step per (head, Q block, K/V block), its blocks as
        # Pallas records them in the call's kernel metadata
        blocks = json.loads(re.search(r'"xprof_metadata":"(.*?)"\n', program.opaque_op(n).frontend_attributes)
                            .group(1).replace('\\"', '"'))
        assert n.kernel.grid_steps == heads * -(-lq // blocks["block_q"]) * -(-k[1] // blocks["block_kv"])
    assert sorted(n.operand_shapes[3].dims[1] for n in splash) == [512, 9472]  # text, gathered tokens


def test_stage1_and_stage2_cost_a_splash_call_alike():
    from aoizora.models.wan.transformer.attention import splash_cost
    from aoizora.stage1.ir import TensorType
    from aoizora.workload import KernelCall

    space = WanSpace(PRESETS["t2v-14b"], VIDEO)
    q = TensorType((40, 4736, 128), "bf16")
    kv = TensorType((40, 9472, 128), "bf16")
    out = TensorType((40, 4736, 128), "bf16")
    cost = space.kernel_cost(Strategy(context=2), KernelCall("tpu_custom_call", (q, kv, kv), (out,), True))
    flops, hbm = splash_cost(40, 4736, 9472, 128, 2, False)
    assert (cost.flops, cost.hbm_bytes) == (flops, int(hbm))
    assert hbm > 37 * 2 * kv.bytes  # K/V streamed once per 128-row Q block, not read once
    assert cost.kernel.grid_steps == 40 * (4736 // 128) * (9472 // 256)  # the blocks splash_attention picks


def test_ulysses_ring_communicates_per_sub_axis(space, topo_2x4):
    """2D context: the all-to-alls run over context_ulysses only, the K/V rotation over context_ring only."""
    st = Strategy(data=2, context=4, context_ulysses=2, attention="ulysses_ring", weights="replicated")
    pred, _, _, _, _ = analyse(space, st, topo_2x4)
    explicit = [c for c in pred.comms if c.explicit]
    assert {(c.kind, c.axes) for c in explicit} == {("all-to-all", ("context_ulysses",)),
                                                    ("collective-permute", ("context_ring",))}
    a2a = sum(c.multiplicity for c in explicit if c.kind == "all-to-all")
    permutes = sum(c.multiplicity for c in explicit if c.kind == "collective-permute")
    assert a2a == 4 * 30  # q, k, v there and the output back, every layer
    assert permutes == 2 * (2 - 1) * 30  # K and V, R - 1 rotations, every layer
    # a ring of R = 2 splash calls per layer over the span of the ring group: 128 tokens padded to
    # 4 × 128, a span of 256 after the all-to-all, 12 heads / U = 6 per device
    ring_steps = [n for n in pred.ops if n.opaque and n.flops == 4.0 * 6 * 256 * 256 * 128]
    assert sum(n.multiplicity for n in ring_steps) == 2 * 30


def test_chunked_ulysses_ring_repeats_collectives_and_kernels_per_chunk(space, topo_2x4):
    st = Strategy(data=2, context=4, context_ulysses=2, attention="ulysses_ring", weights="replicated",
                  ulysses_chunks=2)
    pred, _, _, _, _ = analyse(space, st, topo_2x4)
    explicit = [c for c in pred.comms if c.explicit]
    assert sum(c.multiplicity for c in explicit if c.kind == "all-to-all") == 2 * 4 * 30
    assert sum(c.multiplicity for c in explicit if c.kind == "collective-permute") == 2 * 2 * 30
    # each chunk: R = 2 ring steps on 12 / U / 2 = 3 heads
    ring_steps = [n for n in pred.ops if n.opaque and n.flops == 4.0 * 3 * 256 * 256 * 128]
    assert sum(n.multiplicity for n in ring_steps) == 2 * 2 * 30
    # the all-to-all payload per chunk is half the unchunked one: the same bytes in total
    whole, _, _, _, _ = analyse(space, dataclasses.replace(st, ulysses_chunks=1), topo_2x4)

    def a2a_bytes(p):
        return sum(c.recv_bytes * c.multiplicity for c in p.comms if c.kind == "all-to-all")

    assert a2a_bytes(pred) == a2a_bytes(whole)


@pytest.mark.parametrize("topology", ["v5e:2x4", "tpu7x:2x2x1"])
def test_ulysses_ring_14b_720p_81_frames(topology):
    """The full 14B model at 720p/81 frames (75,600 tokens) under the expert's 2D context split:
    per-sub-axis collectives and a ring of Ulysses-sized splash calls per layer."""
    from aoizora.errors import AoizoraError
    from aoizora.topology import get_topology

    try:
        topo = get_topology(topology)
    except AoizoraError as exc:  # a generation this tree does not describe yet
        pytest.skip(str(exc))
    space = WanSpace(PRESETS["t2v-14b"], VideoShape(81, 720, 1280))
    st = Strategy(data=2, context=4, context_ulysses=2, attention="ulysses_ring", weights="gathered")
    pred, _, mem, _, _ = analyse(space, st, topo)
    by_kind: dict = {}
    for c in pred.comms:
        if c.explicit:
            by_kind.setdefault(c.kind, set()).add(c.axes)
    assert by_kind == {"all-to-all": {("context_ulysses",)}, "collective-permute": {("context_ring",)}}
    span = -(-75_600 // (4 * 128)) * 128 * 2  # padded to context × 128, then a ring group's span (L/R)
    heads = 40 // 2
    self_calls = [n for n in pred.ops if n.opaque and n.flops == 4.0 * heads * span * span * 128]
    assert sum(n.multiplicity for n in self_calls) == 2 * 40  # R ring steps × 40 layers
    # the per-layer weight gathers run over fsdp × both context sub-axes (embed of gathered weights)
    gathers = {c.axes for c in pred.comms if c.kind == "all-gather"}
    assert ("context_ring", "context_ulysses") in gathers


@pytest.mark.tpu_compile
def test_ulysses_ring_compiles_with_sub_axis_groups_and_its_kernels_costed():
    """Stage 2 on a 2D context strategy: five mesh axes place and compile; the compiled all-to-alls
    pair Ulysses neighbours (logical ids differing in the inner axis), the permutes move K/V
    between ring neighbours, and every splash ring step gets the model's own cost."""
    from aoizora.hlo.program import CollectiveKind, NodeKind
    from aoizora.placement import enumerate_placements
    from aoizora.stage2.compile_cache import default_compile_cache
    from aoizora.stage2.compiling import compile_strategy
    from aoizora.topology import get_topology

    topo = get_topology("v5e:2x4")
    config = PRESETS["t2v-14b"].replace(num_layers=1, num_attention_heads=4, ffn_dim=1024, text_dim=512)
    space = WanSpace(config, VideoShape(21, 480, 832))
    st = Strategy(data=2, context=4, context_ulysses=2, attention="ulysses_ring", weights="gathered")
    spec = space.mesh_spec(st)
    assert spec.axis_names == ("data", "fsdp", "context_ring", "context_ulysses", "tensor")
    placements = enumerate_placements(topo, spec).placements
    assert len(placements) > 1
    program = compile_strategy(space, st, st.key(), topo, placements[0], 600.0,
                               default_compile_cache()).program
    # logical id = data·4 + ring·2 + ulysses (fsdp and tensor are 1)
    a2a = [c for c in program.collectives if c.kind == CollectiveKind.ALL_TO_ALL]
    ulysses = [c for c in a2a if sorted(map(sorted, c.groups)) == [[0, 1], [2, 3], [4, 5], [6, 7]]]
    assert len(ulysses) == 4  # q, k, v there, the output back
    permutes = [c for c in program.collectives if c.kind == CollectiveKind.COLLECTIVE_PERMUTE]
    ring = [c for c in permutes if len(c.source_target_pairs) == 8
            and all(abs(s - t) == 2 for s, t in c.source_target_pairs)]
    assert len(ring) == 2  # K and V, R - 1 = 1 rotation
    assert {c.operand_bytes for c in ulysses} == {c.operand_bytes for c in ring}  # a device's q/k/v block
    ring = [n for n in program.nodes if n.kind == NodeKind.OPAQUE and "segmented_residuals" in n.name]
    assert len(ring) == 2  # R = 2 ring steps in the layer
    span = 9728 // 2  # 9,360 tokens padded to 4 × 128 multiples, a ring group's half after the all-to-all
    assert all(n.flops == 4.0 * 2 * span * span * 128 for n in ring)  # 4 heads / U = 2 per device


def test_stage1_costs_a_splash_call_with_the_strategys_query_block():
    """With fixed splash blocks K/V are streamed once per block_q rows, not per the kernel's own pick."""
    from aoizora.models.wan.transformer.attention import splash_cost
    from aoizora.models.wan.transformer.strategy import SplashBlocks
    from aoizora.stage1.ir import TensorType
    from aoizora.workload import KernelCall

    space = WanSpace(PRESETS["t2v-14b"], VIDEO)
    q = TensorType((40, 6048, 128), "bf16")  # padded to 2 blocks of 3024
    kv = TensorType((40, 10240, 128), "bf16")
    call = KernelCall("tpu_custom_call", (q, kv, kv), (q,), True)
    blocked = Strategy(context=2, splash_blocks=SplashBlocks(3024, 2048, 1024))
    cost = space.kernel_cost(blocked, call)
    flops, hbm = splash_cost(40, 6048, 10240, 128, 2, False, block_q=3024)
    assert (cost.flops, cost.hbm_bytes) == (flops, int(hbm))
    # 2 Q blocks stream K/V twice; the kernel's own pick for 6,048 rows (no 512/256/128 divides it) is one block
    unblocked = space.kernel_cost(Strategy(context=2), call).hbm_bytes
    assert cost.hbm_bytes - unblocked == 2 * kv.bytes


def test_chunked_strategies_take_their_unchunked_siblings_analysis(topo_2x4):
    """Stage 1 lowers the unchunked Ulysses strategy only; its chunked siblings share its Q1 (still a
    lower bound: the same bytes in more collectives) and memory (chunks only shrink buffers)."""
    from aoizora.stage1 import run_stage1

    space = WanSpace(PRESETS["t2v-14b"], VIDEO, attentions=("ulysses",), weights=("gathered+tensor",))
    result = run_stage1(space, topo_2x4, top_k=2, progress=False, workers=1)
    by_key = {e.key: e for e in result.entries}
    chunked = [e for e in result.entries if e.candidate.strategy.ulysses_chunks > 1 and e.verdict != "illegal"]
    assert chunked
    for e in chunked:
        twin = by_key[dataclasses.replace(e.candidate.strategy, ulysses_chunks=1).key()]
        assert e.summary["analysed_as"] == twin.key and twin.lower_seconds > 0 and e.lower_seconds == 0
        assert e.q1.seconds == twin.q1.seconds and e.memory.total_bytes == twin.memory.total_bytes
        assert e.rank is not None and twin.rank < e.rank  # ties rank the sibling first
    # the stand-in's Q1 bounds the chunked program it stands for (more, smaller collectives)
    st = next(e.candidate.strategy for e in chunked)
    own_q1 = analyse(space, st, topo_2x4)[1].seconds
    assert by_key[st.key()].q1.seconds <= own_q1 * (1 + 1e-9)


def test_strategy_from_key_reads_back_every_key_of_a_space():
    # the keys of a generation's space carry planned blocks, vmem and (TPU7x) weight tiles
    for generation in ("v5e", "tpu7x"):
        space = WanSpace(PRESETS["t2v-1.3b"], VideoShape(81, 480, 832), generation=generation)
        for c in space.candidates(8):
            assert Strategy.from_key(c.key) == c.strategy, c.key


def test_strategy_from_key_reads_keys_of_earlier_runs():
    # a bench cell's key: blocks without a vmem field (compiled at libtpu's default limit)
    st = Strategy.from_key("data=2,context_ring=2,context_ulysses=4 | weights=gathered | attn=ulysses_ring | "
                           "chunks=2 | blocks=1280/2048/1024")
    assert st == Strategy(data=2, context=8, context_ulysses=4, attention="ulysses_ring", weights="gathered",
                          ulysses_chunks=2, splash_blocks=SplashBlocks(1280, 2048, 1024))
    assert Strategy.from_key("single | weights=replicated | attn=allgather") == Strategy(weights="replicated")


@pytest.mark.parametrize("key", ["data=2 context=4 | weights=gathered | attn=ring", "data=2 | weights=gathered",
                                 "data=2 | weights=sharded | attn=ring", "pipe=2 | weights=gathered | attn=ring",
                                 "data=2 | weights=gathered | attn=ring | blocks=512/512",
                                 "data=2 | weights=gathered | attn=ring | flags=x"])
def test_strategy_from_key_refuses_what_is_not_a_key(key):
    with pytest.raises(StrategyError, match="is not a strategy key"):
        Strategy.from_key(key)


@pytest.mark.parametrize("layout", ["sequence_major", "heads_major"])
def test_the_splash_cost_estimate_reaches_the_lowered_tpu_program(topo_2x4, layout):
    from aoizora.workload import lowering_inputs_on

    st = Strategy(data=2, context=4, attention="ring", weights="replicated", ring_layout=layout)
    texts = {}
    for estimate in (False, True):
        space = WanSpace(PRESETS["t2v-1.3b"].replace(splash_cost_estimate=estimate), VIDEO)
        texts[estimate] = lowering_inputs_on(space, st, topo_2x4).lower().as_text()
    # every splash call (the ring's steps, cross-attention) carries its estimate in its Mosaic
    # backend config, or none does
    calls = texts[True].count("tpu_custom_call")
    assert calls >= 2 and texts[True].count(r"\22cost_estimate\22: {") == calls
    assert texts[False].count("tpu_custom_call") >= 2 and texts[False].count("cost_estimate") == 0


@pytest.mark.parametrize("attention, ulysses", [("ring", 1), ("ulysses_ring", 2)])
def test_the_heads_major_ring_writes_out_each_steps_merge(topo_2x4, attention, ulysses):
    """Each ring step's merge sits behind an optimization barrier: without one, libtpu fuses the
    merges of all steps into one and holds every step's output and statistics at once (v6e:2x4,
    Wan 14B 720p/81, ring over context 4: a temp of 5.5 GiB against 2.5 GiB with the barriers;
    `docs/notebook/memory-model.md`)."""
    from aoizora.workload import lowering_inputs_on

    space = WanSpace(PRESETS["t2v-1.3b"], VIDEO)
    counts = {}
    for layout in ("sequence_major", "heads_major"):
        st = Strategy(data=2, context=4, context_ulysses=ulysses, attention=attention, weights="replicated",
                      ring_layout=layout)
        text = lowering_inputs_on(space, st, topo_2x4).lower().as_text()
        counts[layout] = text.count("stablehlo.optimization_barrier")
    ring = 4 // ulysses
    assert counts["sequence_major"] == 0
    assert counts["heads_major"] > 0 and counts["heads_major"] % ring == 0
