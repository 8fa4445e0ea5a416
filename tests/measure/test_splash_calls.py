"""The splash calls a strategy runs on one device, the tiles its search weighs, and the splash
model's prediction for each (no chip: what `aoizora measure --splash` would time)."""

from __future__ import annotations

import pytest

from aoizora.api import wan_request_space
from aoizora.measure.splash_calls import SplashCase, splash_cases, strategy_splash_call
from aoizora.models.wan.kernels.splash_tiles import searched_splash_tile
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.topology import get_topology


@pytest.fixture(scope="module")
def demo_space():
    return wan_request_space({"model": "wan2.1-t2v-14b", "resolution": "720p", "frames": 81,
                              "kernel_profile": "jax-splash", "program": "aoizora"}, get_topology("v5e:2x4"),
                             vae_decode=False)


@pytest.mark.parametrize(("key", "shape"), [
    # the demo plan's call: 40 heads x 18,944 queries against the 75,776 gathered keys
    ("fsdp=2,context=4 | weights=gathered | attn=allgather", (1, 40, 18944, 75776, False)),
    # Ulysses trades the sequence for heads: 10 heads over all 75,776 tokens
    ("data=2,context=4 | weights=gathered | attn=ulysses", (1, 10, 75776, 75776, False)),
    # a ring step: the local span against one span of keys, with the log-sum-exp for the merge
    ("context=8 | weights=gathered | attn=ring", (2, 40, 9472, 9472, True)),
    # 2D context: heads over the Ulysses degree, the ring's span of the sequence
    ("context_ring=2,context_ulysses=4 | weights=gathered | attn=ulysses_ring", (2, 10, 37888, 37888, True)),
])
def test_the_per_device_call_of_each_variant(demo_space, key, shape):
    call = strategy_splash_call(demo_space, Strategy.from_key(key))
    assert (call.batch, call.heads, call.lq, call.lk, call.residuals) == shape
    assert call.head_dim == 128


def test_the_cases_are_the_tiles_the_search_weighs_and_contain_its_choice(demo_space):
    st = Strategy.from_key("fsdp=2,context=4 | weights=gathered | attn=allgather")
    cases = splash_cases(demo_space, [st])
    chosen, limit = searched_splash_tile(st, demo_space.video.tokens(demo_space.config), demo_space.batch, "v5e")
    assert SplashCase(strategy_splash_call(demo_space, st), chosen, limit) in cases
    assert len(set(cases)) == len(cases)
    assert {c.limit_kib for c in cases} == {None, 32768, 65536}
    hw = get_topology("v5e:2x4").hardware
    best = min(cases, key=lambda c: c.predicted_seconds(hw))
    assert best.predicted_seconds(hw) == pytest.approx(min(c.predicted_seconds(hw) for c in cases))
    assert (best.blocks, best.limit_kib) == (chosen, limit)


def test_a_case_reads_back_from_its_json(demo_space):
    st = Strategy.from_key("context=8 | weights=gathered | attn=ring")
    for case in splash_cases(demo_space, [st]):
        assert SplashCase.from_json(case.to_json()) == case
