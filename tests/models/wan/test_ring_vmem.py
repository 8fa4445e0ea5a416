"""MaxDiffusion's ring kernel's scoped-VMEM rule (aoizora.models.wan.kernels.vmem, kernel "maxdiffusion_ring")
against the compile probes it was fitted to, and the tiles ring and 2D-context strategies take."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from aoizora.models.maxdiffusion.overrides import facts
from aoizora.models.wan.kernels.splash_tiles import (
    fitted_splash_blocks,
    local_batch,
    ring_fitted_blocks,
    ring_kernel_admits,
    runs_maxdiffusion_ring,
    searched_splash_tile,
)
from aoizora.models.wan.kernels.vmem import (
    COEFFICIENTS,
    coefficients,
    effective_limit_kib,
    maxdiffusion_ring_rule,
    splash_blocks_fit,
    splash_working_set_bytes,
)
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy
from aoizora.topology import hardware_profile

ROOT = Path(__file__).parents[3]
RAW = json.loads((ROOT / "benchmarks" / "hardware" / "data" / "maxdiffusion_ring_vmem.json").read_text())
MEASURED = sorted({r["generation"] for r in RAW["rows"]})
TOKENS_720P_81 = 75600


def _benchmark():
    path = ROOT / "benchmarks" / "hardware" / "maxdiffusion_ring_vmem.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("maxdiffusion_ring_vmem", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_rule_is_the_fit_of_the_committed_probes_and_cites_their_commit():
    rule = maxdiffusion_ring_rule()
    assert rule == _benchmark().rule(RAW)
    assert rule["source"]["commit"] == RAW["maxdiffusion"]["commit"] == facts()["commit"]
    assert set(rule["coefficients"]) == set(MEASURED)


@pytest.mark.parametrize("gen", MEASURED)
def test_the_rule_bounds_every_fitted_working_set(gen):
    for row in (r for r in RAW["rows"] if r["generation"] == gen and r["role"] == "fit"):
        coef = coefficients(gen, row["batch"], "maxdiffusion_ring")
        predicted = splash_working_set_bytes(gen, row["batch"], SplashBlocks(*row["blocks"]), "maxdiffusion_ring")
        assert abs(predicted - row["working_set_kib"] * 1024) <= coef[COEFFICIENTS.index("margin")] + 1024


@pytest.mark.parametrize("limit", [None, 32768, 65536])
def test_every_held_out_tile_the_rule_admits_fits_the_limit(limit):
    """Held out from the fit: a tile the rule admits at a limit needs no more than that limit, and
    every held-out tile below the chip's VMEM is within the rule plus its margin (past it, TPU7x's
    6400/1024/1024, the refusal states the kernel's whole use, which the rule under-estimates, but
    no limit admits it)."""
    rows = [r for r in RAW["rows"] if r["role"] == "held_out"]
    assert rows
    for row in rows:
        gen, blocks = row["generation"], SplashBlocks(*row["blocks"])
        if splash_blocks_fit(gen, row["batch"], blocks, limit, kernel="maxdiffusion_ring"):
            assert row["working_set_kib"] <= effective_limit_kib(gen, limit)
    for check in maxdiffusion_ring_rule()["held_out"]:
        capped = any(r["note"] for r in rows if r["generation"] == check["generation"]
                     and SplashBlocks(*r["blocks"]).describe() == check["blocks"])
        assert check["bounded"] or capped


@pytest.mark.parametrize("gen", MEASURED)
def test_the_ring_kernel_needs_more_than_jax_splash_at_the_held_out_tiles(gen):
    """Why the second rule exists: at the tiles plans take (block_q from 2,944 rows) the ring
    kernel's rule asks more than the splash rule (which was measured at a longer call, 81,920
    queries and keys against 37,800), by 3.9 to 17.1 MiB."""
    for row in (r for r in RAW["rows"] if r["generation"] == gen and r["role"] == "held_out"):
        blocks = SplashBlocks(*row["blocks"])
        more = splash_working_set_bytes(gen, 1, blocks, "maxdiffusion_ring") - splash_working_set_bytes(gen, 1, blocks)
        assert more > 3 * 2 ** 20


def test_an_unmeasured_generation_or_batch_has_no_verdict():
    blocks = SplashBlocks(1024, 2048, 1024)
    assert splash_blocks_fit("v5e", 1, blocks, kernel="maxdiffusion_ring") is None
    assert splash_blocks_fit(MEASURED[0], 3, blocks, kernel="maxdiffusion_ring") is None
    assert ring_kernel_admits(hardware_profile(MEASURED[0]), 3, blocks, None)
    with pytest.raises(ValueError):
        coefficients(MEASURED[0], 1, "other")  # type: ignore[arg-type]


RING_STRATEGIES = [
    Strategy(data=2, context=4, attention="ulysses_ring", context_ulysses=2, weights="replicated"),
    Strategy(data=2, context=4, attention="ring", weights="replicated"),
    Strategy(data=1, context=8, attention="ring", weights="replicated"),
]


@pytest.mark.parametrize("gen", MEASURED)
@pytest.mark.parametrize("strategy", RING_STRATEGIES, ids=lambda s: s.describe() if hasattr(s, "describe") else None)
def test_ring_and_2d_context_strategies_take_only_tiles_both_rules_admit(gen, strategy):
    assert runs_maxdiffusion_ring(strategy)
    found = searched_splash_tile(strategy, TOKENS_720P_81, 2, gen)
    assert found is not None
    blocks, limit = found
    hw = hardware_profile(gen)
    nb = local_batch(strategy, 2)
    assert ring_kernel_admits(hw, nb, blocks, limit)
    if limit is not None:
        assert splash_blocks_fit(hw, nb, blocks, limit)


def test_other_attention_keeps_the_splash_rule_alone():
    strategy = Strategy(data=2, context=4, attention="ulysses", weights="replicated")
    assert not runs_maxdiffusion_ring(strategy)
    assert not runs_maxdiffusion_ring(dataclasses.replace(RING_STRATEGIES[1], context=1, data=8))
    assert not runs_maxdiffusion_ring(dataclasses.replace(RING_STRATEGIES[1], kernel_profile="maxdiffusion-custom"))


@pytest.mark.parametrize("gen", MEASURED)
def test_at_the_default_limit_the_fitted_block_q_is_lowered_until_the_ring_kernel_holds_it(gen):
    """The splash bisection's block_q (3,072 rows on v6e, 2,944 on TPU7x) overflows the ring kernel
    at libtpu's default 32 MiB (2944/2048/1024 measured 35.4 and 38.1 MiB)."""
    strategy = RING_STRATEGIES[0]
    hw = hardware_profile(gen)
    splash = fitted_splash_blocks(strategy, TOKENS_720P_81, 2, hw.splash_max_block_q)
    ring = ring_fitted_blocks(strategy, TOKENS_720P_81, 2, hw.splash_max_block_q, hw)
    assert not ring_kernel_admits(hw, 1, splash, None)
    assert ring.block_q < splash.block_q and (ring.block_kv, ring.block_kv_compute) == (splash.block_kv,
                                                                                        splash.block_kv_compute)
    assert ring_kernel_admits(hw, 1, ring, None)
    other = dataclasses.replace(strategy, attention="ulysses")
    assert ring_fitted_blocks(other, TOKENS_720P_81, 2, hw.splash_max_block_q, hw) == fitted_splash_blocks(
        other, TOKENS_720P_81, 2, hw.splash_max_block_q)


@pytest.mark.tpu_compile
@pytest.mark.skipif(not __import__("os").environ.get("MAXDIFFUSION_DIR"),
                    reason="MAXDIFFUSION_DIR is not set: set it to a MaxDiffusion checkout at the commit the ring data "
                           "names (its src/maxdiffusion/kernels suffice, e.g. from `git archive COMMIT "
                           "src/maxdiffusion/kernels`) to compile its ring kernel at the rule's boundary")
@pytest.mark.parametrize("limit", [None, 65536], ids=["default-limit", "64MiB"])
def test_at_the_rules_boundary_the_ring_kernel_compiles_what_it_admits_and_not_what_it_refuses(limit):
    """MaxDiffusion's ring kernel compiled by libtpu on v6e at local batch 1 (the benchmark's call):
    the largest block_q the rule admits compiles under the limit, and the smallest block_q whose
    working set less the rule's margin is over the limit is refused."""
    import os

    bench = _benchmark()
    before = {k: v for k, v in sys.modules.items() if k.split(".")[0] == "maxdiffusion"}
    try:  # the benchmark imports the kernels under a stub package: other tests get the real one back
        ring = bench.ring_kernel_module(os.environ["MAXDIFFUSION_DIR"])
        _compile_at_the_boundary(bench, ring, limit)
    finally:
        for name in [k for k in sys.modules if k.split(".")[0] == "maxdiffusion"]:
            del sys.modules[name]
        sys.modules.update(before)


def _compile_at_the_boundary(bench, ring, limit):
    hw = hardware_profile("v6e")
    kib = effective_limit_kib(hw, limit)
    margin = coefficients(hw, 1, "maxdiffusion_ring")[4]
    tiles = [SplashBlocks(q, 2048, 1024) for q in range(256, 16384 + 1, 256)]
    admitted = [t for t in tiles if ring_kernel_admits(hw, 1, t, limit)]
    refused = [t for t in tiles
               if splash_working_set_bytes(hw, 1, t, "maxdiffusion_ring") - margin > kib * 1024]
    assert admitted and refused, "the boundary lies outside the tiles tried"
    for tile, compiles in ((admitted[-1], True), (refused[0], False)):
        lowered = bench.ring_program(ring, bench.SLICES["v6e"], (tile.block_q, tile.block_kv, tile.block_kv_compute), 1)
        assert bench.probe(lowered, limit)["compiles"] is compiles, tile.describe()
