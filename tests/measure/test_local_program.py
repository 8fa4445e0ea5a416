"""One device's share of a partitioned program, localized and run alone (CPU devices stand in for
the chip; the rewrite is the same text for any backend)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.errors import LocalizeError
from aoizora.measure.chip import compile_module_text
from aoizora.measure.local_program import localize, partitioned_module


def _mesh() -> Mesh:
    return Mesh(np.array(jax.devices("cpu")[:8]).reshape(2, 4), ("f", "c"))


def _partitioned(fn, *specs_and_shapes) -> str:
    mesh = _mesh()
    args = [jax.ShapeDtypeStruct(shape, jnp.float32, sharding=NamedSharding(mesh, spec))
            for shape, spec in specs_and_shapes]
    return partitioned_module(jax.jit(fn).lower(*args))


def _run_alone(text: str, *args: np.ndarray) -> np.ndarray:
    device = jax.devices("cpu")[0]
    executable = compile_module_text(text, device)
    out = executable.execute_sharded([jax.device_put(a, device) for a in args])
    return np.asarray(out.disassemble_into_single_device_arrays()[0][0])


@pytest.fixture(scope="module")
def contraction() -> str:
    """x (16x128 per device, sharded over c) @ w (64x256 per device, sharded over f): an all-reduce
    over f of the partial products, then a sum over rows reduced over c."""
    def f(x, w):
        y = x @ w
        return jnp.sum(y * y, axis=0, keepdims=True) + y

    return _partitioned(f, ((64, 128), P("c", None)), ((128, 256), P("f", None)))


def test_every_collective_is_replaced_and_the_module_runs_on_one_device(contraction):
    local = localize(contraction)
    assert local.replaced["all-reduce"] >= 1 and local.replaced["partition-id"] >= 1
    for collective in ("all-reduce(", "all-gather(", "reduce-scatter(", "all-to-all(", "collective-permute("):
        assert collective not in local.text
    assert "num_partitions=1" in local.text
    x, w = np.ones((16, 128), np.float32), np.ones((64, 256), np.float32)
    # device 0 alone: its slice of x (columns 0..63, partition-id 0) times its w, no all-reduce
    out = _run_alone(local.text, x, w)
    assert out.shape == (16, 256)
    np.testing.assert_allclose(out, 16 * 64.0 ** 2 + 64.0)


def test_an_all_gather_becomes_copies_of_the_local_shard():
    def f(x):
        return jax.lax.with_sharding_constraint(x * 2.0, NamedSharding(_mesh(), P())) + 1.0

    text = _partitioned(f, ((32, 8), P("c", None)))
    local = localize(text)
    assert local.replaced["all-gather"] == 1
    shard = np.arange(8 * 8, dtype=np.float32).reshape(8, 8)
    np.testing.assert_allclose(_run_alone(local.text, shard), np.tile(shard * 2.0 + 1.0, (4, 1)))


def test_a_module_with_elided_constants_is_refused():
    text = "HloModule m\n\nENTRY %e () -> f32[4] {\n  ROOT %c = f32[4]{0} constant({...})\n}\n"
    with pytest.raises(LocalizeError, match="elides large constants"):
        localize(text)


def test_an_async_collective_is_refused():
    text = ("HloModule m\n\nENTRY %e (p: f32[4]) -> f32[4] {\n  %p = f32[4]{0} parameter(0)\n"
            "  %s = f32[4]{0} all-reduce-start(%p), to_apply=%add\n  ROOT %d = f32[4]{0} all-reduce-done(%s)\n}\n")
    with pytest.raises(LocalizeError, match="right after partitioning"):
        localize(text)


def test_a_reduce_scatter_keeps_the_first_slice():
    text = ("HloModule m, num_partitions=4\n\n%add (a: f32[], b: f32[]) -> f32[] {\n  %a = f32[] parameter(0)\n"
            "  %b = f32[] parameter(1)\n  ROOT %s = f32[] add(%a, %b)\n}\n\n"
            "ENTRY %e (p: f32[8,4]) -> f32[2,4] {\n  %p = f32[8,4]{1,0} parameter(0), sharding={replicated}\n"
            "  ROOT %r = f32[2,4]{1,0} reduce-scatter(%p), channel_id=1, replica_groups={{0,1,2,3}}, "
            "dimensions={0}, to_apply=%add\n}\n")
    local = localize(text)
    assert local.replaced_json() == {"reduce-scatter": 1}
    value = np.arange(32, dtype=np.float32).reshape(8, 4)
    np.testing.assert_allclose(_run_alone(local.text, value), value[:2])


def test_a_program_for_one_device_is_its_module_as_given():
    """One chip's program (a v5e:1x1 plan) has nothing to partition, and the partitioner's pass does
    not run on it: the module before optimization is one device's share, with nothing replaced."""
    sharding = NamedSharding(Mesh(np.array(jax.devices("cpu")[:1]), ("x",)), P())
    x = jax.ShapeDtypeStruct((8, 128), jnp.float32, sharding=sharding)
    local = localize(partitioned_module(jax.jit(lambda a: jnp.tanh(a) @ a.T).lower(x)))
    assert not local.replaced
    np.testing.assert_allclose(_run_alone(local.text, np.ones((8, 128), np.float32)),
                               np.full((8, 8), 128 * np.tanh(1.0)), rtol=1e-5)
