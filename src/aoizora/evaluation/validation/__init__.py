"""Validation of Q2 against the reference simulator: compiled test programs and rank statistics."""

from aoizora.evaluation.validation.compare import PairScore, ValidationReport, compare_scores
from aoizora.evaluation.validation.programs import NamedProgram, default_suite
from aoizora.evaluation.validation.rank import check_program_mesh, rank_placements, simulator_options, validate

__all__ = [
    "NamedProgram", "PairScore", "ValidationReport", "check_program_mesh", "compare_scores", "default_suite",
    "rank_placements", "simulator_options", "validate",
]
