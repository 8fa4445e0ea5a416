"""Bad input: checkpoints with missing/wrong tensors, impossible videos, illegal strategies."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file
from wan_testutil import TINY_T2V

from aoizora.errors import CheckpointError, ShapeError, StrategyError
from aoizora.models.wan.transformer.checkpoint import load_params, save_params
from aoizora.models.wan.transformer.config import WAN_I2V_14B, WAN_T2V_1_3B, WAN_T2V_14B, VideoShape
from aoizora.models.wan.transformer.model import forward
from aoizora.models.wan.transformer.params import init_params, param_shapes
from aoizora.models.wan.transformer.strategy import Strategy, check_strategy, make_mesh, validate_strategy


@pytest.fixture()
def ckpt(tmp_path):
    params = init_params(TINY_T2V, seed=0)
    path = tmp_path / "diffusion_pytorch_model.safetensors"
    save_params(params, TINY_T2V, path)
    return params, path


def test_roundtrip_single_and_sharded_index(ckpt, tmp_path):
    params, path = ckpt
    loaded = load_params(path, TINY_T2V)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, loaded)
    # split into two shards with an index, as large diffusers checkpoints are
    tensors = load_file(str(path))
    names = sorted(tensors)
    d = tmp_path / "sharded"
    d.mkdir()
    half = len(names) // 2
    save_file({n: tensors[n] for n in names[:half]}, str(d / "part-1.safetensors"))
    save_file({n: tensors[n] for n in names[half:]}, str(d / "part-2.safetensors"))
    index = {"weight_map": {n: ("part-1.safetensors" if i < half else "part-2.safetensors")
                            for i, n in enumerate(names)}}
    (d / "diffusion_pytorch_model.safetensors.index.json").write_text(json.dumps(index))
    loaded = load_params(d, TINY_T2V)
    jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), params, loaded)


def test_load_bf16_with_shardings(ckpt):
    _, path = ckpt
    cfg = TINY_T2V.replace(dtype=jnp.bfloat16)
    from aoizora.models.wan.transformer.sharding import param_shardings

    s = Strategy(data=2, context=4, weights="gathered")
    mesh = make_mesh(s, jax.devices()[:8])
    sh = param_shardings(cfg, s, mesh)
    loaded = load_params(path, cfg, shardings=sh)
    q = loaded["blocks"]["attn1"]["q"]["w"]
    assert q.dtype == jnp.bfloat16 and q.sharding == sh["blocks"]["attn1"]["q"]["w"]
    assert loaded["blocks"]["sst"].dtype == jnp.float32  # modulation tables stay float32


def test_missing_tensor_is_named(ckpt, tmp_path):
    _, path = ckpt
    tensors = load_file(str(path))
    del tensors["blocks.1.attn2.to_v.bias"]
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad))
    with pytest.raises(CheckpointError, match=r"blocks\.1\.attn2\.to_v\.bias"):
        load_params(bad, TINY_T2V)


def test_wrong_shape_is_named(ckpt, tmp_path):
    _, path = ckpt
    tensors = load_file(str(path))
    tensors["blocks.0.ffn.net.0.proj.weight"] = np.zeros((7, TINY_T2V.dim), np.float32)
    bad = tmp_path / "bad.safetensors"
    save_file(tensors, str(bad))
    with pytest.raises(CheckpointError, match=r"blocks\.0\.ffn\.net\.0\.proj\.weight.*\(7, 64\)"):
        load_params(bad, TINY_T2V)


def test_unexpected_tensor_and_missing_file(ckpt, tmp_path):
    _, path = ckpt
    tensors = load_file(str(path))
    tensors["blocks.2.attn1.to_q.weight"] = np.zeros((64, 64), np.float32)  # a third layer
    bad = tmp_path / "extra.safetensors"
    save_file(tensors, str(bad))
    with pytest.raises(CheckpointError, match=r"blocks\.2\.attn1\.to_q\.weight"):
        load_params(bad, TINY_T2V)
    assert load_params(bad, TINY_T2V, strict=False)["blocks"]["sst"].shape[0] == 2
    with pytest.raises(CheckpointError, match="no safetensors"):
        load_params(tmp_path / "nowhere", TINY_T2V)


@pytest.mark.parametrize("video,msg", [
    (VideoShape(80, 720, 1280), "4n\\+1"),
    (VideoShape(81, 720, 1270), "multiple of 16"),
    (VideoShape(81, 728, 1280), "multiple of 16"),
])
def test_bad_video_shapes(video, msg):
    with pytest.raises(ShapeError, match=msg):
        video.latent_shape(WAN_T2V_14B)


def test_token_counts_of_the_real_configs():
    assert VideoShape(81, 720, 1280).tokens(WAN_T2V_14B) == 75_600
    assert VideoShape(81, 480, 832).tokens(WAN_T2V_1_3B) == 32_760
    assert VideoShape(81, 480, 832).latent_shape(WAN_I2V_14B) == (36, 21, 60, 104)


def test_forward_rejects_bad_latent():
    params = init_params(TINY_T2V)
    with pytest.raises(ShapeError, match="channels"):
        forward(params, jnp.zeros((1, 3, 1, 4, 4)), jnp.zeros((1,)), jnp.zeros((1, 5, 32)), config=TINY_T2V)
    with pytest.raises(ShapeError, match="patch"):
        forward(params, jnp.zeros((1, 4, 1, 5, 4)), jnp.zeros((1,)), jnp.zeros((1, 5, 32)), config=TINY_T2V)


def test_parameter_counts():
    def count(cfg):
        return sum(int(np.prod(s.shape)) for s in jax.tree.leaves(param_shapes(cfg)))

    assert abs(count(WAN_T2V_14B) / 1e9 - 14.29) < 0.05
    assert abs(count(WAN_T2V_1_3B) / 1e9 - 1.42) < 0.03
    assert count(WAN_I2V_14B) > count(WAN_T2V_14B)


def test_strategy_reasons():
    cfg = WAN_T2V_14B
    video = VideoShape(81, 720, 1280)
    assert check_strategy(Strategy(data=2, context=4, attention="ulysses"), cfg, video, num_devices=8) == []
    r = check_strategy(Strategy(context=3, tensor=3, attention="ulysses"), cfg, video, num_devices=8)
    assert any("40 attention heads are not divisible by tensor=3" in x for x in r)
    assert any("uses 9 devices, the slice has 8" in x for x in r)
    r = check_strategy(Strategy(context=16, attention="ulysses"), cfg, video)
    assert any("Ulysses needs heads/tensor = 40 divisible by context=16" in x for x in r)
    r = check_strategy(Strategy(data=4, context=2), cfg, video)
    assert any("batch 2 is not divisible by data×fsdp = 4" in x for x in r)
    r = check_strategy(Strategy(data=2, weights="gathered"), cfg, video)
    assert any("shards embed over fsdp×context, but both are 1" in x for x in r)
    r = check_strategy(Strategy(data=2, context=4, weights="tensor"), cfg, video)
    assert any("tensor=1" in x for x in r)
    r = check_strategy(Strategy(context=3, weights="gathered"), cfg, video)
    assert any("model dim 5120 is not divisible by fsdp×context = 3" in x for x in r)
    r = check_strategy(Strategy(context=2, attention="sideways"), cfg, video)
    assert any("unknown attention variant" in x for x in r)
    r = check_strategy(Strategy(context=2), cfg, VideoShape(80, 720, 1280))
    assert any("4n+1" in x for x in r)
    with pytest.raises(StrategyError, match="illegal strategy"):
        validate_strategy(Strategy(context=3, tensor=3), cfg, video)


def test_forward_rejects_illegal_strategy_on_mesh():
    s = Strategy(context=2, tensor=4, attention="ulysses", weights="replicated")  # 4 heads / 4 = 1, 1 % 2 != 0
    mesh = make_mesh(s, jax.devices()[:8])
    params = init_params(TINY_T2V)
    with pytest.raises(StrategyError, match="Ulysses"):
        forward(params, jnp.zeros((2, 4, 1, 4, 4)), jnp.zeros((2,)), jnp.zeros((2, 5, 32)),
                config=TINY_T2V, strategy=s, mesh=mesh)


def test_enumerate_strategies_v5e_8():
    from aoizora.models.wan.transformer.strategy import enumerate_strategies

    video = VideoShape(81, 720, 1280)
    legal = enumerate_strategies(WAN_T2V_14B, video, 8)
    assert Strategy(data=2, context=4, attention="ulysses", weights="gathered") in legal
    assert Strategy(data=2, context=4, attention="ring", weights="gathered") in legal
    assert all(s.num_devices == 8 and s.batch_degree <= 2 for s in legal)
    assert all(check_strategy(s, WAN_T2V_14B, video, num_devices=8) == [] for s in legal)
    # data=4/8 would split the CFG batch of 2 unevenly
    assert not any(s.data >= 4 or s.data * s.fsdp > 2 for s in legal)
    # weights "gathered" needs fsdp×context > 1; Ulysses needs (40/tensor) % context == 0
    assert not any(s.weights == "gathered" and s.fsdp * s.context == 1 for s in legal)
    assert not any(s.attention == "ulysses" and (40 // s.tensor) % s.context for s in legal)
    assert any(s.tensor == 8 for s in legal)  # 40 heads and 13824 ffn split 8 ways
    # Ulysses on 8-way context needs 40/8 heads: legal; on 1.3B's 12 heads it is not
    assert any(s.attention == "ulysses" and s.context == 8 for s in legal)
    legal_13 = enumerate_strategies(WAN_T2V_1_3B, VideoShape(81, 480, 832), 8)
    assert not any(s.attention == "ulysses" and s.context == 8 for s in legal_13)
    assert any(s.attention == "ulysses" and s.context == 4 for s in legal_13)


def test_2d_context_strategy_mesh_rules_and_legality():
    from aoizora.models.wan.transformer.strategy import (
        ULYSSES_RING_MESH_AXES,
        SplashBlocks,
        enumerate_strategies,
        logical_rules,
    )

    video = VideoShape(81, 720, 1280)
    st = Strategy(data=2, context=8, context_ulysses=2, attention="ulysses_ring", weights="gathered")
    assert st.mesh_axes == ULYSSES_RING_MESH_AXES and st.mesh_shape == (2, 1, 4, 2, 1)
    assert st.axis_sizes == {"data": 2, "fsdp": 1, "context_ring": 4, "context_ulysses": 2, "tensor": 1}
    rules = logical_rules(st)
    assert rules["length"] == ("context_ring", "context_ulysses")  # shard r·U + u: ring groups hold spans
    assert rules["embed"] == ("context_ring", "context_ulysses")
    assert check_strategy(st, WAN_T2V_14B, video, num_devices=16) == []
    # a plain context strategy keeps the four axes it always had
    assert Strategy(data=2, context=8, attention="ring").axis_sizes == {"data": 2, "fsdp": 1, "context": 8, "tensor": 1}
    bad = [
        (Strategy(context=8, context_ulysses=3, attention="ulysses_ring"), "does not divide"),
        (Strategy(context=8, context_ulysses=2, attention="ring"), "only for attention='ulysses_ring'"),
        (Strategy(context=8, tensor=2, context_ulysses=8, attention="ulysses_ring"), "divisible by context_ulysses=8"),
        (Strategy(context=8, attention="ring", ulysses_chunks=2), "does not have"),
        (Strategy(context=4, attention="ulysses", ulysses_chunks=4), "chunk"),  # 40/4 = 10 heads, 4 chunks
        (Strategy(context=8, attention="allgather", splash_blocks=SplashBlocks(2048, 2048, 1000)), "lanes"),
        (Strategy(context=8, attention="allgather", splash_blocks=SplashBlocks(2048, 1536, 1024)), "multiple of"),
    ]
    for strategy, reason in bad:
        reasons = check_strategy(strategy, WAN_T2V_14B, video, num_devices=8)
        assert any(reason in r for r in reasons), (strategy.describe(), reasons)
    legal = enumerate_strategies(WAN_T2V_14B, video, 8)
    two_d = {(s.context_ulysses, s.context_ring) for s in legal if s.attention == "ulysses_ring"}
    assert two_d == {(2, 2), (2, 4), (4, 2)}


def test_plan_description_round_trips_to_the_strategy():
    """What the space writes into a plan (through JSON) is what the runner reads back."""
    from aoizora.models.wan.space.space import WanSpace
    from aoizora.models.wan.transformer.strategy import SplashBlocks

    space = WanSpace(WAN_T2V_14B, VideoShape(81, 720, 1280))
    for st in (Strategy(data=2, context=4, context_ulysses=2, attention="ulysses_ring", ulysses_chunks=2,
                        splash_blocks=SplashBlocks(2048, 2048, 1024)),
               Strategy(data=2, context=4, attention="allgather")):
        doc = json.loads(json.dumps(space.describe(st)))
        assert Strategy.from_description(doc) == st


def test_a_plans_strategy_description_round_trips():
    from aoizora.errors import StrategyError
    from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy

    st = Strategy(data=2, context=4, attention="ulysses_ring", weights="gathered", context_ulysses=2,
                  ulysses_chunks=2, splash_blocks=SplashBlocks(2048, 2048, 1024))
    desc = {"mesh": st.axis_sizes, "attention": st.attention, "weights": st.weights, "ulysses_chunks": 2,
            "splash_blocks": {"block_q": 2048, "block_kv": 2048, "block_kv_compute": 1024}}
    assert Strategy.from_description(desc) == st
    with pytest.raises(StrategyError, match="not a Wan strategy"):
        Strategy.from_description({"mesh": {"data": 2}})


def _safetensors_bytes(header: dict, data: bytes = b"") -> bytes:
    import struct

    blob = json.dumps(header).encode()
    return struct.pack("<Q", len(blob)) + blob + data


@pytest.mark.parametrize(
    "content, fragment",
    [
        (np.random.default_rng(0).bytes(4096), "not a safetensors file"),  # random bytes: a huge length field
        (b'{"weight_map": {"a": "b"}}' + b" " * 64, "not a safetensors file"),  # a JSON file
        (b"\x01\x00", "too short"),
        (b"\x04\x00\x00\x00\x00\x00\x00\x00\xff\xfe\xfd\xfc", "no readable safetensors header"),  # not UTF-8
        (b"\x03\x00\x00\x00\x00\x00\x00\x00NaN", "no readable safetensors header"),
        (b"\x02\x00\x00\x00\x00\x00\x00\x00[]", "not a JSON object"),
        (_safetensors_bytes({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 4), "malformed"),
        (_safetensors_bytes({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 0]}}), "malformed"),
        (_safetensors_bytes({"w": {"dtype": "F32", "shape": [2]}}), "malformed"),
    ],
)
def test_corrupt_safetensors_files_raise_checkpoint_error(tmp_path, content, fragment):
    from aoizora.models.wan.transformer.checkpoint import SafetensorsFile

    path = tmp_path / "model.safetensors"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=fragment) as info:
        SafetensorsFile(path)
    assert str(path) in str(info.value) and "; " in str(info.value)  # names the file and what to do


def test_corrupt_index_and_config_raise_checkpoint_error(tmp_path):
    from aoizora.models.wan.transformer.checkpoint import load_config

    index = tmp_path / "model.safetensors.index.json"
    index.write_bytes(b"\xff\xfe not utf-8")
    with pytest.raises(CheckpointError, match="cannot read checkpoint index"):
        load_params(index, TINY_T2V)
    index.write_text('{"weight_map": [1, 2]}')
    with pytest.raises(CheckpointError, match="no weight_map"):
        load_params(index, TINY_T2V)
    (tmp_path / "config.json").write_bytes(b"\xff")
    with pytest.raises(CheckpointError, match="config.json"):
        load_config(tmp_path)
