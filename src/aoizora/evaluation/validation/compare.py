"""Rank agreement of two latency predictors over (program, placement) pairs."""

from __future__ import annotations

import math
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
        """Strict JSON: an undefined statistic is null, and `undefined` says why (statistic -> reason)."""
        q2, ref = [p.q2_seconds for p in self.pairs], [p.reference_seconds for p in self.pairs]
        pooled_reason = undefined_rank_reason(q2, ref)
        doc: dict[str, Any] = {
            "pairs": len(self.pairs),
            "spearman": self.spearman,
            "kendall": self.kendall,
            "top1_agreement": self.top1_agreement,
            "max_regret": self.max_regret,
            "mean_within_program_spearman": self.mean_within_program_spearman,
            "per_program": {},
        }
        reasons = {
            "spearman": pooled_reason, "kendall": pooled_reason,
            "top1_agreement": "no programs", "max_regret": "no programs",
            "mean_within_program_spearman": "no program has a defined Spearman rho (each ties)",
        }
        for name, row in self.per_program.items():
            mine = [p for p in self.pairs if p.program == name]
            reason = undefined_rank_reason([p.q2_seconds for p in mine], [p.reference_seconds for p in mine])
            doc["per_program"][name] = _with_reasons(dict(row), {"spearman": reason, "kendall": reason})
        return _with_reasons(doc, reasons)


def _with_reasons(doc: dict[str, Any], reasons: dict[str, str | None]) -> dict[str, Any]:
    """`doc` with non-finite statistics as null, and an `undefined` map saying why each is."""
    undefined = {}
    for key, reason in reasons.items():
        value = doc.get(key)
        if isinstance(value, float) and not math.isfinite(value):
            doc[key] = None
            undefined[key] = reason or "not a finite number"
    if undefined:
        doc["undefined"] = undefined
    return doc


def undefined_rank_reason(q2: Sequence[float], ref: Sequence[float]) -> str | None:
    """Why a rank correlation of `q2` against `ref` is undefined (None when it is defined)."""
    if len(q2) < 2:
        return f"{len(q2)} pair(s): a rank correlation needs at least 2"
    if np.ptp(q2) == 0:
        return f"all {len(q2)} placements tie under Q2 (a rank correlation needs two distinct values)"
    if np.ptp(ref) == 0:
        return f"all {len(ref)} placements tie under the reference (a rank correlation needs two distinct values)"
    return None


def _rank_stats(q2: Sequence[float], ref: Sequence[float]) -> tuple[float, float]:
    if undefined_rank_reason(q2, ref) is not None:
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
