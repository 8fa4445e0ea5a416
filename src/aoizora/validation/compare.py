"""Rank agreement of two latency predictors over (program, placement) pairs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class PairScore:
    """One (program, placement) pair scored by Q2 and by the reference (simulator or measurement)."""

    program: str
    placement: str
    q2_seconds: float
    reference_seconds: float


@dataclass
class ValidationReport:
    """Spearman rho and Kendall tau over all pairs, and per program the top-1 agreement and regret.

    Regret: how much slower (under the reference) Q2's chosen placement is than the reference's
    best, as a fraction of the best. Ranking is only meaningful among placements of one program,
    so top-1 and regret are per program; rho and tau are reported both pooled and per program.
    """

    pairs: list[PairScore]
    spearman: float
    kendall: float
    per_program: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def top1_agreement(self) -> float:
        vals = [p["top1"] for p in self.per_program.values()]
        return float(np.mean(vals)) if vals else float("nan")

    @property
    def max_regret(self) -> float:
        return max((p["regret"] for p in self.per_program.values()), default=float("nan"))

    @property
    def mean_within_program_spearman(self) -> float:
        vals = [p["spearman"] for p in self.per_program.values() if not np.isnan(p["spearman"])]
        return float(np.mean(vals)) if vals else float("nan")

    def to_json(self) -> dict[str, Any]:
        return {
            "pairs": len(self.pairs),
            "spearman": self.spearman,
            "kendall": self.kendall,
            "top1_agreement": self.top1_agreement,
            "max_regret": self.max_regret,
            "mean_within_program_spearman": self.mean_within_program_spearman,
            "per_program": self.per_program,
        }


def _rank_stats(q2: Sequence[float], ref: Sequence[float]) -> tuple[float, float]:
    if len(q2) < 2 or np.ptp(q2) == 0 or np.ptp(ref) == 0:
        return float("nan"), float("nan")
    return float(stats.spearmanr(q2, ref).statistic), float(stats.kendalltau(q2, ref).statistic)


def compare_scores(pairs: Sequence[PairScore], *, tie_tolerance: float = 1e-9) -> ValidationReport:
    """Rank statistics of Q2 against the reference over `pairs`.

    Top-1 counts as agreement when Q2's choice is within `tie_tolerance` (relative) of the
    reference's best: placements that tie under the reference are equally good choices.
    """
    pairs = list(pairs)
    rho, tau = _rank_stats([p.q2_seconds for p in pairs], [p.reference_seconds for p in pairs])
    per_program: dict[str, dict[str, float]] = {}
    for name in dict.fromkeys(p.program for p in pairs):
        mine = [p for p in pairs if p.program == name]
        chosen = min(mine, key=lambda p: p.q2_seconds)
        best = min(p.reference_seconds for p in mine)
        regret = chosen.reference_seconds / best - 1 if best > 0 else 0.0
        r, t = _rank_stats([p.q2_seconds for p in mine], [p.reference_seconds for p in mine])
        per_program[name] = {
            "placements": len(mine),
            "spearman": r,
            "kendall": t,
            "top1": float(regret <= tie_tolerance),
            "regret": regret,
            "reference_spread": max(p.reference_seconds for p in mine) / best if best > 0 else 1.0,
        }
    return ValidationReport(pairs, rho, tau, per_program)
