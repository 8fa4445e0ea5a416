"""Workload models the planner knows by name (Wan 2.1 first)."""
