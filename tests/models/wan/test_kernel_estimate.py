"""A Pallas call given a cost estimate: the same computation, the estimate on its pallas_call."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import pallas as pl

from aoizora.models.wan.transformer.attention import SplashTiles, run_splash
from aoizora.models.wan.transformer.kernel_estimate import with_cost_estimate


def _pallas_estimates(jaxpr) -> list:
    out = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            out.append(eqn.params["cost_estimate"])
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            out += _pallas_estimates(sub)
    return out


def _case():
    tiles = SplashTiles.of(256, 384, block_q=128, block_kv=128)
    kernel = tiles.kernel(2, True, interpret=True)
    rng = np.random.default_rng(0)
    q, k, v = (jnp.asarray(rng.standard_normal((3, 2, n, 128)), jnp.bfloat16) for n in (256, 384, 384))
    return tiles, kernel, q, k, v, tiles.segments(jnp.arange(384) < 300)


def test_the_estimate_reaches_every_pallas_call_and_the_batch_scales_it():
    tiles, kernel, q, k, v, seg = _case()
    estimate = tiles.estimate(2, 128, 2, residuals=True)
    marked = jax.make_jaxpr(lambda a, b, c: run_splash(kernel, a, b, c, seg, "t", estimate))(q, k, v)
    plain = jax.make_jaxpr(lambda a, b, c: run_splash(kernel, a, b, c, seg, "t"))(q, k, v)
    assert _pallas_estimates(plain.jaxpr) == [None]
    (batched,) = _pallas_estimates(marked.jaxpr)
    # the kernel is vmapped over the batch of 3: its per-call estimate, three times
    assert (batched.flops, batched.transcendentals, batched.bytes_accessed) == (
        3 * estimate.flops, 3 * estimate.transcendentals, 3 * estimate.bytes_accessed)
    assert estimate.flops == 4 * 2 * 256 * 384 * 128 and estimate.transcendentals == 2 * 256 * 384


def test_the_marked_call_computes_what_the_kernel_does():
    tiles, kernel, q, k, v, seg = _case()
    out, (lse,) = run_splash(kernel, q, k, v, seg, "t", tiles.estimate(2, 128, 2, residuals=True))
    ref, (ref_lse,) = run_splash(kernel, q, k, v, seg, "t")
    np.testing.assert_array_equal(np.asarray(out, np.float32), np.asarray(ref, np.float32))
    np.testing.assert_array_equal(np.asarray(lse), np.asarray(ref_lse))


def test_a_function_without_pallas_calls_is_left_as_it_was():
    f = with_cost_estimate(lambda x, y: (x @ y, {"s": x.sum()}), pl.CostEstimate(flops=1, transcendentals=0,
                                                                                 bytes_accessed=1))
    x = jnp.ones((4, 4))
    out = f(x, x)
    assert float(out[1]["s"]) == 16.0 and out[0].shape == (4, 4)
