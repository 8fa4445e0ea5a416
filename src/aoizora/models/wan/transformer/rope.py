"""3D rotary position embedding of Wan 2.1 (frames / rows / columns split of the head dim).

The head dim (128) is split 44/42/42 into t/h/w parts (h = w = 2·(d // 6), t = the rest). Each
part rotates consecutive channel pairs (2j, 2j+1) by `pos · theta^(-2j/d_part)`. The per-axis
tables are computed in float64 on the host (as the reference does) and are tiny; the full
(tokens, width) tables are assembled in the graph by broadcasting, so no large constant ends up
in the compiled program.

Two ways to find each channel's pair partner, the same rotation (`WanConfig.rope_partner`):

* ``"matmul"`` (the model's own): the partner of every channel, sign included, is one matmul of
  the head dim with a fixed signed permutation, so the head dim (128 channels) stays the minor
  dimension of every array. The MXU does the swap; the products and sums are those of the
  pair form, so the results agree to rounding.
* ``"reshape"``: the head dim viewed as (64, 2) pairs, as diffusers' `WanAttnProcessor` and
  MaxDiffusion's `FlaxWanAttention._apply_rope` write it. A minor dimension of 2 does not fit the
  TPU's 128-lane vector layout: libtpu relayouts the pairs around the rotation, and its cost
  estimates for these fusions run several times those of the matmul form
  (`experiments/rope_forms.py`). Kept to compile the programs others measured as they ran them.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from aoizora.errors import ShapeError
from aoizora.models.wan.transformer.config import WanConfig, check_rope_partner


def axis_dims(head_dim: int) -> tuple[int, int, int]:
    """Channel counts (t, h, w) of the three RoPE parts."""
    h = w = 2 * (head_dim // 6)
    return head_dim - h - w, h, w


def _axis_angles(n: int, d: int, theta: float) -> np.ndarray:
    inv = 1.0 / theta ** (np.arange(0, d, 2, dtype=np.float64) / d)
    return np.outer(np.arange(n, dtype=np.float64), inv)  # (n, d/2)


def rope_tables(config: WanConfig, grid: tuple[int, int, int], padded_len: int) -> tuple[jnp.ndarray, jnp.ndarray]:
    """(cos, sin), each float32 of shape (padded_len, width), rows in token order t, h, w: one
    column per channel pair (width head_dim // 2) for the ``"reshape"`` form, one per channel (each
    pair's angle twice, width head_dim) for the ``"matmul"`` form (`config.rope_partner`).

    Rows past the real token count (padding) hold angle 0 (cos 1, sin 0).
    """
    t, h, w = grid
    dt_, dh, dw = axis_dims(config.attention_head_dim)
    if max(grid) > config.rope_max_seq_len:
        raise ShapeError(f"token grid {grid} exceeds rope_max_seq_len={config.rope_max_seq_len}")
    parts = []
    for n, d, shape in ((t, dt_, (t, 1, 1)), (h, dh, (1, h, 1)), (w, dw, (1, 1, w))):
        ang = _axis_angles(n, d, config.rope_theta)
        if config.rope_partner == "matmul":
            ang = np.repeat(ang, 2, axis=-1)
        parts.append((np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32), shape))
    cos = jnp.concatenate(
        [jnp.broadcast_to(jnp.asarray(c).reshape(*s, -1), (t, h, w, c.shape[-1])) for c, _, s in parts], axis=-1
    ).reshape(t * h * w, -1)
    sin = jnp.concatenate(
        [jnp.broadcast_to(jnp.asarray(sn).reshape(*s, -1), (t, h, w, sn.shape[-1])) for _, sn, s in parts], axis=-1
    ).reshape(t * h * w, -1)
    pad = padded_len - t * h * w
    if pad:
        cos = jnp.pad(cos, ((0, pad), (0, 0)), constant_values=1.0)
        sin = jnp.pad(sin, ((0, pad), (0, 0)))
    return cos, sin


def apply_rope(x: jnp.ndarray, cos: jnp.ndarray, sin: jnp.ndarray, partner: str = "matmul") -> jnp.ndarray:
    """Rotate x of shape (batch, length, heads, head_dim) by the tables `rope_tables` makes for
    the same `partner` (one of `ROPE_PARTNERS`).

    Computed in float32 and cast back to x's dtype, as the reference does.
    """
    check_rope_partner(partner)
    return _rotate_by_partner_matmul(x, cos, sin) if partner == "matmul" else _rotate_pairs(x, cos, sin)


def _partner_matrix(head_dim: int) -> np.ndarray:
    """(head_dim, head_dim) signed permutation P with (x @ P)[2j] = -x[2j+1], (x @ P)[2j+1] = x[2j]."""
    m = np.zeros((head_dim, head_dim), np.float32)
    even = np.arange(0, head_dim, 2)
    m[even + 1, even] = -1.0
    m[even, even + 1] = 1.0
    return m


def _rotate_by_partner_matmul(x: jnp.ndarray, cos: jnp.ndarray, sin: jnp.ndarray) -> jnp.ndarray:
    # one nonzero (+-1) per column: with bf16 activations (the deployed dtype) each partner is
    # exact in the float32 accumulator; float32 ones get the matmul precision of every other dot
    partner = jnp.einsum("blhd,de->blhe", x, jnp.asarray(_partner_matrix(x.shape[-1]), x.dtype),
                         preferred_element_type=jnp.float32)
    return (x.astype(jnp.float32) * cos[None, :, None, :] + partner * sin[None, :, None, :]).astype(x.dtype)


def _rotate_pairs(x: jnp.ndarray, cos: jnp.ndarray, sin: jnp.ndarray) -> jnp.ndarray:
    xf = x.astype(jnp.float32).reshape(*x.shape[:-1], -1, 2)
    x1, x2 = xf[..., 0], xf[..., 1]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    out = jnp.stack([x1 * c - x2 * s, x1 * s + x2 * c], axis=-1)
    return out.reshape(x.shape).astype(x.dtype)
