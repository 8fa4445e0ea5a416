"""Why a strategy was dropped: the compiler's refusals for HBM and for scoped VMEM are told apart."""

from __future__ import annotations

from aoizora.stage2.outcomes import (
    OUT_OF_HBM,
    OUT_OF_VMEM,
    CachedCompileError,
    CompileTimeout,
    drop_reason,
    memory_kind,
    refused_for_memory,
)

# the first lines libtpu 0.0.42.1 raises (an HBM overflow of a whole program; a splash block too
# large for v5e's scoped VMEM, benchmarks/hardware/data/splash_vmem.json)
HBM = ("RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. "
       "Used 17.2G of 15.75G hbm.")
VMEM = "RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:\nUsed 17.56M of 16.00M vmem."


def test_the_compilers_memory_refusals_are_labelled_by_memory():
    assert drop_reason(RuntimeError(HBM)) == f"{OUT_OF_HBM}: {HBM}"
    assert drop_reason(RuntimeError(VMEM)) == f"{OUT_OF_VMEM}: RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:"
    assert refused_for_memory(drop_reason(RuntimeError(HBM))) and refused_for_memory(drop_reason(RuntimeError(VMEM)))
    assert memory_kind(drop_reason(RuntimeError(HBM))) == "HBM"
    assert memory_kind(drop_reason(RuntimeError(VMEM))) == "scoped VMEM"


def test_other_failures_are_not_memory_refusals():
    for exc in (RuntimeError("INVALID_ARGUMENT: bad sharding"), CompileTimeout("compile timed out after 60 s")):
        assert not refused_for_memory(drop_reason(exc))
        assert memory_kind(drop_reason(exc)) is None


def test_a_cached_vmem_refusal_recorded_under_the_hbm_label_is_relabelled():
    old = f"{OUT_OF_HBM}: RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:"
    assert (drop_reason(CachedCompileError(old))
            == f"{OUT_OF_VMEM}: RESOURCE_EXHAUSTED: E1001: CompileTimeScopedVmemOom:")
    assert drop_reason(CachedCompileError(f"{OUT_OF_HBM}: {HBM}")) == f"{OUT_OF_HBM}: {HBM}"
