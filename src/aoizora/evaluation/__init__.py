"""Evaluation the CLI runs: `aoizora bench` (the grids, the baselines and the oracle: `bench/`) and
`aoizora validate` (Q2's ranking of placements against the reference simulator: `validation/`).

This `__init__` imports nothing, so that the CLI starts without loading jax; import from
`aoizora.evaluation.bench` and `aoizora.evaluation.validation`.
"""
