"""Reference JAX programs used to validate and benchmark the planner beyond Wan, with their
strategy spaces: `TransformerSpace` (a scanned transformer's strategies), `TransformerConfig`."""

from aoizora.workloads.transformer import TransformerConfig, lower
from aoizora.workloads.transformer_space import TransformerSpace, TransformerStrategy

__all__ = ["TransformerConfig", "TransformerSpace", "TransformerStrategy", "lower"]
