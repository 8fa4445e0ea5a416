"""`predict`: the prediction DAG of a lowered program (`dag.py`), from the sharding propagator
(`propagate.py`) and the HBM model (`hbm.py`) fed by its value events."""

from __future__ import annotations

from aoizora.stage1.dag import KernelCostHook, Prediction
from aoizora.stage1.hbm import HbmModel, HbmReport
from aoizora.stage1.ir import IRModule
from aoizora.stage1.propagate import Propagation, ShardingPropagator


def prediction_of(propagation: Propagation, hbm: HbmReport) -> Prediction:
    """A prediction from the propagator's findings and the HBM model's report on its events."""
    p = propagation
    return Prediction(p.mesh_axes, p.nodes, p.argument_bytes, p.output_bytes, hbm.peak_temp_bytes, p.notes,
                      hbm.outside_bytes, hbm.live_peak_temp_bytes, hbm.hoisted_permutes)


def predict(module: IRModule, kernel_cost: KernelCostHook | None = None, hoist_permutes: bool = True,
            async_collective_fusion: bool = True) -> Prediction:
    """Build the prediction DAG of a lowered program (see `propagate.py` and `hbm.py` for the rules).

    `hoist_permutes=False` issues each collective permute where it is written instead of as soon as
    its operand exists: what libtpu's scheduler does when hoisting would not fit in HBM
    (`stage1.memory.predict_within_hbm`). `async_collective_fusion`: whether libtpu holds a second
    copy of an all-gathered activation (`HardwareProfile.async_collective_fusion`; `hbm.HbmModel`).
    """
    hbm = HbmModel(module.funcs, hoist_permutes, async_collective_fusion)
    return prediction_of(ShardingPropagator(module, kernel_cost, hbm.feed).run(), hbm.report())
