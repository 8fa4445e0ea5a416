"""The stacked weights handed over in the tile the generation's matmuls want (`Strategy.weight_tile`):
which strategies carry it, that a plan keeps it, and that it is what removes libtpu's copy of every
stacked weight on TPU7x (checked against the compiler's buffer assignment)."""

import json
import re

import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh

from aoizora.models.registry import wan_space
from aoizora.models.wan.kernels.experts import legal_expert_strategies
from aoizora.models.wan.transformer.config import WAN_T2V_1_3B, VideoShape
from aoizora.models.wan.transformer.params import param_dtype, param_table
from aoizora.models.wan.transformer.strategy import Strategy, check_strategy
from aoizora.models.wan.video.sampling import lower_denoise_step
from aoizora.models.wan.video.schedulers import UniPCScheduler
from aoizora.toolchain import compile_only_devices
from aoizora.topology import hardware_profile
from tests.compile_seed import through_cache


@pytest.mark.parametrize("generation, tile", [("tpu7x", (16, 128)), ("v5e", None), ("v6e", None), (None, None)])
def test_the_space_hands_replicated_weights_over_in_the_generations_tile(generation, tile):
    space = wan_space("wan2.1-t2v-14b", "720p", 81, generation=generation)
    candidates = space.candidates(8)
    assert {c.strategy.weight_tile for c in candidates if c.strategy.weights == "replicated"} == {tile}
    assert {c.strategy.weight_tile for c in candidates if c.strategy.weights != "replicated"} == {None}
    assert all(("weight_tile=" in c.key) == (c.strategy.weight_tile is not None) for c in candidates)
    if generation is not None:
        assert (tile or (8, 128)) == hardware_profile(generation).tile_16bit


def test_expert_deployments_keep_the_runtimes_layout():
    """MaxDiffusion puts its weights on the devices without a `Format`: its programs are compiled so."""
    config, video = WAN_T2V_1_3B, VideoShape(frames=81, height=720, width=1280)
    experts = legal_expert_strategies(config, video, "tpu7x", 8)
    assert experts and all(strategy.weight_tile is None for _, strategy in experts)


def test_a_plans_description_keeps_the_tile():
    """Through the plan's JSON, the runner reads back the strategy with its tile."""
    space = wan_space("wan2.1-t2v-14b", "720p", 81, generation="tpu7x")
    strategy = next(c.strategy for c in space.candidates(8) if not c.reasons and c.strategy.weight_tile)
    described = json.loads(json.dumps(space.describe(strategy)))
    assert described["weight_tile"] == [16, 128]
    assert Strategy.from_description(described) == strategy


def test_a_tile_is_two_positive_integers_for_16_bit_weights():
    assert any("two positive integers" in r
               for r in check_strategy(Strategy(weights="replicated", weight_tile=(0, 128)), WAN_T2V_1_3B))
    f32 = WAN_T2V_1_3B.replace(dtype=jnp.float32)
    assert any("16-bit" in r for r in check_strategy(Strategy(weights="replicated", weight_tile=(16, 128)), f32))
    assert check_strategy(Strategy(weights="replicated", weight_tile=(16, 128)), WAN_T2V_1_3B) == []


def _compiled_on_tpu7x(tile, weights="replicated"):
    """A two-layer Wan 1.3B step for tpu7x:2x2x1: its temp bytes, compiled HLO and lowered module."""
    config = WAN_T2V_1_3B.replace(num_layers=2)
    strategy = Strategy(data=2, context=4, attention="allgather", weights=weights, kernel="xla", weight_tile=tile)
    mesh = Mesh(np.array(compile_only_devices("tpu7x:2x2x1")).reshape(strategy.mesh_shape), strategy.mesh_axes)
    video = VideoShape(frames=1, height=128, width=128)
    lowered = lower_denoise_step(config, video, strategy, mesh, UniPCScheduler(num_steps=50, shift=3.0))
    # through the session's compile cache (and so the seed): the tile is in the lowered text
    # (`mhlo.layout_mode`), which the cache's key holds
    compiled = through_cache("tpu7x:2x2x1", mesh)(lowered, None)
    return config, compiled.memory_parts["temp"], compiled.hlo_text, lowered.as_text()


@pytest.mark.tpu_compile
def test_the_tile_removes_libtpus_copy_of_every_stacked_weight_on_tpu7x():
    """Handed over in the runtime's tile, every stacked matrix is copied into (16,128) tiles: temp
    holds at least all of them. Handed over in TPU7x's `tile_16bit`, none is copied."""
    config, temp_runtime, _, _ = _compiled_on_tpu7x(None)
    _, temp_tiled, text, _ = _compiled_on_tpu7x(hardware_profile("tpu7x").tile_16bit)
    stacked = sum(int(np.prod(s.shape)) * jnp.dtype(param_dtype(s, config)).itemsize
                  for s in param_table(config) if s.stacked and s.kind == "linear" and not s.fp32)
    assert temp_runtime >= stacked
    assert temp_tiled < stacked / 10
    handed = re.findall(r"= bf16\[2,\d+,\d+\]\{2,1,0:T\((\d+),(\d+)\)\(2,1\)\} parameter\(", text)
    assert handed and {(int(a), int(b)) for a, b in handed} == {(16, 128)}


@pytest.mark.tpu_compile
def test_sharded_stacks_keep_the_runtimes_tile():
    """libtpu lays a sharded parameter out in (8,128) tiles whatever tile it is handed in (jax then
    refuses the program: "Unexpected XLA layout override"), so sharded stacks are handed over as
    the runtime lays them out: the program is the one without a tile."""
    import jax
    from jax.experimental.layout import Format, Layout
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = Mesh(np.array(compile_only_devices("tpu7x:2x2x1")), ("x",))
    sharded = NamedSharding(mesh, PartitionSpec(None, None, "x"))
    stack = jax.ShapeDtypeStruct((4, 1024, 1024), jnp.bfloat16,
                                 sharding=Format(Layout((0, 1, 2), tiling=((16, 128), (2, 1))), sharded))
    x = jax.ShapeDtypeStruct((256, 1024), jnp.bfloat16, sharding=NamedSharding(mesh, PartitionSpec()))
    layers = jax.jit(lambda s, h: jax.lax.scan(lambda h, w: (jnp.tanh(h @ w) @ w.T, None), h, s)[0])
    with pytest.raises(Exception, match="layout override"):
        layers.lower(stack, x).compile()
    _, temp_runtime, _, untiled = _compiled_on_tpu7x(None, weights="gathered")
    _, temp_tiled, _, tiled = _compiled_on_tpu7x((16, 128), weights="gathered")
    assert temp_tiled == temp_runtime and tiled == untiled
