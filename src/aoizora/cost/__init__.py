"""Q2: the topology-aware, contention-aware cost model of a compiled program on a placement."""

from aoizora.cost.algorithms import Q2Options
from aoizora.cost.model import CollectiveEstimate, CostModel, Q2Result

__all__ = ["CollectiveEstimate", "CostModel", "Q2Options", "Q2Result"]
