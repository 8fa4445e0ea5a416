"""A Pallas kernel call with a cost estimate for the compiler's scheduler.

libtpu's latency-hiding scheduler overlaps a collective with the work it expects to take as long.
A Pallas call carries what it costs only as the `cost_estimate` of its `pallas_call`; JAX's splash
kernel (jax 0.10.2, `make_splash_mha`) sets none, MaxDiffusion's tokamax kernels set one. Without
it the scheduler takes the call for cheap: in a ring it issues every K/V rotation before the first
kernel and leaves them exposed. `with_cost_estimate` traces the call and sets the estimate on each
`pallas_call` in it (the same program otherwise), since JAX's kernel has no argument for it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.extend.core as jex
from jax.experimental import pallas as pl


def with_cost_estimate(fn: Callable[..., Any], estimate: pl.CostEstimate) -> Callable[..., Any]:
    """`fn` with `estimate` on every `pallas_call` it makes (per call, before any `vmap`: a batched
    call scales its estimate by the batch)."""

    def call(*args: Any) -> Any:
        closed, shapes = jax.make_jaxpr(fn, return_shape=True)(*args)
        marked = jex.ClosedJaxpr(_marked(closed.jaxpr, estimate), closed.consts)
        return jax.tree.unflatten(jax.tree.structure(shapes), jex.jaxpr_as_fun(marked)(*jax.tree.leaves(args)))

    return call


def _marked(jaxpr: jex.Jaxpr, estimate: pl.CostEstimate) -> jex.Jaxpr:
    """`jaxpr` with `estimate` set on its `pallas_call`s, those of nested jaxprs included."""
    eqns = []
    for eqn in jaxpr.eqns:
        params = {name: _marked_param(value, estimate) for name, value in eqn.params.items()}
        if eqn.primitive.name == "pallas_call":
            params["cost_estimate"] = estimate
        eqns.append(eqn.replace(params=params))
    return jaxpr.replace(eqns=eqns)


def _marked_param(value: Any, estimate: pl.CostEstimate) -> Any:
    if isinstance(value, jex.ClosedJaxpr):
        return jex.ClosedJaxpr(_marked(value.jaxpr, estimate), value.consts)
    if isinstance(value, jex.Jaxpr):
        return _marked(value, estimate)
    return value
