"""Reference JAX programs used to validate and benchmark the planner beyond Wan."""
