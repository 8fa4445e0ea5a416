"""Whether a splash call's blocks fit the compiler's scoped VMEM, per generation and limit.

libtpu gives a Pallas kernel's VMEM buffers from its scoped VMEM, whose size is libtpu's
`toolchain.SCOPED_VMEM_FLAG` (per generation by default: `HardwareProfile.scoped_vmem_default_kib`),
and refuses a program whose kernel needs more ("CompileTimeScopedVmemOom"). MaxDiffusion raises
that limit to run larger splash tiles; this module says which tiles a limit allows.

The rule
--------
The scoped VMEM one splash call of the model needs (log-sum-exp residuals, head_dim 128, bf16;
`W`, bytes) is, per generation and local batch (`HardwareProfile.splash_vmem`),

    W = per_q_row * bq + per_kv_row * bkv + per_score * bq * bkv_compute + per_block_score * bq * bkv

for block_q `bq`, block_kv `bkv` and block_kv_compute `bkv_compute`, and a tile fits a limit when
W plus the fit's largest error (`margin`) is at most it (`splash_blocks_fit`); no limit gives a
kernel more than the chip's VMEM (`HardwareProfile.scoped_vmem_max_kib`, as libtpu's refusals
state it: 16 MiB on v4, 63.9 MiB on v5p, 64 MiB on TPU7x; not reached on v5e and v6e).

What it rests on: the compiler's refusals. The kernel's request is three allocations stacked in
turn, and a refusal states the stack's height when one overflowed, so raising the limit to each
figure in turn shows each (`benchmarks/hardware/splash_vmem_rule.py`; data:
`benchmarks/hardware/data/splash_vmem_rule.json`). On v6e at local batch 1 they are: the
pipeline's buffers, exactly 4,608 B per query row (the Q block, its segment ids, the output and
log-sum-exp blocks, double-buffered, 3,072 B; the running max, sum and output in float32, once,
1,536 B) and 512 B per key of the K/V block (1,024 B per key at local batch 2, and 512 B more
per query row); a fixed 0.72 MiB; and the body's float32 temporaries, about one score tile
(bq x bkv_compute x 4 B) plus 1.4-2.2 B per element of the rest of the K/V block, whose sub-blocks
the kernel's unrolled loop keeps. The four terms are that decomposition's shape, fitted by least
squares to the measured totals (`fit_splash_vmem`; the fixed allocation is absorbed by them) and
copied into `data/hardware.json`.

Where it does not hold: the temporaries are not linear in the blocks (a narrower
block_kv_compute at the same block_kv needs more, and a 256-wide one far less than a score tile),
so the fit is off single measured tiles by up to its margin (~2.6 MiB on v6e and TPU7x, 2.9 MiB
on v4) and, with the margin, refuses some tiles near the boundary that compile: it is
conservative on every measured tile, not exact. v5e, v5p and v4 were measured on six of the ten
tiles (without the 512-wide block_kv_compute, where v6e's fit errs most), so their margins (0.9
MiB on v5e and v5p) are likely too small. It was measured at 81,920 queries and keys (shorter
calls need somewhat less), for the model's call with residuals (MaxDiffusion's call, without
them, was not measured), and over block_q 1,024-4,096, block_kv 1,024-4,096 and
block_kv_compute 256-2,048. Beyond that range it
extrapolates with a larger error: MaxDiffusion's 6,400-9,472-row tiles, whose whole use TPU7x's
refusals state, are predicted 4.4 MiB under to 3.7 MiB over (held out, tests/models/wan/test_vmem.py),
so a limit within a few MiB of such a tile's working set may be misjudged. On TPU7x no limit
above its 64 MiB of VMEM helps, on v4 none above its 16 MiB.

MaxDiffusion's ring kernel
--------------------------
A plan with ring or 2D-context attention is exported to MaxDiffusion as ``tokamax_ring`` or
``ulysses_ring`` (`aoizora.export.maxdiffusion`), which run MaxDiffusion's own ring kernel, not
JAX's splash, and that kernel needs more scoped VMEM at the same tile. Its rule has the same form
and is read with ``kernel="maxdiffusion_ring"`` (`KERNELS`): the coefficients per generation and
local batch in `data/maxdiffusion_ring_vmem.json`, fitted to the working sets
`benchmarks/hardware/maxdiffusion_ring_vmem.py` measured by compiling that kernel at the commit the
file names, as `_ulysses_ring_attention` calls it for Wan 2.1 14B at 720p/81 (the longest calls
the kernel gets on the slices measured; shorter ones need somewhat less). It was measured on v6e
and TPU7x, at local batch 1 and, on seven of its tiles, 2, where each tile needed exactly what it
needs at batch 1 (the kernel is vmapped over the batch, a grid axis of its own), so batch 2 takes
batch 1's coefficients; elsewhere it gives no verdict.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping, Sequence
from importlib import resources
from typing import Any, Literal

import numpy as np

from aoizora.models.wan.transformer.strategy import SplashBlocks
from aoizora.topology.hardware import HardwareProfile, hardware_profile

#: names of the coefficients, in `HardwareProfile.splash_vmem`'s order (bytes)
COEFFICIENTS = ("per_q_row", "per_kv_row", "per_score", "per_block_score", "margin")
#: the kernels with a rule: JAX's splash (the model's call, `HardwareProfile.splash_vmem`) and
#: MaxDiffusion's ring kernel (what an exported ring or 2D-context plan runs)
Kernel = Literal["splash", "maxdiffusion_ring"]
KERNELS: tuple[Kernel, ...] = ("splash", "maxdiffusion_ring")


def _terms(blocks: SplashBlocks) -> tuple[float, float, float, float]:
    q, kv = float(blocks.block_q), float(blocks.block_kv)
    return q, kv, q * blocks.block_kv_compute, q * kv


def fit_splash_vmem(points: Iterable[tuple[SplashBlocks, float]]) -> dict[str, float]:
    """Least-squares coefficients (bytes) of the working set over measured (blocks, bytes)
    points, and `margin`: the fit's largest error on one of them, either way."""
    points = list(points)
    x = np.array([_terms(b) for b, _ in points])
    y = np.array([w for _, w in points], dtype=float)
    coef, *_ = np.linalg.lstsq(x, y, rcond=None)
    margin = float(np.max(np.abs(y - x @ coef)))
    return dict(zip(COEFFICIENTS, [*(float(c) for c in coef), margin], strict=True))


def _profile(generation: str | HardwareProfile) -> HardwareProfile:
    return generation if isinstance(generation, HardwareProfile) else hardware_profile(generation)


@functools.cache
def maxdiffusion_ring_rule() -> dict[str, Any]:
    """`data/maxdiffusion_ring_vmem.json`: the ring kernel's coefficients and their source."""
    return json.loads(resources.files("aoizora").joinpath("data/maxdiffusion_ring_vmem.json").read_text())


def coefficients(generation: str | HardwareProfile, local_batch: int,
                 kernel: Kernel = "splash") -> tuple[float, ...] | None:
    """The kernel's rule (`COEFFICIENTS`, bytes) for the generation and local batch; None where it
    was not measured."""
    hw = _profile(generation)
    if kernel == "splash":
        return hw.splash_vmem.get(local_batch)
    if kernel != "maxdiffusion_ring":
        raise ValueError(f"kernel must be one of {KERNELS}, not {kernel!r}")
    coef = maxdiffusion_ring_rule()["coefficients"].get(hw.generation, {}).get(str(local_batch))
    return tuple(float(c) for c in coef) if coef is not None else None


def splash_working_set_bytes(generation: str | HardwareProfile, local_batch: int,
                             blocks: SplashBlocks, kernel: Kernel = "splash") -> float | None:
    """The rule's scoped VMEM working set (bytes, before the margin) of the kernel's call (the
    model's splash call by default) with these blocks at this local batch; None where it was not
    measured."""
    coef = coefficients(generation, local_batch, kernel)
    return None if coef is None else working_set_bytes(coef, blocks)


def working_set_bytes(coef: Sequence[float], blocks: SplashBlocks) -> float:
    """The working set (bytes, before the margin) the coefficients (`COEFFICIENTS`' order) give these blocks."""
    return float(sum(c * t for c, t in zip(coef[:4], _terms(blocks), strict=True)))


def effective_limit_kib(generation: str | HardwareProfile, scoped_vmem_limit_kib: int | None = None) -> int | None:
    """The scoped VMEM limit (KiB) a kernel gets: libtpu's default when None, a raised one no
    more than the chip's VMEM where that was measured; None where the default was not measured."""
    hw = _profile(generation)
    limit = hw.scoped_vmem_default_kib if scoped_vmem_limit_kib is None else scoped_vmem_limit_kib
    if limit is None:
        return None
    return min(limit, hw.scoped_vmem_max_kib) if hw.scoped_vmem_max_kib else limit


def splash_blocks_fit(generation: str | HardwareProfile, local_batch: int, blocks: SplashBlocks,
                      scoped_vmem_limit_kib: int | None = None, kernel: Kernel = "splash") -> bool | None:
    """Whether the rule lets the kernel's call (the model's splash call by default) with these
    blocks compile at the given scoped VMEM limit (KiB; None: libtpu's default): its working set
    plus the fit's margin is at most the limit. None where the rule was not measured (generation
    or local batch). A tile whose working set less the margin is over the limit is refused on
    every measured tile."""
    hw = _profile(generation)
    coef = coefficients(hw, local_batch, kernel)
    need = splash_working_set_bytes(hw, local_batch, blocks, kernel)
    limit = effective_limit_kib(hw, scoped_vmem_limit_kib)
    if coef is None or need is None or limit is None:
        return None
    return need + coef[4] <= limit * 1024


def coefficients_from_data(rows: Sequence[Mapping], generation: str) -> dict[int, dict[str, float]]:
    """The coefficients per local batch fitted to a generation's measured rows of
    `benchmarks/hardware/data/splash_vmem_rule.json` (its "fit" list)."""
    out = {}
    for batch in sorted({r["batch"] for r in rows if r["generation"] == generation}):
        points = [(SplashBlocks(*r["blocks"]), r["working_set_kib"] * 1024) for r in rows
                  if r["generation"] == generation and r["batch"] == batch and r["working_set_kib"] is not None]
        if len(points) > len(COEFFICIENTS) - 1:
            out[batch] = fit_splash_vmem(points)
    return out
