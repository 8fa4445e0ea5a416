"""The memory estimate against `compiled.memory_analysis()`."""

import pytest

from aoizora.stage1 import TransformerSpace, estimate_memory, predict, read_module
from aoizora.stage1.search import _lower
from aoizora.workloads.transformer import TransformerConfig


def test_arguments_and_outputs_exact(micro, transformer_cases):
    for case in list(micro.values()) + list(transformer_cases.values()):
        ma = case.compiled.memory_analysis()
        assert case.prediction.argument_bytes == ma.argument_size_in_bytes, case.name
        assert case.prediction.output_bytes == ma.output_size_in_bytes, case.name


# Long sequences make the attention scores the largest temporary (hundreds of MiB, beyond what
# the compiler keeps in on-chip memory), so the estimate's liveness and sharding are exercised.
LONG = TransformerConfig(layers=2, dim=512, heads=8, head_dim=64, mlp=1024, seq=8192, batch=2)


@pytest.mark.parametrize("key", ["context=8 | weights=replicated | attn=dense", "fsdp=2,context=4 | weights=fsdp | attn=dense"])
def test_total_within_15_percent(topo_2x4, key):
    space = TransformerSpace(LONG)
    cand = next(c for c in space.candidates(8) if c.key == key)
    lowered = _lower(space, cand.strategy, topo_2x4)
    est = estimate_memory(predict(read_module(lowered)), topo_2x4.hardware)
    ma = lowered.compile().memory_analysis()
    compiled = ma.argument_size_in_bytes + ma.output_size_in_bytes + ma.temp_size_in_bytes - ma.alias_size_in_bytes
    assert ma.temp_size_in_bytes > 100 * 2**20  # the case really has large temporaries
    assert est.total_bytes == pytest.approx(compiled, rel=0.15)
    assert est.temp_bytes == pytest.approx(ma.temp_size_in_bytes, rel=0.15)
    assert est.fits


def test_does_not_fit_reason(micro, topo_2x4):
    pred = micro["drop-allgather"].prediction
    est = estimate_memory(pred, topo_2x4.hardware, slack=1e-9)
    assert not est.fits
    assert "GiB" in est.reason and "HBM" in est.reason
    assert estimate_memory(pred, topo_2x4.hardware).fits
