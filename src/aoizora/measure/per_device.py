"""One device's program of a Wan strategy, made for a chip that runs it alone, and what Q2 predicts for it.

A strategy planned for a slice compiles to one SPMD program; each device runs its share, the
local shapes, with collectives between them. `per_device_program` lowers the strategy's
denoising step (with `layers` transformer blocks, so a chip's time goes to the blocks and not to
compiles of forty) for the slice's compile-only devices, takes libtpu's module right after SPMD
partitioning and localizes it (`local_program`): that is what one device computes, with every
collective replaced by a local operation of the same output shape. `predicted_compute_seconds`
is Q2's compute for a compiled module: the compiler's cycle estimate of each fusion at the
generation's clock, the model's cost of each splash call (`aoizora.models.wan.space.costs`), loops by
their trips.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aoizora.measure.local_program import LocalProgram, localize, partitioned_module
from aoizora.toolchain import CompilerFlags, compile_only_devices

if TYPE_CHECKING:
    from aoizora.hlo.program import OpaqueCost, OpaqueOp
    from aoizora.models.wan.space.space import WanSpace
    from aoizora.models.wan.transformer.strategy import Strategy
    from aoizora.topology import HardwareProfile, Topology


def with_layers(space: WanSpace, layers: int) -> WanSpace:
    """A copy of `space` whose model has `layers` transformer blocks (the rest unchanged)."""
    out = copy.copy(space)
    out.config = dataclasses.replace(space.config, num_layers=layers)
    out._meshes, out._kernel_costs = {}, {}
    return out


def strategy_flags(space: WanSpace, strategy: Strategy, flags: CompilerFlags | None = None) -> CompilerFlags:
    """The flags the strategy compiles with: `flags` (the plan's or the user's) and its tile's limit."""
    return (flags or CompilerFlags()).merged(CompilerFlags.parse(space.compile_flags(strategy)))


def per_device_program(space: WanSpace, strategy: Strategy, topology: Topology,
                       flags: CompilerFlags | None = None) -> LocalProgram:
    """One device's share of the strategy's step on `topology`, localized (module docstring)."""
    from aoizora.models.wan.transformer.strategy import make_mesh

    mesh = make_mesh(strategy, compile_only_devices(topology.name))
    lowered = space.lowering_inputs(strategy, mesh).lower()
    return localize(partitioned_module(lowered, strategy_flags(space, strategy, flags).compiler_options()))


def kernel_cost_hook(space: WanSpace, strategy: Strategy, topology: Topology
                     ) -> Callable[[OpaqueOp], OpaqueCost | None]:
    """The hook that costs the strategy's splash calls in a module compiled from the strategy
    itself (at its own tile, not its compiled form), by the same records Stage 2 reads."""
    from aoizora.models.wan.transformer.strategy import make_mesh

    if strategy not in space._meshes:
        space._meshes[strategy] = make_mesh(strategy, compile_only_devices(topology.name))
    return lambda op: space.compiled_kernel_cost(strategy, op, compiled=strategy)


def predicted_compute_seconds(compiled_text: str, hardware: HardwareProfile,
                              opaque_cost: Callable[[OpaqueOp], OpaqueCost | None] | None = None) -> dict[str, Any]:
    """Q2's compute of one run of a compiled module on one device, in all and by kind of node:
    `fusions` (the compiler's cycle estimates), `kernels` (opaque calls the hook costs), `other`.
    The fusions are also split by what bounds each on its roofline (`fusions_by_bound`: `mxu`
    where its FLOPs at the MXU's peak take longer than its HBM bytes at the HBM's bandwidth, else
    `hbm`), with their count, so that the estimate can be checked per kind against the chip."""
    from aoizora.hlo import build_program
    from aoizora.hlo.program import NodeKind

    program = build_program(compiled_text, opaque_cost=opaque_cost)
    parts = {"fusions": 0.0, "kernels": 0.0, "other": 0.0}
    by_bound = {"mxu": {"seconds": 0.0, "count": 0}, "hbm": {"seconds": 0.0, "count": 0}}
    uncosted = 0
    for node in program.nodes:
        if node.kind in (NodeKind.LOOP, NodeKind.COLLECTIVE, NodeKind.COLLECTIVE_START, NodeKind.COLLECTIVE_DONE):
            continue
        if node.seconds is None and node.estimated_cycles is None and not node.flops and not node.hbm_bytes:
            uncosted += 1
            continue
        part = ("kernels" if node.kind == NodeKind.OPAQUE else
                "fusions" if node.estimated_cycles is not None else "other")
        seconds = node.compute_seconds(hardware) * node.multiplicity
        parts[part] += seconds
        if part == "fusions":
            bound = by_bound[fusion_bound(node.flops, node.hbm_bytes, hardware)]
            bound["seconds"] += seconds
            bound["count"] += node.multiplicity
    return {"seconds": sum(parts.values()), **{f"{k}_seconds": v for k, v in parts.items()},
            "fusions_by_bound": by_bound, "uncosted_nodes": uncosted}


def fusion_bound(flops: float, hbm_bytes: float, hardware: HardwareProfile) -> str:
    """`mxu` where work of `flops` and `hbm_bytes` takes longer on the MXU at its peak than on
    HBM at its bandwidth (a matmul fusion), else `hbm` (elementwise, reductions, copies)."""
    return "mxu" if flops / hardware.peak_bf16_flops > hbm_bytes / hardware.hbm_bandwidth_Bps else "hbm"
