"""The generic scanned transformer (`aoizora.workloads`): its strategy space enumerates each
distinct sharding once, refuses what cannot run, and every legal sharding computes what the
unsharded program computes (on the 8 CPU host devices `tests/conftest.py` provides)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding

from aoizora.workloads import TransformerConfig, TransformerSpace, TransformerStrategy
from aoizora.workloads.transformer import abstract_args, make_forward, param_specs
from aoizora.workloads.transformer_space import AXES

SMALL = TransformerConfig(layers=2, dim=64, heads=4, head_dim=16, mlp=128, seq=32, batch=2)


def _legal(space: TransformerSpace, devices: int) -> list[TransformerStrategy]:
    return [c.strategy for c in space.candidates(devices) if c.legal]


def _mesh(strategy: TransformerStrategy) -> Mesh:
    sizes = [strategy.axis_sizes[a] for a in AXES]
    return Mesh(np.array(jax.devices()[:int(np.prod(sizes))]).reshape(sizes), AXES)


def _ways(st: TransformerStrategy) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """The partition, whatever the mesh axes are called: each mesh axis of size > 1 as its size and
    the logical axes it splits."""
    rules = st.rules()
    splits = {a: tuple(sorted(lg for lg, axes in rules.items() if a == axes or (isinstance(axes, tuple) and a in axes)))
              for a, n in st.axis_sizes.items() if n > 1}
    return tuple(sorted((st.axis_sizes[a], logical) for a, logical in splits.items()))


def test_a_duplicate_sharding_would_be_seen():
    data = TransformerStrategy((("data", 2), ("fsdp", 1), ("context", 1), ("tensor", 1)), "replicated")
    fsdp = TransformerStrategy((("data", 1), ("fsdp", 2), ("context", 1), ("tensor", 1)), "replicated")
    assert _ways(data) == _ways(fsdp) and data.key != fsdp.key


@pytest.mark.parametrize("devices", [1, 2, 4, 8])
def test_every_legal_strategy_is_a_distinct_sharding_of_all_devices(devices):
    legal = _legal(TransformerSpace(SMALL), devices)
    assert legal
    assert all(int(np.prod(list(st.axis_sizes.values()))) == devices for st in legal)
    shardings = [_ways(st) for st in legal]
    assert len(set(shardings)) == len(shardings), "two legal strategies shard the same way"
    assert len({st.key for st in legal}) == len(legal)


def test_what_does_not_divide_is_refused_with_its_reason():
    space = TransformerSpace(TransformerConfig(layers=1, dim=64, heads=3, head_dim=16, mlp=96, seq=30, batch=1))
    reasons = space.illegal(TransformerStrategy((("data", 2), ("fsdp", 1), ("context", 4), ("tensor", 2))))
    assert any(r.startswith("batch 1 not divisible") for r in reasons)
    assert any(r.startswith("sequence 30 not divisible") for r in reasons)
    assert any(r.startswith("heads 3 not divisible") for r in reasons)
    assert not any(r.startswith("mlp") for r in reasons)  # 96 = 2 x 48
    # the same mesh written twice: fsdp with replicated weights is data parallelism
    dup = TransformerStrategy((("data", 1), ("fsdp", 2), ("context", 1), ("tensor", 1)), "replicated")
    assert any("duplicate" in r for r in TransformerSpace(SMALL).illegal(dup))


def test_the_rules_map_each_logical_axis_to_its_mesh_axes():
    st = TransformerStrategy((("data", 1), ("fsdp", 2), ("context", 2), ("tensor", 2)), "context+fsdp")
    assert st.rules() == {"batch": "fsdp", "seq": "context", "heads": "tensor", "mlp": "tensor",
                          "embed": ("context", "fsdp")}
    specs = param_specs(st.rules())
    assert specs["wq"] == jax.sharding.PartitionSpec(None, ("context", "fsdp"), "tensor", None)
    assert specs["w2"] == jax.sharding.PartitionSpec(None, "tensor", ("context", "fsdp"))


def _inputs(cfg: TransformerConfig):
    keys = jax.random.split(jax.random.PRNGKey(0), 7)
    x_abs, p_abs = abstract_args(cfg, _mesh(TransformerStrategy(tuple((a, 1) for a in AXES))), {})
    x = jax.random.normal(keys[0], x_abs.shape, jnp.float32)
    params = {k: 0.1 * jax.random.normal(key, v.shape, jnp.float32) for key, (k, v) in zip(keys[1:], p_abs.items(),
                                                                                         strict=True)}
    return x, params


@pytest.mark.slow  # runs every legal sharding of the small transformer on 8 CPU devices
def test_every_legal_sharding_on_8_devices_computes_the_unsharded_result():
    assert len(jax.devices()) >= 8
    x, params = _inputs(SMALL)
    single = TransformerStrategy(tuple((a, 1) for a in AXES))
    want = jax.jit(make_forward(_mesh(single), single.rules()))(x, params)
    for st in _legal(TransformerSpace(SMALL), 8):
        mesh, rules = _mesh(st), st.rules()
        specs = param_specs(rules)
        sharded = {k: jax.device_put(v, NamedSharding(mesh, specs[k])) for k, v in params.items()}
        got = jax.jit(make_forward(mesh, rules))(x, sharded)
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-4, atol=2e-4, err_msg=st.key)
