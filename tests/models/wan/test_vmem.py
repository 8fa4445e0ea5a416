"""The splash scoped-VMEM rule (aoizora.models.wan.kernels.vmem) against its compile probes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from aoizora.models.wan.kernels.splash_tiles import (
    LARGE_BLOCK_KV,
    LARGE_BLOCK_KV_COMPUTE,
    SPLASH_LIMIT_LENGTH,
    compile_splash_call,
)
from aoizora.models.wan.kernels.vmem import (
    COEFFICIENTS,
    coefficients_from_data,
    effective_limit_kib,
    splash_blocks_fit,
    splash_working_set_bytes,
)
from aoizora.models.wan.transformer.strategy import SplashBlocks
from aoizora.topology import hardware_profile
from tests.compile_seed import through_cache

DATA = json.loads((Path(__file__).parents[3] / "benchmarks" / "hardware" / "data" / "splash_vmem_rule.json")
                  .read_text())
MEASURED = sorted(DATA["default_limit_kib"])
ROW = 128


def _margin(gen: str, batch: int) -> float:
    return hardware_profile(gen).splash_vmem[batch][COEFFICIENTS.index("margin")]


@pytest.mark.parametrize("gen", MEASURED)
def test_coefficients_and_default_limit_are_those_of_the_committed_probes(gen):
    hw = hardware_profile(gen)
    assert hw.scoped_vmem_default_kib == DATA["default_limit_kib"][gen]
    # past the chip's VMEM a refusal states the VMEM ("Used X of Y vmem"), which no limit exceeds
    stated = [s["of_kib"] for r in DATA["fit"] if r["generation"] == gen for s in r["steps"] if s.get("form") == "used"]
    stated += [r["of_kib"] for r in DATA["held_out"] if r["generation"] == gen and r.get("form") == "used"]
    assert hw.scoped_vmem_max_kib == (int(min(stated)) if stated else None)
    if stated:
        assert effective_limit_kib(gen, 2 * hw.scoped_vmem_max_kib) == hw.scoped_vmem_max_kib
    fitted = coefficients_from_data(DATA["fit"], gen)
    assert set(fitted) == set(hw.splash_vmem) == {1, 2}
    for batch, coef in fitted.items():
        assert hw.splash_vmem[batch] == pytest.approx([coef[c] for c in COEFFICIENTS], rel=1e-6, abs=1.0)
    assert hw.to_json()["splash_vmem"] == {str(b): list(c) for b, c in hw.splash_vmem.items()}


@pytest.mark.parametrize("gen", MEASURED)
def test_the_rule_bounds_every_measured_working_set(gen):
    """Within the margin of every probe (to 1 KiB: the coefficients are stored to 6 decimals and
    the margin is the largest error, attained), so at any limit the rule never admits a measured
    tile that needs more."""
    for row in (r for r in DATA["fit"] if r["generation"] == gen and r["working_set_kib"] is not None):
        blocks, measured = SplashBlocks(*row["blocks"]), row["working_set_kib"] * 1024
        predicted = splash_working_set_bytes(gen, row["batch"], blocks)
        assert abs(predicted - measured) <= _margin(gen, row["batch"]) + 1024


def test_held_out_expert_tiles_are_never_admitted_when_the_compiler_refuses_them():
    """MaxDiffusion's tiles at the default and raised limits (held out from the fit): every tile the
    rule admits compiles, and it agrees with at least three verdicts in four (its misses are tiles
    it refuses that compile: 256-wide score tiles, over-estimated, and tiles within its margin)."""
    rows = [r for r in DATA["held_out"] if r["generation"] in MEASURED]
    assert rows
    verdicts = [(splash_blocks_fit(r["generation"], r["batch"], SplashBlocks(*r["blocks"]), r["limit_kib"]), r)
                for r in rows]
    assert all(r["compiles"] for fits, r in verdicts if fits)
    assert sum(fits == r["compiles"] for fits, r in verdicts) >= 0.75 * len(verdicts)


def _largest_admitted_block_q(gen: str, batch: int, limit_kib: int | None) -> int:
    bq = ROW
    assert splash_blocks_fit(gen, batch, SplashBlocks(bq, LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE), limit_kib)
    while splash_blocks_fit(gen, batch, SplashBlocks(bq + ROW, LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE), limit_kib):
        bq += ROW
    return bq


@pytest.mark.parametrize("gen", MEASURED)
def test_the_rule_is_within_its_margin_of_the_measured_query_block_limit(gen):
    """`splash_max_block_q` (splash_vmem.py's bisection, not used in the fit) is at least the
    rule's largest block_q and no more than the margin's worth of rows above it."""
    hw = hardware_profile(gen)
    for batch, measured in hw.splash_max_block_q.items():
        ruled = _largest_admitted_block_q(gen, batch, None)
        double = splash_working_set_bytes(gen, batch, SplashBlocks(2 * ROW, LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE))
        single = splash_working_set_bytes(gen, batch, SplashBlocks(ROW, LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE))
        per_row = (double - single) / ROW
        assert ruled <= measured <= ruled + 2 * _margin(gen, batch) / per_row + ROW


def _compile_boundary(gen: str, topology: str, batch: int, limit_kib: int | None) -> None:
    """The rule's largest 128-row block_q compiles; the first whose working set less the margin
    is over the limit is refused."""
    n = SPLASH_LIMIT_LENGTH
    fits = _largest_admitted_block_q(gen, batch, limit_kib)
    limit = effective_limit_kib(gen, limit_kib) * 1024
    over = fits
    while splash_working_set_bytes(gen, batch, SplashBlocks(over, LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE)) \
            - _margin(gen, batch) <= limit:
        over += ROW
    compile_splash_call(topology, batch, n, n, SplashBlocks(fits, LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE),
                        scoped_vmem_limit_kib=limit_kib, compile_with=through_cache(topology))
    with pytest.raises(Exception, match="(?i)vmem"):
        compile_splash_call(topology, batch, n, n, SplashBlocks(over, LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE),
                            scoped_vmem_limit_kib=limit_kib, compile_with=through_cache(topology))


@pytest.mark.tpu_compile
@pytest.mark.parametrize("gen", MEASURED)
def test_the_rule_s_boundary_at_the_default_limit_compiles_and_past_it_is_refused(gen):
    _compile_boundary(gen, DATA["slices"][gen], 1, None)


@pytest.mark.tpu_compile
def test_the_rule_s_boundary_at_a_raised_limit_compiles_and_past_it_is_refused():
    """v5e at twice its default limit, local batch 2 (the smaller tiles of a 32 MiB limit keep the
    test's two compiles short)."""
    _compile_boundary("v5e", DATA["slices"]["v5e"], 2, 32768)


def test_an_unmeasured_generation_or_batch_has_no_verdict():
    blocks = SplashBlocks(1024, LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE)
    unmeasured = [g for g in ("v4", "v5e", "v5p", "v6e", "tpu7x") if g not in MEASURED]
    for gen in unmeasured:
        assert splash_blocks_fit(gen, 1, blocks) is None
    assert splash_blocks_fit(MEASURED[0], 3, blocks) is None
