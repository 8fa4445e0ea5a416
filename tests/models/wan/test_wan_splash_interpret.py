"""The splash-kernel code path (segment-id masking of padded keys, log-sum-exp ring merge,
cross-attention K/V padding) run in the Pallas interpreter on CPU host devices, against the
single-device XLA attention."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from wan_testutil import TINY_I2V, rel_err

from aoizora.models.wan.transformer.config import VideoShape
from aoizora.models.wan.transformer.params import init_params
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy, make_mesh
from aoizora.models.wan.video.sampling import make_forward, opaque_kernel_costs

pytestmark = [
    pytest.mark.slow,  # runs the model on 8 CPU devices
    pytest.mark.skipif(jax.device_count() < 8, reason="needs 8 host devices (tests/conftest.py)"),
]

# head_dim 128 as splash requires; 2 heads, one layer; I2V so the 257 image tokens are padded to 384.
CFG = TINY_I2V.replace(num_layers=1, num_attention_heads=2, attention_head_dim=128,
                       added_kv_proj_dim=256, ffn_dim=128)


# block_q 200 is no multiple of 128: every splash call pads its queries to 200 rows (and drops them)
ODD_BLOCKS = SplashBlocks(block_q=200, block_kv=256, block_kv_compute=128)


@pytest.mark.parametrize("variant,shape", [
    ("allgather", dict(data=2, context=4)),
    ("ulysses", dict(data=2, context=2, tensor=1)),
    ("ring", dict(data=2, context=4)),
    ("ulysses_ring", dict(data=2, context=4, context_ulysses=2)),
    ("ring", dict(data=2, context=4, splash_blocks=ODD_BLOCKS)),
    ("allgather", dict(data=2, context=4, splash_blocks=ODD_BLOCKS)),
    # the ring in the kernel's layout: padded keys masked, padded query rows dropped, once
    ("ring", dict(data=2, context=4, ring_layout="heads_major")),
    ("ring", dict(data=2, context=4, splash_blocks=ODD_BLOCKS, ring_layout="heads_major")),
    ("ulysses_ring", dict(data=2, context=4, context_ulysses=2, ring_layout="heads_major")),
])
def test_splash_interpret_matches_xla(variant, shape):
    rng = np.random.default_rng(0)
    lat = jnp.asarray(rng.standard_normal((2, CFG.in_channels, 2, 4, 6)), jnp.float32)  # 12 tokens
    ts = jnp.asarray([500.0, 20.0])
    text = jnp.asarray(rng.standard_normal((2, 512, CFG.text_dim)), jnp.float32)
    img = jnp.asarray(rng.standard_normal((2, 257, CFG.image_dim)), jnp.float32)
    params = init_params(CFG, seed=1)
    ref = make_forward(CFG)(params, lat, ts, text, img)
    strategy = Strategy(**shape, attention=variant, weights="replicated", kernel="splash-interpret")
    mesh = make_mesh(strategy, jax.devices()[: strategy.num_devices])
    out = make_forward(CFG, strategy, mesh)(params, lat, ts, text, img)
    err = rel_err(out, ref)
    print(f"splash(interpret) {variant}: rel err {err:.2e}")
    assert err < 1e-4
    # the splash path really ran: its calls were recorded with the padded per-device shapes
    video = VideoShape(frames=5, height=32, width=48)  # the latent (2, 4, 6) above
    kernels = opaque_kernel_costs(CFG, video, strategy, mesh)
    ringed = variant in ("ring", "ulysses_ring")
    assert {k.name for k in kernels} == {"splash_ring_step" if ringed else "splash_self", "splash_cross"}
    cross = [k for k in kernels if k.name == "splash_cross"]
    assert {k.kv_shape[1] for k in cross} == {512, 384}  # text; 257 image tokens padded to 3×128
    if strategy.splash_blocks is not None:
        # 12 tokens padded to 4 × 128, 128 per device, padded again to one 200-row block
        assert {k.q_shape[1] for k in kernels} == {200} and {k.block_q for k in kernels} == {200}
        assert {k.block_kv for k in kernels if k.name != "splash_cross"} == {256}


@pytest.mark.parametrize("lq,lk,block", [(512, 1024, (128, 256)), (384, 384, (128, 128))])
def test_splash_mask_gives_pallas_the_full_masks_tables(lq, lk, block):
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask_info as mi

    from aoizora.models.wan.transformer.attention import splash_mask

    heads = splash_mask(lq, lk, 3)
    mask = heads.masks[0]
    assert all(m == mask for m in heads.masks)
    # one mask type: Pallas' table cache hits across calls
    assert mask == splash_mask(lq, lk, 1).masks[0] and hash(mask) == hash(splash_mask(lq, lk, 1).masks[0])
    tile = mask[0:block[0], block[1]:2 * block[1]]
    assert tile.shape == block and tile.all() and tile.any() and not tile.flags.writeable
    assert np.asarray(tile).all() and tile.all(axis=0).shape == (block[1],)
    np.testing.assert_array_equal(mask[1:3, 5:9], sm.FullMask((lq, lk))[1:3, 5:9])
    ours, _ = mi.process_mask(heads, block)
    full, _ = mi.process_mask(sm.MultiHeadMask([sm.FullMask((lq, lk))] * 3), block)
    for name, a in ours._asdict().items():
        b = getattr(full, name)
        if a is None or b is None:
            assert a is None and b is None, name
        else:
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b), err_msg=name)


def _kernel_log_case(attention: str, context_ulysses: int = 1):
    """A 3-layer model's abstract forward inputs for a splash-interpret strategy on 8 host devices."""
    from aoizora.models.wan import abstract_forward_inputs, abstract_params

    cfg = CFG.replace(num_layers=3)
    video = VideoShape(frames=5, height=32, width=48)
    strategy = Strategy(data=2, context=4, attention=attention, weights="replicated", kernel="splash-interpret",
                        context_ulysses=context_ulysses)
    mesh = make_mesh(strategy, jax.devices()[: strategy.num_devices])
    a = abstract_forward_inputs(cfg, video, strategy, mesh)
    args = (abstract_params(cfg, strategy, mesh), a["latents"], a["timestep"], a["text"], a["image"])
    return cfg, video, strategy, mesh, args


def test_kernel_logs_belong_to_their_own_trace():
    """A trace records its kernels in the log its caller passed, and only there: a trace nested in
    another (here inside the outer forward, before its layer scan) neither adds to the outer log
    nor takes the outer scan's layer multiplier; a trace without a log records nothing."""
    from aoizora.models.wan import KernelLog, forward

    cfg, video, ring, ring_mesh, ring_args = _kernel_log_case("ring")
    _, _, uly, uly_mesh, uly_args = _kernel_log_case("ulysses_ring", context_ulysses=2)
    alone_ring = opaque_kernel_costs(cfg, video, ring, ring_mesh)
    alone_uly = opaque_kernel_costs(cfg, video, uly, uly_mesh)
    assert {k.calls for k in alone_ring} == {cfg.num_layers}  # every call is in the layer scan
    # ring: 4 steps of self-attention; ring of 2 under Ulysses: 2 steps (different local shapes)
    assert sum(k.name == "splash_ring_step" for k in alone_ring) == 4
    assert sum(k.name == "splash_ring_step" for k in alone_uly) == 2

    outer, inner = KernelLog(), KernelLog()

    def outer_forward(*args):
        jax.eval_shape(lambda *a: forward(*a, config=cfg, strategy=uly, mesh=uly_mesh, kernels=inner), *uly_args)
        jax.eval_shape(lambda *a: forward(*a, config=cfg, strategy=uly, mesh=uly_mesh), *uly_args)  # no log
        return forward(*args, config=cfg, strategy=ring, mesh=ring_mesh, kernels=outer)

    jax.eval_shape(outer_forward, *ring_args)
    assert outer.kernels == alone_ring
    assert inner.kernels == alone_uly


def test_kernel_log_views_multiply_calls_and_share_the_list():
    from aoizora.models.wan import KernelCost, KernelLog

    cost = KernelCost("k", "tpu_custom_call", "h", (1, 128, 1, 128), (1, 128, 1, 128), 128, 128, 1.0, 1.0, 1.0, 0)
    log = KernelLog()
    log.record(cost)
    log.repeated(3).repeated(5).record(cost)
    log.record(cost)
    assert [k.calls for k in log.kernels] == [1, 15, 1]
