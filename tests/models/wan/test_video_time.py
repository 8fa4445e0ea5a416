"""One generation's time end to end (`VideoTime`): its arithmetic, the text encoding's estimate
where MaxDiffusion runs it, the expert swap's part and the Wan space's `video_time` section."""

from __future__ import annotations

import pytest

from aoizora.api import wan_request, wan_request_space
from aoizora.errors import ShapeError
from aoizora.models.registry import model_vae, wan_space
from aoizora.models.wan.space.space import WanSpace
from aoizora.models.wan.text_encoder.cost import pipeline_facts, text_encode_cost
from aoizora.models.wan.transformer.config import VideoShape
from aoizora.models.wan.vae.program import VAE_DECODE
from aoizora.models.wan.video.video_time import VideoTime, decode_part
from aoizora.topology import get_topology
from tests.models.wan.wan_testutil import TINY_T2V

DECODE = {"label": "vae decode (1, 16, 21, 90, 160) / v5e:2x4", "seconds": 4.0, "compute_seconds": 3.2,
          "exposed_comm_seconds": 0.8, "comm_seconds": 0.9, "sim_seconds": 4.1, "collectives": 2742,
          "memory_bytes": 3 << 30, "mesh": [1, 8], "compile_seconds": 486.0, "cached": True}


def _time(**changes) -> VideoTime:
    parts = dict(videos=1, text_encode=text_encode_cost(1), steps=50, step_seconds=2.0, expert_swap_seconds=0.0,
                 expert_swap_basis="one transformer", vae_decode_seconds=4.0, vae_decode_basis="compiled")
    return VideoTime(**{**parts, **changes})


def test_the_total_is_text_encoding_steps_swap_and_decode():
    vt = _time(expert_swap_seconds=3.0)
    assert vt.denoise_seconds == 100.0
    assert vt.total_seconds == pytest.approx(20.0 + 100.0 + 3.0 + 4.0)
    # MaxDiffusion's timed run reads the prompts' embeddings from its warmup's cache
    assert vt.maxdiffusion_generation_seconds == pytest.approx(100.0 + 3.0 + 4.0)
    assert _time(videos=2, text_encode=text_encode_cost(2)).seconds_per_video == pytest.approx((40 + 100 + 4) / 2)


def test_an_unknown_part_leaves_the_sums_unknown_and_says_why():
    seconds, basis = decode_part({"label": "vae decode x", "dropped": "compile stopped: the time budget ran out"})
    vt = _time(vae_decode_seconds=seconds, vae_decode_basis=basis)
    assert vt.total_seconds is None and vt.maxdiffusion_generation_seconds is None and vt.seconds_per_video is None
    out = vt.to_json()
    assert out["vae_decode"] == {"seconds": None, "basis": "not costed: vae decode x: compile stopped: the time "
                                                           "budget ran out"}
    assert out["denoise"] == {"steps": 50, "step_seconds": 2.0, "seconds": 100.0}
    assert decode_part(None)[0] is None and "--no-vae-decode" in decode_part(None)[1]
    assert _time(expert_swap_seconds=None).total_seconds is None


def test_a_video_time_refuses_impossible_parts():
    for bad in (dict(videos=0), dict(steps=0), dict(step_seconds=-1.0)):
        with pytest.raises(ShapeError, match="video time needs"):
            _time(**bad)


def test_text_encoding_is_estimated_where_maxdiffusion_runs_it():
    facts = pipeline_facts()
    assert facts["commit"].startswith("7cfb8801")
    enc = text_encode_cost(3)
    assert enc.device == "host CPU" and "PyTorch" in enc.framework
    per_prompt = facts["text_encoder"]["seconds_per_call"]
    assert enc.seconds == pytest.approx(facts["text_encoder"]["calls_per_generation"] * 3 * per_prompt)
    assert not enc.in_generation_time and "not compiled" in enc.basis and facts["commit"][:8] in enc.basis
    with pytest.raises(ShapeError, match="at least one video"):
        text_encode_cost(0)


def test_the_wan_space_assembles_its_video_time_from_the_step_and_the_decode():
    space = WanSpace(TINY_T2V, VideoShape(5, 64, 64), batch=4)  # two videos, each a CFG pair
    strategy = next(c.strategy for c in space.candidates(4) if c.legal)
    topo = get_topology("v5e:2x2")
    assert space.companion_programs(topo) == []  # no VAE given: no decode to compile
    out = space.plan_totals(strategy, topo, 0.5, {VAE_DECODE: DECODE})["video_time"]
    assert out["videos"] == 2 and out["denoise"]["steps"] == space.scheduler.num_steps
    assert out["denoise"]["seconds"] == pytest.approx(space.scheduler.num_steps * 0.5)
    assert out["vae_decode"]["seconds"] == 4.0 and out["vae_decode"]["cost"] == DECODE
    assert out["total_seconds"] == pytest.approx(out["text_encode"]["seconds"] + out["denoise"]["seconds"] + 4.0)


def test_the_decode_program_depends_on_the_video_and_the_slice_only():
    vae = model_vae("wan2.1-t2v-14b")
    space = wan_space("wan2.1-t2v-14b", "720p", 81, generation="v5e", vae=vae)
    (program,) = space.companion_programs(get_topology("v5e:2x4"))
    assert program.name == VAE_DECODE and program.strategy.latent == (1, 16, 21, 90, 160)
    assert program.placement.mesh.shape == (1, 8)
    other = wan_space("wan2.1-t2v-14b", "720p", 81, generation="v5e", batch=4, vae=vae)
    assert other.companion_programs(get_topology("v5e:2x4"))[0].strategy.latent == (2, 16, 21, 90, 160)
    assert wan_space("wan2.1-t2v-14b", "720p", 81, generation="v5e").companion_programs(
        get_topology("v5e:2x4")) == []  # a space given no VAE costs no decode
    (five_b,) = wan_space("wan2.2-ti2v-5b", "720p", 81, generation="v5e",
                          vae=model_vae("wan2.2-ti2v-5b")).companion_programs(get_topology("v5e:2x4"))
    assert five_b.strategy.latent[1] == 48  # Wan 2.2's VAE


@pytest.mark.parametrize("vae_decode", [True, False])
def test_a_plan_request_costs_its_models_decode_unless_told_not_to(vae_decode):
    topo = get_topology("v5e:2x4")
    request = wan_request("wan2.2-ti2v-5b", "720p", 81, kernel=None, from_maxdiffusion=None, topology=topo)
    space = wan_request_space(request, topo, vae_decode=vae_decode)
    assert space.vae == (model_vae("wan2.2-ti2v-5b") if vae_decode else None)
    assert len(space.companion_programs(topo)) == (1 if vae_decode else 0)


@pytest.mark.parametrize("residency", ["both", "swap"])
def test_the_a14b_expert_swap_is_zero_when_both_stay_resident(residency):
    space = wan_space("wan2.2-t2v-a14b", "480p", 81, generation="v5e", expert_residency=residency)
    topo = get_topology("v5e:2x4")
    strategy = next(c.strategy for c in space.candidates(topo.num_devices) if c.legal)
    seconds, basis = space.expert_swap(strategy, topo)
    if residency == "both":
        assert seconds == 0.0 and "both experts stay in HBM" in basis
    else:
        assert seconds == pytest.approx(space.plan_details(strategy, topo)["experts"]["swap_seconds_per_video"])
        assert seconds > 0 and "GB/s" in basis
