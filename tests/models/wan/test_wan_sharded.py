"""Sharded execution on 8 CPU host devices equals single-device execution, for every attention
variant on several meshes; a short CFG sampling run agrees too."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wan_testutil import TINY_I2V, TINY_T2V, rel_err

from aoizora.models.wan.transformer.config import VideoShape
from aoizora.models.wan.transformer.params import init_params
from aoizora.models.wan.transformer.sharding import param_shardings
from aoizora.models.wan.transformer.strategy import Strategy, make_mesh
from aoizora.models.wan.video.sampling import make_denoise_step, sample
from aoizora.models.wan.video.schedulers import EulerScheduler, UniPCScheduler

pytestmark = [
    pytest.mark.slow,  # runs the model on 8 CPU devices
    pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 host devices (tests/conftest.py)"),
]

STRATEGIES = [
    Strategy(data=2, context=4, attention="allgather", weights="gathered"),
    Strategy(data=2, context=4, attention="ulysses", weights="gathered"),
    Strategy(data=2, context=4, attention="ring", weights="gathered"),
    Strategy(fsdp=2, context=4, attention="ring", weights="gathered"),
    Strategy(context=8, attention="allgather", weights="replicated"),
    Strategy(data=2, context=2, tensor=2, attention="ulysses", weights="gathered+tensor"),
    Strategy(context=4, tensor=2, attention="ring", weights="tensor"),
    # 2D context: Ulysses × ring over two mesh axes, and its degenerate splits
    Strategy(data=2, context=4, context_ulysses=2, attention="ulysses_ring", weights="gathered"),
    Strategy(data=2, context=4, context_ulysses=4, attention="ulysses_ring", weights="gathered"),
    Strategy(data=2, context=4, context_ulysses=1, attention="ulysses_ring", weights="gathered"),
    Strategy(context=4, tensor=2, context_ulysses=2, attention="ulysses_ring", weights="gathered+tensor"),
    # Ulysses chunked by head groups
    Strategy(data=2, context=2, attention="ulysses", weights="gathered", ulysses_chunks=2),
    Strategy(data=2, context=4, context_ulysses=2, attention="ulysses_ring", weights="gathered", ulysses_chunks=2),
]


def _inputs(cfg, video: VideoShape, seed=0):
    rng = np.random.default_rng(seed)
    _, t, h, w = video.latent_shape(cfg)
    lat = jnp.asarray(rng.standard_normal((1, cfg.out_channels, t, h, w)), jnp.float32)
    tc = jnp.asarray(rng.standard_normal((1, 24, cfg.text_dim)), jnp.float32)
    tu = jnp.asarray(rng.standard_normal((1, 24, cfg.text_dim)), jnp.float32)
    img = cond = None
    if cfg.is_i2v:
        img = jnp.asarray(rng.standard_normal((1, cfg.image_len, cfg.image_dim)), jnp.float32)
        cond = jnp.asarray(rng.standard_normal((1, cfg.in_channels - cfg.out_channels, t, h, w)), jnp.float32)
    return lat, tc, tu, img, cond


# 9 frames at 80x48 px → latent (3, 6, 10) → 45 tokens: padded for every context degree here.
VIDEO = VideoShape(frames=9, height=48, width=80)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=lambda s: s.describe().replace(" ", ","))
def test_denoise_step_sharded_equals_single(strategy):
    cfg = TINY_T2V
    sched = UniPCScheduler(4, shift=5.0)
    params = init_params(cfg, seed=3)
    lat, tc, tu, img, cond = _inputs(cfg, VIDEO)
    state = sched.init_state(lat)
    ref, ref_state = make_denoise_step(cfg, sched)(params, lat, state, tc, tu)
    mesh = make_mesh(strategy, jax.devices()[: strategy.num_devices])
    sharded_params = jax.device_put(params, param_shardings(cfg, strategy, mesh))
    out, out_state = make_denoise_step(cfg, sched, strategy, mesh)(sharded_params, lat, state, tc, tu)
    err = rel_err(out - lat, ref - lat)  # compare the update, not the (large) input it is added to
    print(f"{strategy.describe()}: rel err of the step update {err:.2e}")
    assert out.shape == lat.shape
    assert err < 1e-5
    assert int(out_state["step"]) == 1
    np.testing.assert_allclose(np.asarray(out_state["m_last"]), np.asarray(ref_state["m_last"]), rtol=1e-4, atol=1e-4)


def test_i2v_denoise_step_sharded_equals_single():
    cfg = TINY_I2V
    sched = EulerScheduler(3, shift=3.0)
    params = init_params(cfg, seed=4)
    lat, tc, tu, img, cond = _inputs(cfg, VIDEO, seed=1)
    state = sched.init_state(lat)
    ref, _ = make_denoise_step(cfg, sched)(params, lat, state, tc, tu, img, cond)
    strategy = Strategy(data=2, context=2, tensor=2, attention="ring", weights="gathered+tensor")
    mesh = make_mesh(strategy, jax.devices())
    out, _ = make_denoise_step(cfg, sched, strategy, mesh)(params, lat, state, tc, tu, img, cond)
    assert rel_err(out - lat, ref - lat) < 1e-5


def test_short_sampling_run_sharded_equals_single():
    cfg = TINY_T2V
    sched = UniPCScheduler(4, shift=3.0)
    params = init_params(cfg, seed=5)
    lat, tc, tu, _, _ = _inputs(cfg, VIDEO, seed=2)
    single = sample(make_denoise_step(cfg, sched, guidance_scale=5.0), params, lat, sched, tc, tu)
    strategy = Strategy(data=2, context=4, attention="ulysses", weights="gathered")
    mesh = make_mesh(strategy, jax.devices())
    sharded = sample(make_denoise_step(cfg, sched, strategy, mesh, guidance_scale=5.0), params, lat, sched, tc, tu)
    assert single.shape == lat.shape == sharded.shape
    assert np.isfinite(np.asarray(single)).all()
    assert rel_err(sharded, single) < 1e-5
    assert rel_err(single, lat) > 1e-2  # the run actually changed the latent


def test_guidance_scale_matters():
    cfg = TINY_T2V
    sched = EulerScheduler(2, shift=3.0)
    params = init_params(cfg, seed=6)
    lat, tc, tu, _, _ = _inputs(cfg, VIDEO, seed=3)
    st = sched.init_state(lat)
    a, _ = make_denoise_step(cfg, sched, guidance_scale=1.0)(params, lat, st, tc, tu)
    b, _ = make_denoise_step(cfg, sched, guidance_scale=5.0)(params, lat, st, tc, tu)
    assert rel_err(a - lat, b - lat) > 1e-2


# the Ulysses exchange left to the partitioner (with_sharding_constraint) instead of an all-to-all
EXCHANGE_STRATEGIES = [
    Strategy(data=2, context=4, attention="ulysses", weights="gathered"),
    Strategy(data=2, context=2, tensor=2, attention="ulysses", weights="gathered+tensor"),
    Strategy(data=2, context=4, context_ulysses=2, attention="ulysses_ring", weights="gathered"),
    Strategy(context=4, tensor=2, context_ulysses=2, attention="ulysses_ring", weights="gathered+tensor"),
]


@pytest.mark.parametrize("strategy", EXCHANGE_STRATEGIES, ids=lambda s: s.describe().replace(" ", ","))
def test_ulysses_by_sharding_constraint_equals_single(strategy):
    cfg = TINY_T2V.replace(ulysses_exchange="sharding_constraint")
    sched = UniPCScheduler(4, shift=5.0)
    params = init_params(cfg, seed=3)
    lat, tc, tu, _, _ = _inputs(cfg, VIDEO)
    state = sched.init_state(lat)
    ref, _ = make_denoise_step(TINY_T2V, sched)(params, lat, state, tc, tu)
    mesh = make_mesh(strategy, jax.devices()[: strategy.num_devices])
    step = make_denoise_step(cfg, sched, strategy, mesh)
    sharded_params = jax.device_put(params, param_shardings(cfg, strategy, mesh))
    out, _ = step(sharded_params, lat, state, tc, tu)
    assert rel_err(out - lat, ref - lat) < 1e-5
    # the program exchanges by the partitioner's all-to-all, not one inside the attention's shard_map
    text = step.lower(sharded_params, lat, state, tc, tu).as_text()
    assert "sharding_constraint" in text


def test_chunked_ulysses_needs_the_all_to_all_exchange():
    from aoizora.errors import ShapeError

    cfg = TINY_T2V.replace(ulysses_exchange="sharding_constraint")
    strategy = Strategy(data=2, context=2, attention="ulysses", weights="gathered", ulysses_chunks=2)
    sched = UniPCScheduler(4, shift=5.0)
    params = init_params(cfg, seed=3)
    lat, tc, tu, _, _ = _inputs(cfg, VIDEO)
    mesh = make_mesh(strategy, jax.devices()[: strategy.num_devices])
    with pytest.raises(ShapeError, match="chunks"):
        make_denoise_step(cfg, sched, strategy, mesh)(params, lat, sched.init_state(lat), tc, tu)


def test_a_step_of_two_videos_is_two_steps_of_one():
    """B videos a step: the CFG batch is 2B (the B conditional samples, then the B unconditional),
    and each video's update is the one a step of that video alone makes."""
    cfg = TINY_T2V
    sched = UniPCScheduler(4, shift=5.0)
    params = init_params(cfg, seed=3)
    (lat_a, tc_a, tu_a, _, _), (lat_b, tc_b, tu_b, _, _) = _inputs(cfg, VIDEO, seed=0), _inputs(cfg, VIDEO, seed=5)
    one = make_denoise_step(cfg, sched)
    ref_a, _ = one(params, lat_a, sched.init_state(lat_a), tc_a, tu_a)
    ref_b, _ = one(params, lat_b, sched.init_state(lat_b), tc_b, tu_b)
    strategy = Strategy(data=2, context=4, attention="ulysses", weights="gathered")
    mesh = make_mesh(strategy, jax.devices()[: strategy.num_devices])
    two = make_denoise_step(cfg, sched, strategy, mesh, videos=2)
    lat = jnp.concatenate([lat_a, lat_b])
    out, _ = two(jax.device_put(params, param_shardings(cfg, strategy, mesh)), lat, sched.init_state(lat),
                 jnp.concatenate([tc_a, tc_b]), jnp.concatenate([tu_a, tu_b]))
    assert rel_err(out[:1] - lat_a, ref_a - lat_a) < 1e-5
    assert rel_err(out[1:] - lat_b, ref_b - lat_b) < 1e-5


def test_a_space_lowers_the_program_of_its_batch():
    """A space of CFG batch 4 (two videos) lowers a step of two videos, the batch its kernels are costed at."""
    from aoizora.errors import ShapeError
    from aoizora.models.wan.space.space import WanSpace

    strategy = Strategy(data=2, context=4, attention="ulysses", weights="gathered")
    mesh = make_mesh(strategy, jax.devices()[: strategy.num_devices])
    for batch, videos in ((2, 1), (4, 2)):
        inputs = WanSpace(TINY_T2V, VIDEO, batch=batch, kernel="xla").lowering_inputs(strategy, mesh)
        assert inputs.args[1].shape[0] == videos  # the latents
        assert inputs.args[3].shape[0] == videos  # the conditional text
    with pytest.raises(ShapeError, match="2 per video"):
        WanSpace(TINY_T2V, VIDEO, batch=3)
