"""What one simulated execution reports."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True)
class CollectiveTiming:
    """Simulated timing of one collective of the program, over all its runs.

    A run lasts from the first member device issuing it to the delivery of its last transfer;
    ``wait_seconds`` is the time devices spent blocked on it (at the sync op or the ``-done``),
    averaged over the participating devices and summed over runs: its exposed share.
    """

    index: int
    name: str
    kind: str
    mode: str
    runs: int
    total_seconds: float
    mean_seconds: float
    max_seconds: float
    wait_seconds: float
    algorithm: str

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass(frozen=True)
class SimResult:
    """One execution of a program on one placement, as the reference simulator saw it.

    ``step_seconds`` is when the last device finished; ``compute_seconds`` the compute time of
    one device (every device runs the same SPMD program); ``exposed_comm_seconds`` the rest
    (communication not hidden under compute, plus waiting for slower devices).
    ``link_bytes[i]`` is the bytes carried by directed link ``topology.links[i]``.
    """

    step_seconds: float
    compute_seconds: float
    exposed_comm_seconds: float
    collectives: tuple[CollectiveTiming, ...]
    link_bytes: np.ndarray
    device_finish_seconds: dict[int, float]
    loops_extrapolated: dict[int, int]  # loop index -> iterations not walked but scaled
    events: int
    rate_solves: int
    warnings: tuple[str, ...] = ()
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def comm_seconds(self) -> float:
        """Sum of all collective run durations (overlapping or not)."""
        return sum(c.total_seconds for c in self.collectives)

    def to_json(self) -> dict[str, Any]:
        return {
            "step_seconds": self.step_seconds,
            "compute_seconds": self.compute_seconds,
            "exposed_comm_seconds": self.exposed_comm_seconds,
            "collectives": [c.to_json() for c in self.collectives],
            "link_bytes": self.link_bytes.tolist(),
            "loops_extrapolated": {str(k): v for k, v in self.loops_extrapolated.items()},
            "events": self.events,
            "rate_solves": self.rate_solves,
            "warnings": list(self.warnings),
            "options": dict(self.options),
        }
