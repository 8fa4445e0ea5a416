"""Validation of Q2 against the reference simulator: compiled test programs and rank statistics."""

from aoizora.validation.compare import PairScore, ValidationReport, compare_scores

__all__ = ["PairScore", "ValidationReport", "compare_scores"]
