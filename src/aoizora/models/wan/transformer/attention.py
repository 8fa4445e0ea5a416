"""Attention: a blockwise XLA kernel, the Pallas splash kernel, and the sequence-parallel
self-attention variants under `shard_map`.

All arrays are laid out (batch, length, heads, head_dim). Inside `shard_map` each device holds
its batch shard (``data``×``fsdp``), sequence shard (``context``, or ``context_ring`` ×
``context_ulysses``) and head shard (``tensor``).

Variants (self-attention only; cross-attention's K/V come from the replicated text context):

* ``allgather`` – K/V are all-gathered over ``context``; each device attends its Q shard to
  the whole sequence.
* ``ulysses``   – an all-to-all over ``context`` turns sequence shards into head shards (Q, K, V),
  full-sequence attention on heads/(tensor·context) heads, and an all-to-all back.
* ``ring``      – K/V shards rotate around ``context`` by `ppermute`; each step's partial result
  is merged with an online softmax (running max / log-sum-exp). With the splash kernel, K/V rotate
  in the model's layout or in the kernel's (`Strategy.ring_layout`, also for ``ulysses_ring``).
* ``ulysses_ring`` – 2D context: an all-to-all over ``context_ulysses`` (U) gives each device
  heads/(tensor·U) heads of its ring group's contiguous span of the sequence (length L/R), then a
  ring of R steps over ``context_ring`` attends that span to every span, then an all-to-all back.

Ulysses chunking (``ulysses`` and ``ulysses_ring``, as MaxDiffusion's ``ulysses_attention_chunks``)
runs the all-to-alls and attention once per group of a device's heads, so the scheduler can overlap
one group's all-to-all with another's attention.

Padding: the sequence is padded to a multiple of the shard count; padded keys are masked
everywhere (padded queries are computed and dropped by the caller). With fixed splash block sizes
each splash call also pads its queries to a multiple of block_q and its keys to a multiple of
block_kv (masked), as MaxDiffusion's splash wrapper does.

Opaque kernels (Pallas splash calls) are recorded at trace time with their FLOPs and bytes, into
the `KernelLog` the caller passes (`AttentionSetup.kernels`), so the HLO analyzer can cost them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import TypedDict

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.errors import ShapeError
from aoizora.models.wan.transformer.kernel_estimate import with_cost_estimate
from aoizora.models.wan.transformer.strategy import Strategy

MASK_VALUE = -1e30


# --------------------------------------------------------------------------------------------
# Opaque-kernel cost recording
# --------------------------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class KernelCost:
    """One opaque kernel the model emits, per device, per call.

    `calls` is how many times one transformer forward executes it per device (layers × uses);
    `flops`/`bytes_accessed`/`transcendentals` are per call, so totals are ×calls.

    Model (forward kernel, full mask, B batch, H heads, Lq/Lk lengths, D head dim, bq Q block):
    flops = 4·B·H·Lq·Lk·D (QKᵀ and PV, 2 flops per MAC; masked blocks are still computed for
    the padded tail), transcendentals = B·H·Lq·Lk (exp), bytes = read Q + write O
    (2·B·H·Lq·D·itemsize) + K and V streamed once per Q block (2·B·H·Lk·D·itemsize·Lq/bq)
    + segment ids + the float32 log-sum-exp residual (B·H·Lq·128·4) when saved (ring).
    """

    name: str  # aoizora's name for the use (also a jax.named_scope around the call)
    custom_call_target: str
    hlo_name: str  # compiled HLO names the custom call "%<hlo_name>.<n>" (the Pallas kernel name)
    q_shape: tuple[int, ...]
    kv_shape: tuple[int, ...]
    block_q: int
    block_kv: int
    flops: float
    transcendentals: float
    bytes_accessed: float
    calls: int
    block_kv_compute: int | None = None  # None: block_kv (one compute sub-block per grid step)
    kv_stream_bytes: float = 0.0  # of `bytes_accessed`, the K and V re-read per Q block (`splash_kv_stream_bytes`)

    @property
    def compute_blocks_per_step(self) -> int:
        """The K/V compute sub-blocks each grid step runs."""
        return max(1, self.block_kv // (self.block_kv_compute or self.block_kv))

    @property
    def grid_steps(self) -> int:
        """Iterations of the call's Pallas grid: one per (batch, head, Q block, K/V block)."""
        batch, lq, heads, _ = self.q_shape
        return splash_grid_steps(batch * heads, lq, self.kv_shape[1], self.block_q, self.block_kv)

    @property
    def total_flops(self) -> float:
        return self.flops * self.calls

    @property
    def total_bytes(self) -> float:
        return self.bytes_accessed * self.calls


class KernelLog:
    """The opaque kernels one trace of the model emits, for the caller that passes it in.

    The caller owns the log (`forward(..., kernels=log)`); attention appends each Pallas call it
    traces, so two traces in one process — nested, in turn or in parallel — never see each
    other's kernels. A view from `repeated` shares the list and multiplies the calls of what is
    traced through it: one trace of a scan body stands for every iteration.
    """

    def __init__(self, kernels: list[KernelCost] | None = None, times: int = 1) -> None:
        self.kernels: list[KernelCost] = [] if kernels is None else kernels
        self.times = times

    def repeated(self, times: int) -> KernelLog:
        """A view for kernels traced once and run `times` times (a scan body over layers)."""
        return KernelLog(self.kernels, self.times * times)

    def record(self, cost: KernelCost) -> None:
        """Append one traced kernel, its `calls` the runs one trace through this view stands for."""
        self.kernels.append(dataclasses.replace(cost, calls=self.times))


def splash_cost(batch_heads: int, lq: int, lk: int, d: int, itemsize: int, residuals: bool,
                block_q: int | None = None) -> tuple[float, float]:
    """FLOPs and HBM bytes of one splash call over `batch_heads` (batch x heads) attention maps:
    q read and the output written once, K/V streamed once per Q block (`block_q`, by default the
    block `splash_attention` picks for `lq`), segment ids, log-sum-exp residuals when saved."""
    flops = 4.0 * batch_heads * lq * lk * d
    q_bytes = batch_heads * lq * d * itemsize
    kv_bytes = splash_kv_stream_bytes(batch_heads, lq, lk, d, itemsize, block_q)
    res_bytes = batch_heads * lq * 128 * 4 if residuals else 0
    seg_bytes = (lq + lk) * 4
    return flops, float(2 * q_bytes + kv_bytes + res_bytes + seg_bytes)


def splash_kv_stream_bytes(batch_heads: int, lq: int, lk: int, d: int, itemsize: int,
                           block_q: int | None = None) -> float:
    """The K and V bytes a splash call streams: each Q block (`block_q`) re-reads its map's K and V."""
    return float(2 * batch_heads * lk * d * itemsize * (lq // (block_q or _default_block_q(lq))))


def splash_grid_steps(batch_heads: int, lq: int, lk: int, block_q: int | None = None,
                      block_kv: int | None = None) -> int:
    """Grid iterations of one splash call: one per (batch, head, Q block, K/V block), the blocks
    `splash_attention` uses for these lengths unless given."""
    bq = block_q or _default_block_q(lq)
    bkv = block_kv or _default_block_kv(lk)
    return batch_heads * -(-lq // bq) * -(-lk // bkv)


def _record(kernels: KernelLog | None, name: str, batch: int, heads: int, lq: int, lk: int, d: int,
            itemsize: int, bq: int, bkv: int, residuals: bool, bkv_compute: int | None = None) -> None:
    if kernels is None:
        return
    flops, hbm_bytes = splash_cost(batch * heads, lq, lk, d, itemsize, residuals, bq)
    kernels.record(KernelCost(
        name=name, custom_call_target="tpu_custom_call",
        hlo_name=f"splash_mha_fwd_segmented_{'residuals' if residuals else 'no_residuals'}",
        q_shape=(batch, lq, heads, d),
        kv_shape=(batch, lk, heads, d), block_q=bq, block_kv=bkv, flops=flops,
        transcendentals=1.0 * batch * heads * lq * lk, bytes_accessed=hbm_bytes, calls=0, block_kv_compute=bkv_compute,
        kv_stream_bytes=splash_kv_stream_bytes(batch * heads, lq, lk, d, itemsize, bq)))


# --------------------------------------------------------------------------------------------
# Local kernels
# --------------------------------------------------------------------------------------------
def _block_stats(q: jnp.ndarray, k: jnp.ndarray, v: jnp.ndarray, kv_mask: jnp.ndarray | None):
    """Unnormalised output, running max and sum of one K/V block (all float32).

    q (B,Lq,H,D) pre-scaled, k/v (B,Lk,H,D), kv_mask (Lk,) bool or None.
    """
    s = jnp.einsum("bqhd,bkhd->bhqk", q.astype(jnp.float32), k.astype(jnp.float32))
    if kv_mask is not None:
        s = jnp.where(kv_mask[None, None, None, :], s, MASK_VALUE)
    m = jnp.max(s, axis=-1)
    p = jnp.exp(s - m[..., None])
    if kv_mask is not None:
        p = jnp.where(kv_mask[None, None, None, :], p, 0.0)
    l = jnp.sum(p, axis=-1)
    o = jnp.einsum("bhqk,bkhd->bqhd", p, v.astype(jnp.float32))
    return o, m, l  # o (B,Lq,H,D); m,l (B,H,Lq)


def _merge(a, b):
    oa, ma, la = a
    ob, mb, lb = b
    m = jnp.maximum(ma, mb)
    ea, eb = jnp.exp(ma - m), jnp.exp(mb - m)
    o = oa * jnp.swapaxes(ea, 1, 2)[..., None] + ob * jnp.swapaxes(eb, 1, 2)[..., None]
    return o, m, la * ea + lb * eb


def _finish(stats, dtype) -> jnp.ndarray:
    o, _, l = stats
    l = jnp.swapaxes(l, 1, 2)[..., None]
    return (o / jnp.where(l == 0, 1.0, l)).astype(dtype)


def xla_attention_stats(q, k, v, kv_mask=None, block_kv: int = 1024):
    """Blockwise (flash-style) attention statistics over K/V blocks of `block_kv`."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    qs = q.astype(jnp.float32) * scale
    lk = k.shape[1]
    if lk <= block_kv or lk % block_kv:
        return _block_stats(qs, k, v, kv_mask)
    n = lk // block_kv
    kb = k.reshape(k.shape[0], n, block_kv, *k.shape[2:]).swapaxes(0, 1)
    vb = v.reshape(v.shape[0], n, block_kv, *v.shape[2:]).swapaxes(0, 1)
    mb = None if kv_mask is None else kv_mask.reshape(n, block_kv)
    b, lq, h, d = q.shape
    init = (jnp.zeros((b, lq, h, d), jnp.float32), jnp.full((b, h, lq), MASK_VALUE, jnp.float32),
            jnp.zeros((b, h, lq), jnp.float32))

    def body(carry, xs):
        if mb is None:
            kk, vv = xs
            mask = None
        else:
            kk, vv, mask = xs
        return _merge(carry, _block_stats(qs, kk, vv, mask)), None

    xs = (kb, vb) if mb is None else (kb, vb, mb)
    out, _ = jax.lax.scan(body, init, xs)
    return out


def xla_attention(q, k, v, kv_mask=None) -> jnp.ndarray:
    """Softmax attention in float32 (blockwise over K/V), output in q's dtype."""
    return _finish(xla_attention_stats(q, k, v, kv_mask), q.dtype)


def _pick_block(n: int, candidates: tuple[int, ...]) -> int:
    for c in candidates:
        if n % c == 0:
            return c
    return n


def _default_block_q(lq: int) -> int:
    return _pick_block(lq, (512, 256, 128))


def _default_block_kv(lk: int) -> int:
    return _pick_block(lk, (1024, 512, 256, 128))


@functools.cache
def _all_visible_mask_type():
    """Splash's `FullMask` (every query sees every key; padded keys are masked by segment ids),
    made cheap to read.

    Pallas turns the mask into block-sparse tables in NumPy at trace time: for every (q block,
    kv block) tile of every head it asks whether the tile has any and all entries set. `FullMask`
    allocates and scans each tile, ~0.9 s per mask at 75k tokens, a fifth of Stage 1
    (docs/notebook/planning-time.md). Here a tile is a read-only all-true view that answers `any`/`all`
    without scanning. The tables, and so the lowered program, are the same. One class: Pallas
    caches the tables by mask type and shape.
    """
    import numpy as np
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    class AllTrue(np.ndarray):
        """A constant all-true array (a broadcast view) whose full reductions need no scan."""

        def any(self, axis=None, *args, **kwargs):
            if axis is None and not args and not kwargs:
                return np.True_ if self.size else np.False_
            return np.asarray(self).any(axis, *args, **kwargs)

        def all(self, axis=None, *args, **kwargs):
            if axis is None and not args and not kwargs:
                return np.True_
            return np.asarray(self).all(axis, *args, **kwargs)

    @functools.lru_cache(maxsize=16)
    def tile(rows: int, cols: int) -> np.ndarray:
        return np.broadcast_to(np.True_, (rows, cols)).view(AllTrue)  # broadcast views are read-only

    class AllVisibleMask(sm.FullMask):
        def __getitem__(self, idx):
            if len(idx) == 2:
                i, j = idx
                if type(i) is slice and type(j) is slice and i.step in (None, 1) and j.step in (None, 1):
                    i0, i1, _ = i.indices(self.shape[0])
                    j0, j1, _ = j.indices(self.shape[1])
                    return tile(max(i1 - i0, 0), max(j1 - j0, 0))
            return super().__getitem__(idx)

    return AllVisibleMask


def splash_mask(lq: int, lk: int, heads: int):
    """The mask `splash_attention` gives Pallas for `heads` heads of `lq` queries and `lk` keys:
    every query sees every key (padded keys are masked by segment ids), as splash's `FullMask`
    with the same block tables, read without scanning its tiles."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    return sm.MultiHeadMask([_all_visible_mask_type()((lq, lk))] * heads)


def _pad_to(x: jnp.ndarray, length: int, axis: int = 1) -> jnp.ndarray:
    if x.shape[axis] == length:
        return x
    pad = [(0, 0)] * x.ndim
    pad[axis] = (0, length - x.shape[axis])
    return jnp.pad(x, pad)


def splash_attention(q, k, v, kv_valid: jnp.ndarray | None, *, residuals: bool = False, name: str = "splash",
                     interpret: bool = False, block_q: int | None = None, block_kv: int | None = None,
                     block_kv_compute: int | None = None, kernels: KernelLog | None = None,
                     estimate: bool = False):
    """Pallas splash attention on local shards (TPU only).

    q (B,Lq,H,D), k/v (B,Lk,H,D); kv_valid (Lk,) bool masks keys (via segment ids); Lq and Lk must
    be multiples of 128 (the caller pads K/V of cross-attention). Returns the output in q's dtype,
    and with `residuals` also the log-sum-exp (B,H,Lq) for ring merging.

    Block sizes: by default the largest of 512/256/128 dividing Lq and of 1024/…/128 dividing Lk.
    Given ones tile padded lengths: queries padded to a multiple of `block_q` (the padded rows are
    computed and dropped), keys to a multiple of `block_kv` (masked). The call is recorded in
    `kernels` when given, and with `estimate` carries its cost for the compiler (`kernel_estimate`).
    """
    b, lq0, h, d = q.shape
    lk0 = k.shape[1]
    tiles = SplashTiles.of(lq0, lk0, block_q, block_kv, block_kv_compute)
    if tiles.lk != lk0:
        kv_valid = tiles.padded_valid(kv_valid, lk0)
        k, v = _pad_to(k, tiles.lk), _pad_to(v, tiles.lk)
    q = _pad_to(q, tiles.lq)
    kernel = tiles.kernel(h, residuals, interpret)
    _record(kernels, name, b, h, tiles.lq, tiles.lk, d, jnp.dtype(q.dtype).itemsize, tiles.block_q, tiles.block_kv,
            residuals, tiles.block_kv_compute)
    qt = scaled_heads_major(q)
    kt, vt = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)
    cost = tiles.estimate(h, d, jnp.dtype(q.dtype).itemsize, residuals) if estimate else None
    if residuals:
        out, (lse,) = run_splash(kernel, qt, kt, vt, tiles.segments(kv_valid), name, cost)
        return out.transpose(0, 2, 1, 3)[:, :lq0], lse[..., :lq0]
    return run_splash(kernel, qt, kt, vt, tiles.segments(kv_valid), name, cost).transpose(0, 2, 1, 3)[:, :lq0]


@dataclasses.dataclass(frozen=True)
class SplashTiles:
    """The blocks of one splash call and the lengths they pad its queries (`lq`) and keys (`lk`) to."""

    block_q: int
    block_kv: int
    block_kv_compute: int
    lq: int
    lk: int

    @classmethod
    def of(cls, lq0: int, lk0: int, block_q: int | None = None, block_kv: int | None = None,
           block_kv_compute: int | None = None) -> SplashTiles:
        """The given blocks (by default the kernel's pick for the lengths) for `lq0` queries and `lk0` keys."""
        bq = block_q or _default_block_q(lq0)
        bkv = block_kv or _default_block_kv(lk0)
        return cls(bq, bkv, block_kv_compute or bkv, -(-lq0 // bq) * bq, -(-lk0 // bkv) * bkv)

    def padded_valid(self, kv_valid: jnp.ndarray | None, lk0: int) -> jnp.ndarray:
        """The key mask of `lk0` keys (None: all valid) padded to `lk`, the padding masked."""
        return _pad_to(jnp.ones((lk0,), bool) if kv_valid is None else kv_valid, self.lk, axis=0)

    def kernel(self, heads: int, residuals: bool, interpret: bool):
        """The splash kernel of these blocks over `heads` heads (every query sees every key)."""
        from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

        return sk.make_splash_mha(
            mask=splash_mask(self.lq, self.lk, heads), head_shards=1, q_seq_shards=1, save_residuals=residuals,
            interpret=interpret,
            block_sizes=sk.BlockSizes(block_q=self.block_q, block_kv=self.block_kv,
                                      block_kv_compute=self.block_kv_compute),
        )

    def estimate(self, heads: int, head_dim: int, itemsize: int, residuals: bool):
        """What one call over `heads` heads costs (one batch element), as the compiler's estimate:
        the FLOPs and HBM bytes of `splash_cost`, one exponential per score element."""
        from jax.experimental import pallas as pl

        flops, hbm = splash_cost(heads, self.lq, self.lk, head_dim, itemsize, residuals, self.block_q)
        return pl.CostEstimate(flops=int(flops), transcendentals=heads * self.lq * self.lk, bytes_accessed=int(hbm))

    def segments(self, kv_valid: jnp.ndarray | None):
        """The segment ids that mask the keys `kv_valid` leaves out (length `lk`; None: none)."""
        from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk

        kv_seg = (jnp.zeros((self.lk,), jnp.int32) if kv_valid is None
                  else jnp.where(kv_valid, 0, 1).astype(jnp.int32))
        return sk.SegmentIds(q=jnp.zeros((self.lq,), jnp.int32), kv=kv_seg)


def scaled_heads_major(q: jnp.ndarray) -> jnp.ndarray:
    """Queries (B,L,H,D) scaled by 1/sqrt(D) in (B,H,L,D), as the kernel takes them."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    return (q.astype(jnp.float32) * scale).astype(q.dtype).transpose(0, 2, 1, 3)


def run_splash(kernel, qt, kt, vt, segments, name: str, estimate=None):
    """The kernel over the batch of heads-major (B,H,L,D) operands: the output (B,H,Lq,D), and with
    residuals also (log-sum-exp (B,H,Lq),). `estimate`: the call's cost per batch element for the
    compiler's scheduler (None: the kernel's own, none for JAX's splash)."""
    def call(a, bb, c):
        return kernel(a, bb, c, segment_ids=segments)

    run = jax.vmap(call if estimate is None else with_cost_estimate(call, estimate))
    with jax.named_scope(name):
        return run(qt, kt, vt)


# --------------------------------------------------------------------------------------------
# Sharded variants
# --------------------------------------------------------------------------------------------
class SplashBlockSizes(TypedDict, total=False):
    """The block-size arguments of `splash_attention` a strategy sets (none: its defaults)."""

    block_q: int
    block_kv: int
    block_kv_compute: int


@dataclasses.dataclass(frozen=True)
class AttentionSetup:
    """What the model needs to run attention: strategy, mesh (None: single device), kernel, and
    where to record the opaque kernel calls (None: nowhere)."""

    strategy: Strategy | None
    mesh: Mesh | None
    kernel: str  # "xla" | "splash" | "splash-interpret" (Pallas interpreter, for CPU tests)
    kernels: KernelLog | None = dataclasses.field(default=None, compare=False)
    #: the form of Ulysses attention's head/sequence exchange (`config.ULYSSES_EXCHANGES`)
    exchange: str = "all_to_all"
    #: splash calls carry their cost for the compiler's scheduler (`config.WanConfig.splash_cost_estimate`)
    estimate: bool = False

    def repeated(self, times: int) -> AttentionSetup:
        """This setup for attention traced once and run `times` times (a scan body over layers)."""
        if self.kernels is None:
            return self
        return dataclasses.replace(self, kernels=self.kernels.repeated(times))

    @property
    def splash(self) -> bool:
        return self.kernel.startswith("splash")

    @property
    def interpret(self) -> bool:
        return self.kernel == "splash-interpret"

    def sharded(self) -> tuple[Strategy, Mesh]:
        """The strategy and mesh of a sharded setup (`wan_forward` passes both, or neither)."""
        assert self.strategy is not None and self.mesh is not None, "attention on one device has no strategy"
        return self.strategy, self.mesh

    def blocks(self, self_attention: bool) -> SplashBlockSizes:
        """The strategy's splash block sizes for a call (cross-attention keeps its own K block)."""
        b = self.strategy.splash_blocks if self.strategy is not None else None
        if b is None:
            return {}
        if not self_attention:
            return {"block_q": b.block_q}
        return {"block_q": b.block_q, "block_kv": b.block_kv, "block_kv_compute": b.block_kv_compute}

    @property
    def batch_axes(self):
        s, _ = self.sharded()
        axes = tuple(a for a, n in (("data", s.data), ("fsdp", s.fsdp)) if n > 1)
        return axes or None

    @property
    def sequence_axes(self):
        """The spec entry of the sequence dimension: its live context mesh axes (None if none)."""
        s, _ = self.sharded()
        live = tuple(a for a in s.context_axes if s.axis_sizes[a] > 1)
        return live[0] if len(live) == 1 else (live or None)

    def qkv_spec(self) -> P:
        s, _ = self.sharded()
        return P(self.batch_axes, self.sequence_axes, "tensor" if s.tensor > 1 else None, None)

    def ctx_spec(self) -> P:
        s, _ = self.sharded()
        return P(self.batch_axes, None, "tensor" if s.tensor > 1 else None, None)


def _local(setup: AttentionSetup, q, k, v, kv_valid, name: str, self_attention: bool = True):
    if setup.splash:
        return splash_attention(q, k, v, kv_valid, name=name, interpret=setup.interpret, estimate=setup.estimate,
                                kernels=setup.kernels, **setup.blocks(self_attention))
    return xla_attention(q, k, v, kv_valid)


def _ring_permutation(size: int) -> list[tuple[int, int]]:
    """The ring's rotation: each device of the axis sends its K/V to the next."""
    return [(i, (i + 1) % size) for i in range(size)]


def _span_keys(me, step: int, size: int, n: int, valid_len: int) -> jnp.ndarray:
    """Which of the `n` keys a device holds at ring step `step` are real (not padding): the block
    it holds then is sequence span (me - step) mod size."""
    src = (me - step) % size
    return (src * n + jnp.arange(n)) < valid_len


def _ring(setup: AttentionSetup, ql, kl, vl, axis: str, size: int, valid_len: int, need_mask: bool):
    """Attention of the local queries to the K/V of all `size` devices of `axis`, K/V rotating by
    `ppermute` and partial results merged by log-sum-exp. Device i of the axis holds the
    contiguous sequence span i (of the local length). The strategy's `ring_layout` is the form:
    K/V rotated in the model's (B,L,H,D) layout and laid out for the kernel at every step, or laid
    out once and rotated as the kernel takes them (`_ring_heads_major`)."""
    if setup.splash and setup.strategy is not None and setup.strategy.ring_layout == "heads_major":
        return _ring_heads_major(setup, ql, kl, vl, axis, size, valid_len, need_mask)
    n = ql.shape[1]
    me, perm = jax.lax.axis_index(axis), _ring_permutation(size)
    acc = None
    for step in range(size):
        valid = _span_keys(me, step, size, n, valid_len) if need_mask else None
        if setup.splash:
            o, lse = splash_attention(ql, kl, vl, valid, residuals=True, name="splash_ring_step",
                                      interpret=setup.interpret, kernels=setup.kernels, estimate=setup.estimate,
                                      **setup.blocks(True))
            part = (o.astype(jnp.float32), lse, None)
            if acc is None:
                acc = part
            else:
                lse_new = jnp.logaddexp(acc[1], lse)
                wa = jnp.exp(acc[1] - lse_new).swapaxes(1, 2)[..., None]
                wb = jnp.exp(lse - lse_new).swapaxes(1, 2)[..., None]
                acc = (acc[0] * wa + part[0] * wb, lse_new, None)
        else:
            part = xla_attention_stats(ql, kl, vl, valid)
            acc = part if acc is None else _merge(acc, part)
        if step + 1 < size:
            kl = jax.lax.ppermute(kl, axis, perm)
            vl = jax.lax.ppermute(vl, axis, perm)
    assert acc is not None, "a ring has at least one device"
    if setup.splash:
        return acc[0].astype(ql.dtype)
    return _finish(acc, ql.dtype)


def _ring_heads_major(setup: AttentionSetup, ql, kl, vl, axis: str, size: int, valid_len: int, need_mask: bool):
    """The ring in the splash kernel's own layout, the form of MaxDiffusion's ring kernels: the
    queries, keys and values are padded to the call's blocks and made heads-major (B,H,L,D) once,
    before the ring; K/V rotate in that layout, each step's output is merged heads-major, and the
    result goes back to (B,L,H,D) once, after it. The sequence-major form lays out the rotated K/V
    and every step's output anew; both compute the same attention."""
    b, n, h, d = ql.shape
    tiles = SplashTiles.of(n, n, **setup.blocks(True))
    kernel = tiles.kernel(h, True, setup.interpret)
    qt = scaled_heads_major(_pad_to(ql, tiles.lq))
    kt, vt = (_pad_to(x, tiles.lk).transpose(0, 2, 1, 3) for x in (kl, vl))
    cost = tiles.estimate(h, d, jnp.dtype(ql.dtype).itemsize, True) if setup.estimate else None
    me, perm = jax.lax.axis_index(axis), _ring_permutation(size)
    out = lse = None
    for step in range(size):
        # the next step's K/V leave before this step's kernel runs on the current ones
        rotated = (jax.lax.ppermute(kt, axis, perm), jax.lax.ppermute(vt, axis, perm)) if step + 1 < size else None
        valid = _span_keys(me, step, size, n, valid_len) if need_mask else None
        if tiles.lk != n:
            valid = tiles.padded_valid(valid, n)
        _record(setup.kernels, "splash_ring_step", b, h, tiles.lq, tiles.lk, d, jnp.dtype(ql.dtype).itemsize,
                tiles.block_q, tiles.block_kv, True, tiles.block_kv_compute)
        o, (l_step,) = run_splash(kernel, qt, kt, vt, tiles.segments(valid), "splash_ring_step", cost)
        o = o.astype(jnp.float32)
        if out is None or lse is None:
            out, lse = o, l_step
        else:
            merged = jnp.logaddexp(lse, l_step)
            out = out * jnp.exp(lse - merged)[..., None] + o * jnp.exp(l_step - merged)[..., None]
            lse = merged
        # each step's merge is written out before the next kernel: otherwise XLA fuses the merges of
        # all steps into one, which holds every step's output and statistics at once
        out, lse = jax.lax.optimization_barrier((out, lse))
        if rotated is not None:
            kt, vt = rotated
    assert out is not None, "a ring has at least one device"
    return out.astype(ql.dtype).transpose(0, 2, 1, 3)[:, :n]


def _ulysses(ql, kl, vl, axis: str, size: int, chunks: int, attend):
    """All-to-all heads↔sequence over `axis`, `attend` on the gathered span, all-to-all back; once
    per group of `chunks` equal groups of the local heads (the groups' collectives and attention
    are independent, so one group's all-to-all can overlap another's attention)."""
    def one(qc, kc, vc):
        if size > 1:
            a2a = functools.partial(jax.lax.all_to_all, axis_name=axis, split_axis=2, concat_axis=1, tiled=True)
            qc, kc, vc = a2a(qc), a2a(kc), a2a(vc)
        o = attend(qc, kc, vc)
        if size > 1:
            o = jax.lax.all_to_all(o, axis, split_axis=1, concat_axis=2, tiled=True)
        return o

    if chunks == 1:
        return one(ql, kl, vl)
    width = ql.shape[2] // chunks
    outs = []
    for c in range(chunks):
        heads = slice(c * width, (c + 1) * width)
        with jax.named_scope(f"ulysses_chunk_{c}"):
            outs.append(one(ql[:, :, heads], kl[:, :, heads], vl[:, :, heads]))
    return jnp.concatenate(outs, axis=2)


def self_attention(setup: AttentionSetup, q, k, v, valid_len: int) -> jnp.ndarray:
    """Self-attention over the padded sequence; keys at positions >= valid_len are masked."""
    lp = q.shape[1]
    if setup.mesh is None:
        valid = (jnp.arange(lp) < valid_len) if valid_len < lp else None
        return _local(setup, q, k, v, valid, "splash_self")
    s, mesh = setup.sharded()
    c = s.context
    variant = s.attention if c > 1 else "allgather"
    spec = setup.qkv_spec()
    need_mask = valid_len < lp

    def full_span(ql, kl, vl):
        valid = (jnp.arange(lp) < valid_len) if need_mask else None
        return _local(setup, ql, kl, vl, valid, "splash_self")

    def allgather(ql, kl, vl):
        if c > 1:
            kl = jax.lax.all_gather(kl, "context", axis=1, tiled=True)
            vl = jax.lax.all_gather(vl, "context", axis=1, tiled=True)
        return full_span(ql, kl, vl)

    def ulysses(ql, kl, vl):
        return _ulysses(ql, kl, vl, "context", c, s.ulysses_chunks, full_span)

    def ring(ql, kl, vl):
        return _ring(setup, ql, kl, vl, "context", c, valid_len, need_mask)

    def ulysses_ring(ql, kl, vl):
        r = s.context_ring

        def ring_of_spans(qc, kc, vc):
            if r == 1:
                return full_span(qc, kc, vc)
            return _ring(setup, qc, kc, vc, "context_ring", r, valid_len, need_mask)

        return _ulysses(ql, kl, vl, "context_ulysses", s.context_ulysses, s.ulysses_chunks, ring_of_spans)

    if variant in ("ulysses", "ulysses_ring") and setup.exchange == "sharding_constraint":
        return _ulysses_by_constraint(setup, q, k, v, full_span, valid_len, need_mask)
    fn = {"allgather": allgather, "ulysses": ulysses, "ring": ring, "ulysses_ring": ulysses_ring}[variant]
    return jax.shard_map(fn, mesh=mesh, in_specs=(spec, spec, spec), out_specs=spec, check_vma=False)(q, k, v)


def _ulysses_by_constraint(setup: AttentionSetup, q, k, v, full_span, valid_len: int, need_mask: bool):
    """Ulysses (or 2D context) attention whose head/sequence exchange is left to the partitioner:
    the sequence-sharded arrays are constrained to heads sharded over the Ulysses axis (the
    sequence keeping only the ring axis), attention runs on the local heads, and the result is
    constrained back. Device (ring r, Ulysses u) then holds sequence span r of the ring, as the
    all-to-all form leaves it, so the ring's masks are the same."""
    s, mesh = setup.sharded()
    if s.ulysses_chunks > 1:
        raise ShapeError("Ulysses head-group chunks need the all_to_all exchange; the sharding-constraint form "
                         "exchanges every head at once")
    ulysses_axis = "context" if s.attention == "ulysses" else "context_ulysses"
    heads = tuple(a for a, n in (("tensor", s.tensor), (ulysses_axis, s.axis_sizes[ulysses_axis])) if n > 1)
    ring_axis = "context_ring" if s.attention == "ulysses_ring" and s.context_ring > 1 else None
    spec, by_heads = setup.qkv_spec(), P(setup.batch_axes, ring_axis, heads or None, None)

    def attend(ql, kl, vl):
        if ring_axis is None:
            return full_span(ql, kl, vl)
        return _ring(setup, ql, kl, vl, ring_axis, s.context_ring, valid_len, need_mask)

    def constrain(x, to):
        return jax.lax.with_sharding_constraint(x, NamedSharding(mesh, to))

    q, k, v = (constrain(x, by_heads) for x in (q, k, v))
    o = jax.shard_map(attend, mesh=mesh, in_specs=(by_heads,) * 3, out_specs=by_heads, check_vma=False)(q, k, v)
    return constrain(o, spec)


def cross_attention(setup: AttentionSetup, q, k, v) -> jnp.ndarray:
    """Attention of (sequence-sharded) queries to a replicated context; no communication.

    For splash the context length is padded to a multiple of 128 with masked keys.
    """
    lk = k.shape[1]
    padded = lk
    if setup.splash and lk % 128:
        padded = lk + (-lk % 128)
        k = jnp.pad(k, ((0, 0), (0, padded - lk), (0, 0), (0, 0)))
        v = jnp.pad(v, ((0, 0), (0, padded - lk), (0, 0), (0, 0)))

    def fn(ql, kl, vl):
        kv_valid = (jnp.arange(padded) < lk) if padded != lk else None
        return _local(setup, ql, kl, vl, kv_valid, "splash_cross", self_attention=False)

    if setup.mesh is None:
        return fn(q, k, v)
    qs, cs = setup.qkv_spec(), setup.ctx_spec()
    return jax.shard_map(fn, mesh=setup.mesh, in_specs=(qs, cs, cs), out_specs=qs, check_vma=False)(q, k, v)
