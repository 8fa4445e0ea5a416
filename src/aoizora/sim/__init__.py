"""Reference simulator: event-driven, flow-level execution of one program on one placement.

Independent of the cost model Q2, so that Q2 can be validated against it. Entry point: `simulate`
(`aoizora.sim.simulation` says what the two share and what the simulator models on its own).
"""

from aoizora.sim.algorithms import best_ring_order, ring_direction
from aoizora.sim.network import FlowNetwork, max_min_rates
from aoizora.sim.result import CollectiveTiming, SimResult
from aoizora.sim.simulation import simulate, simulate_placements

__all__ = [
    "CollectiveTiming",
    "FlowNetwork",
    "SimResult",
    "best_ring_order",
    "max_min_rates",
    "ring_direction",
    "simulate",
    "simulate_placements",
]
