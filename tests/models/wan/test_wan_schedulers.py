"""The JAX flow-matching schedulers against diffusers' on the same model outputs."""

from __future__ import annotations

import diffusers
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np
import pytest
import torch

from aoizora.models.wan.video.schedulers import EulerScheduler, UniPCScheduler  # noqa: E402

pytestmark = pytest.mark.parity


def _fake_model(x: np.ndarray, t: float, k: int) -> np.ndarray:
    """A deterministic, nonlinear stand-in for the transformer (depends on x, t and the step)."""
    return np.tanh(x * (0.3 + t / 2000.0)) + 0.1 * np.sin(k + x)


def _run_ref(sched, n, x):
    sched.set_timesteps(n)
    ts = sched.timesteps.numpy().astype(np.float32)
    xs = torch.from_numpy(x)
    for k, t in enumerate(sched.timesteps):
        out = torch.from_numpy(_fake_model(xs.numpy(), float(t), k).astype(np.float32))
        xs = sched.step(out, t, xs, return_dict=False)[0]
    return ts, sched.sigmas.numpy(), xs.numpy()


def _run_ours(sched, x):
    state = sched.init_state(jnp.asarray(x))
    step = jax.jit(sched.step)
    xs = jnp.asarray(x)
    for k in range(sched.num_steps):
        t = float(sched.timestep(state))
        out = jnp.asarray(_fake_model(np.asarray(xs), t, k).astype(np.float32))
        xs, state = step(state, out, xs)
    return np.asarray(xs)


@pytest.mark.parametrize("n,shift", [(6, 5.0), (10, 3.0), (1, 5.0)])
def test_euler_matches_diffusers(n, shift):
    x = np.random.default_rng(0).standard_normal((1, 4, 2, 3, 3)).astype(np.float32)
    ref = diffusers.FlowMatchEulerDiscreteScheduler(shift=shift)
    ts, sig, out_ref = _run_ref(ref, n, x)
    ours = EulerScheduler(n, shift)
    np.testing.assert_allclose(ours.timesteps, ts, rtol=1e-6)
    np.testing.assert_allclose(ours.sigmas, sig, rtol=1e-6)
    np.testing.assert_allclose(_run_ours(ours, x), out_ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("n,shift,order", [(8, 5.0, 2), (12, 3.0, 2), (5, 5.0, 1), (2, 3.0, 2)])
def test_unipc_matches_diffusers(n, shift, order):
    x = np.random.default_rng(1).standard_normal((1, 4, 2, 3, 3)).astype(np.float32)
    ref = diffusers.UniPCMultistepScheduler(
        prediction_type="flow_prediction", use_flow_sigmas=True, num_train_timesteps=1000,
        flow_shift=shift, solver_order=order,
    )
    ts, sig, out_ref = _run_ref(ref, n, x)
    ours = UniPCScheduler(n, shift, solver_order=order)
    np.testing.assert_allclose(ours.timesteps, ts)
    np.testing.assert_allclose(ours.sigmas, sig, rtol=1e-6)
    out = _run_ours(ours, x)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, out_ref, rtol=1e-4, atol=1e-4)
