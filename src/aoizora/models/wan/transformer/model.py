"""The Wan DiT forward pass (Wan 2.1, Wan 2.2): pure JAX over a params pytree (see params.py), one
strategy-aware code path for single-device and sharded execution."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding

from aoizora.errors import ShapeError
from aoizora.models.wan.transformer import attention as attn
from aoizora.models.wan.transformer.config import WanConfig, grid_of_latent
from aoizora.models.wan.transformer.rope import apply_rope, rope_tables
from aoizora.models.wan.transformer.strategy import (
    Strategy,
    check_mesh,
    logical_rules,
    logical_to_spec,
    padded_length,
    validate_strategy,
)

F32 = jnp.float32


# --------------------------------------------------------------------------------------------
# small layers
# --------------------------------------------------------------------------------------------
def linear(x: jnp.ndarray, p: dict, dtype: Any | None = None) -> jnp.ndarray:
    """x @ w + b with float32 accumulation, result in `dtype` (default: the weight's dtype)."""
    w = p["w"]
    dtype = dtype or w.dtype
    if w.dtype == F32:
        y = jnp.dot(x.astype(F32), w) + p["b"]
    else:
        # Low-precision weights: a plain bf16 dot (the MXU accumulates in float32 internally).
        # Asking XLA for a float32 result and rounding afterwards is numerically a hair closer
        # to PyTorch but makes the TPU compiler ~3x slower on the 14B shapes.
        y = jnp.dot(x.astype(w.dtype), w) + p["b"].astype(w.dtype)
    return y.astype(dtype)


def layer_norm(x: jnp.ndarray, eps: float, scale: jnp.ndarray | None = None,
               bias: jnp.ndarray | None = None) -> jnp.ndarray:
    """LayerNorm computed in float32 (returns float32)."""
    x = x.astype(F32)
    mu = jnp.mean(x, axis=-1, keepdims=True)
    var = jnp.mean(jnp.square(x - mu), axis=-1, keepdims=True)
    y = (x - mu) * jax.lax.rsqrt(var + eps)
    if scale is not None:
        y = y * scale.astype(F32)
    if bias is not None:
        y = y + bias.astype(F32)
    return y


def rms_norm(x: jnp.ndarray, scale: jnp.ndarray, eps: float) -> jnp.ndarray:
    """RMSNorm over the last (full model) dimension, float32 inside, result in x's dtype."""
    xf = x.astype(F32)
    y = xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=-1, keepdims=True) + eps)
    return (y * scale.astype(F32)).astype(x.dtype)


def gelu_tanh(x: jnp.ndarray) -> jnp.ndarray:
    return jax.nn.gelu(x, approximate=True)


def timestep_embedding(t: jnp.ndarray, dim: int, max_period: float = 10000.0) -> jnp.ndarray:
    """Sinusoidal embedding [cos | sin] of (fractional) timesteps, float32 (*t.shape, dim)."""
    half = dim // 2
    freqs = jnp.exp(-math.log(max_period) * jnp.arange(half, dtype=F32) / half)
    arg = t.astype(F32)[..., None] * freqs
    return jnp.concatenate([jnp.cos(arg), jnp.sin(arg)], axis=-1)


def modulation(table: jnp.ndarray, proj: jnp.ndarray) -> list[jnp.ndarray]:
    """Shift/scale/gate rows of a scale-shift `table` (n, dim) plus the timestep projection, in
    float32, each broadcastable against activations (B, L, dim): `proj` is (B, n, dim) for one
    timestep per sample, or (B, L, n, dim) for one per token (Wan 2.2 TI2V)."""
    if proj.ndim == 3:
        mod = table[None].astype(F32) + proj.astype(F32)
        return [mod[:, i][:, None, :] for i in range(table.shape[0])]
    mod = table[None, None].astype(F32) + proj.astype(F32)
    return [mod[:, :, i] for i in range(table.shape[0])]


# --------------------------------------------------------------------------------------------
# sharding context
# --------------------------------------------------------------------------------------------
class ShardingContext:
    """Applies logical-axis sharding constraints when a mesh is present; no-op otherwise."""

    def __init__(self, strategy: Strategy | None, mesh: Mesh | None) -> None:
        self.strategy = strategy
        self.mesh = mesh
        self.rules = logical_rules(strategy) if strategy is not None else None

    def __call__(self, x: jnp.ndarray, axes: Sequence[str | None]) -> jnp.ndarray:
        if self.mesh is None or self.rules is None:  # both set, or neither
            return x
        return jax.lax.with_sharding_constraint(x, NamedSharding(self.mesh, logical_to_spec(axes, self.rules)))

    def gather_weights(self, tree: dict, axes_tree: dict) -> dict:
        """Constrain one layer's weights to their compute layout: `embed` unsharded (all-gathered
        over fsdp×context when stored sharded), heads/mlp still on tensor."""
        mesh = self.mesh
        if mesh is None or self.rules is None:  # both set, or neither
            return tree
        rules = dict(self.rules, embed=None)

        def one(w, axes):
            return jax.lax.with_sharding_constraint(w, NamedSharding(mesh, logical_to_spec(axes, rules)))

        return jax.tree.map(one, tree, axes_tree, is_leaf=lambda a: isinstance(a, jnp.ndarray) or hasattr(a, "shape"))


# --------------------------------------------------------------------------------------------
# blocks
# --------------------------------------------------------------------------------------------
def _heads(x: jnp.ndarray, n: int) -> jnp.ndarray:
    return x.reshape(*x.shape[:-1], n, x.shape[-1] // n)


def _block(config: WanConfig, setup: attn.AttentionSetup, sc: ShardingContext, valid_len: int,
           x, p, tproj, ctx_text, ctx_img, cos, sin):
    dt = config.dtype
    h_ = config.num_attention_heads
    eps = config.eps
    qkv_axes = ("batch", "length", "heads_act", "head_dim")
    shift, scale, gate, c_shift, c_scale, c_gate = modulation(p["sst"], tproj)

    # 1. self-attention
    h = (layer_norm(x, eps) * (1 + scale) + shift).astype(dt)
    a = p["attn1"]
    q = _heads(rms_norm(linear(h, a["q"]), a["norm_q"], eps), h_)
    k = _heads(rms_norm(linear(h, a["k"]), a["norm_k"], eps), h_)
    v = _heads(linear(h, a["v"]), h_)
    q, k = apply_rope(q, cos, sin, config.rope_partner), apply_rope(k, cos, sin, config.rope_partner)
    q, k, v = sc(q, qkv_axes), sc(k, qkv_axes), sc(v, qkv_axes)
    o = attn.self_attention(setup, q, k, v, valid_len)
    o = linear(o.reshape(*o.shape[:2], -1), a["o"])
    x = sc((x.astype(F32) + o.astype(F32) * gate).astype(dt), ("batch", "length", "embed_act"))

    # 2. cross-attention
    if config.cross_attn_norm:
        h = layer_norm(x, eps, p["norm2"]["scale"], p["norm2"]["bias"]).astype(dt)
    else:
        h = x
    a = p["attn2"]
    ctx_axes = ("batch", "kv_length", "heads_act", "head_dim")
    q = sc(_heads(rms_norm(linear(h, a["q"]), a["norm_q"], eps), h_), qkv_axes)
    k = sc(_heads(rms_norm(linear(ctx_text, a["k"]), a["norm_k"], eps), h_), ctx_axes)
    v = sc(_heads(linear(ctx_text, a["v"]), h_), ctx_axes)
    o = attn.cross_attention(setup, q, k, v)
    if ctx_img is not None:
        ki = sc(_heads(rms_norm(linear(ctx_img, a["add_k"]), a["norm_added_k"], eps), h_), ctx_axes)
        vi = sc(_heads(linear(ctx_img, a["add_v"]), h_), ctx_axes)
        o = o + attn.cross_attention(setup, q, ki, vi)
    o = linear(o.reshape(*o.shape[:2], -1), a["o"])
    x = sc(x + o, ("batch", "length", "embed_act"))

    # 3. feed-forward
    h = (layer_norm(x, eps) * (1 + c_scale) + c_shift).astype(dt)
    f = sc(gelu_tanh(linear(h, p["ff1"])), ("batch", "length", "mlp_act"))
    f = linear(f, p["ff2"])
    x = sc((x.astype(F32) + f.astype(F32) * c_gate).astype(dt), ("batch", "length", "embed_act"))
    return x


# --------------------------------------------------------------------------------------------
# forward
# --------------------------------------------------------------------------------------------
def resolve_kernel(strategy: Strategy | None, mesh: Mesh | None) -> str:
    """'splash' on TPU devices (unless the strategy forces 'xla'), else 'xla'."""
    want = strategy.kernel if strategy is not None else "auto"
    on_tpu = mesh is not None and mesh.devices.flat[0].platform == "tpu"
    if want == "auto":
        return "splash" if on_tpu else "xla"
    if want == "splash-interpret":
        return want
    if want == "splash" and not on_tpu:
        from aoizora.errors import StrategyError

        raise StrategyError("the splash attention kernel needs TPU devices (compile-only ones will do)")
    return want


def forward(
    params: dict,
    latents: jnp.ndarray,
    timestep: jnp.ndarray,
    text: jnp.ndarray,
    image: jnp.ndarray | None = None,
    *,
    config: WanConfig,
    strategy: Strategy | None = None,
    mesh: Mesh | None = None,
    kernels: attn.KernelLog | None = None,
) -> jnp.ndarray:
    """The transformer: latents (B, C_in, T, H, W), timestep (B,) — or (B, tokens) for one
    timestep per token, as diffusers' Wan 2.2 TI2V pipeline passes it (tokens in (t, h, w)
    order after patchify) — text (B, 512, text_dim), image (B, 257, image_dim) for Wan 2.1 I2V
    → flow prediction (B, C_out, T, H, W) in config.dtype.

    With `strategy` and `mesh`, activations carry logical sharding constraints and attention
    runs the strategy's variant under shard_map; otherwise it is plain single-device code.
    With `kernels`, every opaque kernel call (Pallas splash) this trace emits is recorded there,
    per device, with how many times one forward runs it (layers × uses).

    Long on purpose: it follows diffusers' `WanTransformer3DModel.forward` step by step (checks,
    patchify, time/text/image conditions, the scanned blocks, the output head) so that a parity
    review reads the two side by side; one block is `_block`.

    Over 60 lines because it follows diffusers' `WanTransformer3DModel.forward` step by step (patch
    embedding, condition embedders, the scanned blocks, the output head), so that it and the parity
    tests' reference read side by side.
    """
    if (strategy is None) != (mesh is None):
        raise ValueError("pass both strategy and mesh, or neither")
    if strategy is not None and mesh is not None:  # both set, or neither
        check_mesh(strategy, mesh)
    dt = config.dtype
    b = latents.shape[0]
    grid = grid_of_latent(config, latents.shape)
    if config.is_i2v and image is None:
        raise ShapeError("an I2V model needs image embeddings (batch, 257, image_dim)")
    if not config.is_i2v and image is not None:
        raise ShapeError("a T2V model takes no image embeddings")
    if text.ndim != 3 or text.shape[0] != b or text.shape[2] != config.text_dim:
        raise ShapeError(f"text embeddings must be ({b}, len, {config.text_dim}), got {text.shape}")
    n_tok = math.prod(grid)
    if timestep.shape not in ((b,), (b, n_tok)):
        raise ShapeError(f"timestep must have shape ({b},) or ({b}, {n_tok}) (one per token), got {timestep.shape}")
    kernel = resolve_kernel(strategy, mesh)
    if strategy is not None:
        validate_strategy(strategy, config, batch=b)
    setup = attn.AttentionSetup(strategy, mesh, kernel, kernels, exchange=config.ulysses_exchange,
                                estimate=config.splash_cost_estimate)
    sc = ShardingContext(strategy, mesh)
    from aoizora.models.wan.transformer.params import param_logical_axes

    all_axes = param_logical_axes(config)
    # non-block weights are small: gather them once, up front (compute layout)
    top = {k: v for k, v in params.items() if k != "blocks"}
    params = dict(sc.gather_weights(top, {k: all_axes[k] for k in top}), blocks=params["blocks"])

    # patchify (B, C, T, H, W) -> (B, L, C·pt·ph·pw), channel-major like the Conv3d weight
    pt, ph, pw = config.patch_size
    t, hh, ww = grid
    x = latents.reshape(b, config.in_channels, t, pt, hh, ph, ww, pw)
    x = x.transpose(0, 2, 4, 6, 1, 3, 5, 7).reshape(b, t * hh * ww, -1)
    x = linear(x, params["patch_embed"], dt)
    lp = padded_length(n_tok, strategy, splash=kernel.startswith("splash"))
    if lp > n_tok:
        x = jnp.pad(x, ((0, 0), (0, lp - n_tok), (0, 0)))
    x = sc(x, ("batch", "length", "embed_act"))
    cos, sin = rope_tables(config, grid, lp)
    cos, sin = sc(cos, ("length", None)), sc(sin, ("length", None))

    # conditions
    if timestep.ndim == 2:  # one timestep per token: padded and sharded like the tokens
        timestep = sc(jnp.pad(timestep.astype(F32), ((0, 0), (0, lp - n_tok))), ("batch", "length"))
    temb = timestep_embedding(timestep, config.freq_dim)
    temb = linear(jax.nn.silu(linear(temb, params["time_1"], F32)), params["time_2"], F32).astype(dt)
    tproj = linear(jax.nn.silu(temb), params["time_proj"], dt)
    tproj = tproj.reshape(*tproj.shape[:-1], 6, config.dim)  # (B, 6, dim) or (B, L, 6, dim)
    if timestep.ndim == 2:
        temb = sc(temb, ("batch", "length", "embed_act"))
        tproj = sc(tproj, ("batch", "length", None, "embed_act"))
    ctx = linear(gelu_tanh(linear(text.astype(dt), params["text_1"], dt)), params["text_2"], dt)
    ctx_img = None
    if image is not None:
        i = layer_norm(image, 1e-5, params["img_norm1"]["scale"], params["img_norm1"]["bias"])
        i = linear(jax.nn.gelu(linear(i.astype(dt), params["img_ff1"], dt), approximate=False), params["img_ff2"], dt)
        ctx_img = layer_norm(i, 1e-5, params["img_norm2"]["scale"], params["img_norm2"]["bias"]).astype(dt)
        ctx_img = sc(ctx_img, ("batch", "kv_length", "embed_act"))
    ctx = sc(ctx, ("batch", "kv_length", "embed_act"))

    block_axes = all_axes["blocks"]
    layer_axes = jax.tree.map(lambda a: a[1:], block_axes, is_leaf=lambda a: isinstance(a, tuple))

    layer_setup = setup.repeated(config.num_layers)  # the scan body is traced once for every layer

    def body(xc, p):
        p = sc.gather_weights(p, layer_axes)
        return _block(config, layer_setup, sc, n_tok, xc, p, tproj, ctx, ctx_img, cos, sin), None

    x, _ = jax.lax.scan(body, x, params["blocks"])

    # output head: the table plus temb itself (not projected), for both of its rows
    shift, scale = modulation(params["out_sst"], jnp.expand_dims(temb, -2))
    x = (layer_norm(x, config.eps) * (1 + scale) + shift).astype(dt)
    x = linear(x, params["proj_out"], dt)[:, :n_tok]
    x = x.reshape(b, t, hh, ww, pt, ph, pw, config.out_channels)
    x = x.transpose(0, 7, 1, 4, 2, 5, 3, 6).reshape(b, config.out_channels, t * pt, hh * ph, ww * pw)
    return x
