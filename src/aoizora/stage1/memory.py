"""Per-device memory estimate of a lowered strategy against the generation's HBM.

Why: a strategy that does not fit fails to compile (`RESOURCE_EXHAUSTED`) after seconds of compile
time; Stage 1 drops it from the lowered IR alone. The estimate mirrors the three figures of
`compiled.memory_analysis()`: arguments (parameters and inputs, per-device shards), outputs, and
temporaries — the intermediate buffers the HBM model (`hbm.py`) finds in the sharding propagator's
value events (`events.py`), packed into one allocation the way libtpu packs them (best fit, in the
order buffers are born; see `heap.py`), which takes more than their live peak. The buffers: results
of contractions, reductions, kernels, collectives and loop carries; elementwise and layout ops are
fused into the ops that consume them, which hold the fused inputs live until they run, except into
an opaque kernel or an all-to-all (their computed operands, such as keys padded to the kernel's
blocks, are written out one after the other before the call, and what each is computed from dies
as it is written), and except a reshape that moves elements across the 128 TPU lanes (a relayout
copy); a fused value several such ops read is written out once (over an operand of its
size that dies there), unless it is larger than what it is computed from (then each reader
recomputes it); a view keeps its buffer live; a loop body counts once; a weight gathered by a
sharding constraint is fetched a few ops ahead of its first use; an all-gather of an activation
holds a second copy of its result, libtpu's async collective fusion buffer; a collective permute's
result is live from its operand's definition, as libtpu issues it then, unless the program would not
fit so (`predict_within_hbm`); a loop's state owns buffers for the whole loop; a partial-sum
all-reduce writes its result over its input; a shard_map's computed operand is written out as an
argument its body owns until its last use there; a kernel's output is a buffer its caller holds
until its last use. The shardings are the partitioner's, constraints propagated back through
reshapes, slices and concatenates as Shardy does. The limit is the HBM the compiler allows one
program (`hbm_usable_bytes`, e.g. 15.75 GiB of v5e's 16), not the chip's nominal HBM.

Where each rule lives: which ops fuse, until when a fused value's inputs stay live, relayout
reshapes and when permutes are issued in `fusion.py`; buffers, loop state, shard_map arguments,
kernel outputs, weight prefetch, async copies and scratch in `hbm.py`; the packing in `heap.py`;
the fit against the compiler's limit and the scheduler's fallback for permutes here.

Not modelled: what libtpu places in on-chip VMEM (buffers up to ~100 MiB on v5e), which leaves
HBM; small programs are therefore over-estimated, Wan's activations are larger than that.

The async collective copies and the scratch of an all-reduce or an all-to-all (a buffer of its
payload) are outside libtpu's buffer assignment: `memory_analysis()` reports them, but the
compiler's out-of-HBM check does not count them (programs reported at up to 15.99 GiB compiled
under v5e's 15.75 GiB limit). So the estimate includes them and the fit leaves them out
(docs/notebook/memory-model.md, "Async collective fusion buffers", "The compiler's temp allocation is a
linear scan", "All-to-all scratch", "Kernel outputs, shard_map arguments and the scheduler's
memory limit", "Pad copies in front of the splash kernel").
"""

from __future__ import annotations

from dataclasses import dataclass

from aoizora.stage1.dag import KernelCostHook, Prediction
from aoizora.stage1.ir import IRModule
from aoizora.stage1.predict import predict
from aoizora.topology import HardwareProfile

GIB = 2**30


@dataclass(frozen=True)
class MemoryEstimate:
    argument_bytes: float
    output_bytes: float
    temp_bytes: float
    hbm_bytes: int
    slack: float
    outside_bytes: float = 0.0  # held outside libtpu's buffer assignment (not in its HBM check)

    @property
    def total_bytes(self) -> float:
        """What `memory_analysis()` should report (arguments + outputs + temporaries)."""
        return self.argument_bytes + self.output_bytes + self.temp_bytes

    @property
    def checked_bytes(self) -> float:
        """What the compiler compares with its HBM limit: everything but `outside_bytes`."""
        return self.total_bytes - self.outside_bytes

    @property
    def fits(self) -> bool:
        return self.checked_bytes <= self.hbm_bytes * self.slack

    @property
    def reason(self) -> str:
        """Why it does not fit (empty when it does)."""
        if self.fits:
            return ""
        return (
            f"needs ~{self.checked_bytes / GIB:.2f} GiB per device (arguments {self.argument_bytes / GIB:.2f}, "
            f"outputs {self.output_bytes / GIB:.2f}, temporaries {(self.temp_bytes - self.outside_bytes) / GIB:.2f}) "
            f"> {self.hbm_bytes * self.slack / GIB:.2f} GiB of HBM the compiler allows"
        )

    def to_json(self) -> dict:
        return {
            "argument_bytes": self.argument_bytes,
            "output_bytes": self.output_bytes,
            "temp_bytes": self.temp_bytes,
            "outside_bytes": self.outside_bytes,
            "total_bytes": self.total_bytes,
            "hbm_bytes": self.hbm_bytes,
            "slack": self.slack,
            "fits": self.fits,
        }

    @classmethod
    def from_json(cls, d: dict) -> MemoryEstimate:
        """The estimate `to_json` wrote (its derived fields are recomputed, not read)."""
        return cls(float(d["argument_bytes"]), float(d["output_bytes"]), float(d["temp_bytes"]), int(d["hbm_bytes"]),
                   float(d["slack"]), float(d["outside_bytes"]))


def estimate_memory(prediction: Prediction, hardware: HardwareProfile, slack: float = 1.0) -> MemoryEstimate:
    """Memory per device. `slack` > 1 keeps borderline strategies (the estimate is approximate)."""
    return MemoryEstimate(prediction.argument_bytes, prediction.output_bytes, prediction.peak_temp_bytes,
                          hardware.hbm_usable_bytes, slack, prediction.outside_bytes)


def predict_within_hbm(module: IRModule, hardware: HardwareProfile, kernel_cost: KernelCostHook | None = None,
                       slack: float = 1.0) -> tuple[Prediction, MemoryEstimate]:
    """Predict a program and its memory as libtpu schedules it under its HBM limit.

    libtpu's scheduler starts collective permutes early (ring attention's whole K/V rotation ahead
    of the first step) only while the program still fits: where HBM is tight it issues each permute
    just before its step (v5e:2x2 720p/41f `context=2,tensor=2 | weights=tensor | attn=ring`: start
    and done adjacent, after the local step; v5e:4x4 720p/81f `context=8,tensor=2`: two of 14
    rotated shards live at once). So a program that does not fit with its permutes hoisted is
    walked again with them in place, and that walk decides (docs/notebook/memory-model.md, "Kernel
    outputs, shard_map arguments and the scheduler's memory limit").
    """
    pred = predict(module, kernel_cost, async_collective_fusion=hardware.async_collective_fusion)
    mem = estimate_memory(pred, hardware, slack)
    if not mem.fits and pred.hoisted_permutes:
        late = predict(module, kernel_cost, hoist_permutes=False,
                       async_collective_fusion=hardware.async_collective_fusion)
        late_mem = estimate_memory(late, hardware, slack)
        if late_mem.fits:
            return late, late_mem
    return pred, mem
