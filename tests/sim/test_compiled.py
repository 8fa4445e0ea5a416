"""The simulator on programs compiled by libtpu and parsed by `aoizora.hlo.analyze`."""

import os

import numpy as np
import pytest

from aoizora.hlo import analyze

LAYERS = 6


@pytest.fixture(scope="module")
def scanned():
    """A 6-layer scan on v5e:2x4, mesh (x=2, y=4), weight columns sharded over y."""
    os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from aoizora.toolchain import compile_only_devices

    mesh = Mesh(np.array(compile_only_devices("v5e:2x4")).reshape(2, 4), ("x", "y"))

    def f(x, w):
        def step(h, wi):
            return jnp.tanh(h @ wi), None

        h, _ = jax.lax.scan(step, x, w)
        return h

    args = (jax.ShapeDtypeStruct((1024, 1024), jnp.bfloat16),
            jax.ShapeDtypeStruct((LAYERS, 1024, 1024), jnp.bfloat16))
    jitted = jax.jit(f, in_shardings=(NamedSharding(mesh, P(None, None)), NamedSharding(mesh, P(None, None, "y"))),
                     out_shardings=NamedSharding(mesh, P()))
    return analyze(jitted.lower(*args).compile())


def test_compiled_scan_on_every_placement(scanned):
    from aoizora.placement import MeshSpec, enumerate_placements
    from aoizora.sim import simulate
    from aoizora.topology import get_topology

    topo = get_topology("v5e:2x4")
    assert scanned.collectives and scanned.loops
    steps = {}
    for place in enumerate_placements(topo, MeshSpec.parse("x=2,y=4")).placements:
        res = simulate(scanned, topo, place)
        full = simulate(scanned, topo, place, extrapolate_loops=False)
        assert res.step_seconds == pytest.approx(full.step_seconds, rel=1e-9)
        np.testing.assert_allclose(res.link_bytes, full.link_bytes, rtol=1e-9)
        for c, timing in zip(scanned.collectives, res.collectives, strict=True):
            assert timing.runs == c.multiplicity
        assert res.step_seconds >= res.compute_seconds > 0
        steps[place.name] = res.step_seconds
    # the placements differ only in where the y-rings lie: the simulator must tell them apart
    assert max(steps.values()) > 1.05 * min(steps.values())
