"""Wan 2.2 pipelines through Stage 1 and Stage 2: both experts' weights in the step's memory
(Stage 1's estimate and libtpu's compiled program), swap residency, per-token timesteps."""

import math

import jax
import numpy as np
import pytest

from aoizora.models.wan.space.pipeline_space import (
    WanPipelineSpace,
    expert_bytes_per_device,
    host_to_device_bandwidth,
    swap_estimate,
)
from aoizora.models.wan.transformer.config import PRESETS, VideoShape
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.models.wan.video.pipeline import WanPipelineConfig
from aoizora.placement import jax_default_placement
from aoizora.stage1 import analyse
from aoizora.stage1.search import ArgumentsDoNotFit, argument_bytes
from aoizora.stage2.compile_cache import default_compile_cache
from aoizora.stage2.compiling import compile_strategy
from aoizora.topology import get_topology
from aoizora.workload import lowering_inputs_on

VIDEO = VideoShape(5, 128, 128)  # 128 tokens
# two 2-layer experts of Wan 2.1 1.3B's width: cheap to lower and compile, real block shapes
EXPERT = PRESETS["t2v-1.3b"].replace(num_layers=2)
TWO = WanPipelineConfig(EXPERT, EXPERT, boundary_ratio=0.875, shift=12.0, steps=40, guidance_scale=4.0,
                        guidance_scale_2=3.0)
STRATEGY = Strategy(data=2, context=4, attention="allgather", weights="gathered")


def _spaces():
    return WanPipelineSpace(TWO, VIDEO, residency="both"), WanPipelineSpace(TWO, VIDEO, residency="swap")


def test_expert_bytes_per_device_is_the_sharded_argument_size(topo_2x4):
    _, swap = _spaces()
    params_only = lowering_inputs_on(swap, STRATEGY, topo_2x4).args[0]
    measured = sum(math.prod(a.sharding.shard_shape(a.shape)) * np.dtype(a.dtype).itemsize
                   for a in jax.tree.leaves(params_only))
    assert expert_bytes_per_device(EXPERT, STRATEGY) == measured
    # embed sharded over context=4: a quarter of the replicated bytes, give or take the small unsharded tables
    replicated = expert_bytes_per_device(EXPERT, Strategy(data=2, context=4, weights="replicated"))
    assert 0.24 < measured / replicated < 0.3


def test_stage1_counts_both_experts(topo_2x4):
    both, swap = _spaces()
    extra = expert_bytes_per_device(EXPERT, STRATEGY)
    assert (argument_bytes(lowering_inputs_on(both, STRATEGY, topo_2x4))
            - argument_bytes(lowering_inputs_on(swap, STRATEGY, topo_2x4))) == extra
    _, _, mem_both, _, _ = analyse(both, STRATEGY, topo_2x4)
    _, _, mem_swap, _, _ = analyse(swap, STRATEGY, topo_2x4)
    # the second expert is an argument of the lowered program (kept though unused)
    assert mem_both.argument_bytes - mem_swap.argument_bytes == pytest.approx(extra, rel=1e-6)
    assert mem_both.fits and mem_swap.fits


@pytest.mark.tpu_compile
def test_compiled_step_holds_both_experts(topo_2x4):
    """libtpu's own memory analysis of the compiled step counts the second expert's weights."""
    both, swap = _spaces()
    placement = jax_default_placement(topo_2x4, both.mesh_spec(STRATEGY))
    key = both.key_of(STRATEGY)
    with_both = compile_strategy(both, STRATEGY, key, topo_2x4, placement, timeout_s=600, cache=default_compile_cache())
    with_one = compile_strategy(swap, STRATEGY, key, topo_2x4, placement, timeout_s=600, cache=default_compile_cache())
    extra = expert_bytes_per_device(EXPERT, STRATEGY)
    assert with_both.memory_bytes - with_one.memory_bytes == pytest.approx(extra, rel=0.02)


def test_both_experts_refused_where_one_fits():
    """Two 13-layer 14B-width experts with replicated weights on v5e:2x2: ~8.5 GiB each per chip.
    One fits the 15.75 GiB; both do not — Stage 1 says so before lowering, and libtpu refuses to
    compile the step holding both (the refusal is the compiler's, not ours)."""
    topo = get_topology("v5e:2x2")
    big = PRESETS["t2v-14b"].replace(num_layers=13)
    pipe = WanPipelineConfig(big, big, boundary_ratio=0.875)
    single = Strategy(data=2, context=2, weights="replicated")
    both = WanPipelineSpace(pipe, VIDEO, residency="both")
    swap = WanPipelineSpace(pipe, VIDEO, residency="swap")
    assert 8 < expert_bytes_per_device(big, single) / 2**30 < 9
    with pytest.raises(ArgumentsDoNotFit):
        analyse(both, single, topo)
    _, _, mem, _, _ = analyse(swap, single, topo)
    assert mem.fits
    placement = jax_default_placement(topo, both.mesh_spec(single))
    with pytest.raises(Exception, match="RESOURCE_EXHAUSTED.*exceeds available HBM"):
        compile_strategy(both, single, both.key_of(single), topo, placement, timeout_s=600)


def test_per_token_timesteps_lower_and_the_plan_states_the_experts(topo_2x4):
    ti2v = WanPipelineConfig(EXPERT.replace(in_channels=48, out_channels=48, vae_stride=(4, 16, 16)),
                             expand_timesteps=True)
    space = WanPipelineSpace(ti2v, VideoShape(5, 256, 256), residency="swap")
    assert space.residency == "both" and space.plan_details(STRATEGY, topo_2x4) == {}
    pred, res, mem, _, _ = analyse(space, STRATEGY, topo_2x4)
    assert mem.fits and res.seconds > 0
    assert space.workload()["pipeline"]["per_token_timesteps"] is True

    both, swap = _spaces()
    d_both = both.plan_details(STRATEGY, topo_2x4)["experts"]
    d_swap = swap.plan_details(STRATEGY, topo_2x4)["experts"]
    bw, source = host_to_device_bandwidth("v5e")
    assert bw == 1.5e10 and "scaling-book" in source
    assert d_both["count"] == 2 and d_both["both_resident"] and d_both["swap_seconds_per_video"] == 0.0
    per = expert_bytes_per_device(EXPERT, STRATEGY)
    assert d_swap["swap_seconds_per_video"] == pytest.approx(2 * per / bw)
    w = both.workload()["pipeline"]
    assert [e["steps"] for e in w["experts"]] == [sum(1 for t in TWO.scheduler().timesteps if t >= 875),
                                                 sum(1 for t in TWO.scheduler().timesteps if t < 875)]
    assert [e["guidance_scale"] for e in w["experts"]] == [4.0, 3.0]
    assert "per video" in swap_estimate(both, topo_2x4)
