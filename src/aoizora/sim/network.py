"""Flow-level ICI network: concurrent flows share directed links max-min fairly.

Why flow level: the simulator must capture *contention* (two collectives or two ring hops
crossing one directed link) without modelling packets. Between two events the set of flows is
fixed, so each flow moves at a constant rate; the rates are the max-min fair allocation,
computed by progressive filling and re-solved (lazily, once per timestamp) whenever a flow
starts or ends.
"""

from __future__ import annotations

import numpy as np

#: Relative tolerance under which two fair shares (or finish times) count as equal. It only
#: merges ties that floating point would otherwise split; it never changes a rate materially.
_REL_TOL = 1e-12


def max_min_rates(routes: list[tuple[int, ...]], capacity: np.ndarray) -> np.ndarray:
    """Max-min fair rates (bytes/s) of flows over directed links, by progressive filling.

    Every flow's rate rises together; when a link saturates, the flows crossing it are frozen
    at its fair share and the remaining capacity of their other links shrinks accordingly.
    Each route must be non-empty (on-chip transfers never enter the network).
    """
    n = len(routes)
    if n == 0:
        return np.zeros(0)
    # flow-link incidence as (flow, link) pairs: memory linear in the routes, not flows x links
    lengths = np.fromiter((len(r) for r in routes), dtype=np.int64, count=n)
    flow_of = np.repeat(np.arange(n), lengths)
    link_of = np.fromiter((l for r in routes for l in r), dtype=np.int64, count=int(lengths.sum()))
    used, link_of = np.unique(link_of, return_inverse=True)
    n_links = len(used)
    cap = capacity[used].astype(float)
    rates = np.zeros(n)
    active = np.ones(n, dtype=bool)
    while active.any():
        load = np.bincount(link_of, weights=active[flow_of].astype(float), minlength=n_links)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(load > 0, cap / np.where(load > 0, load, 1.0), np.inf)
        m = float(share.min())
        bottleneck = share <= m * (1.0 + _REL_TOL)
        frozen = np.zeros(n, dtype=bool)
        frozen[flow_of[bottleneck[link_of]]] = True
        frozen &= active
        rates[frozen] = m
        cap = np.maximum(cap - m * np.bincount(link_of, weights=frozen[flow_of].astype(float), minlength=n_links), 0.0)
        active &= ~frozen
    return rates


class FlowNetwork:
    """The set of in-flight flows, their remaining bytes and their current fair rates."""

    def __init__(self, capacity: np.ndarray):
        self.capacity = np.asarray(capacity, dtype=float)
        self._ids: list[int] = []
        self._routes: list[tuple[int, ...]] = []
        self._remaining = np.zeros(0)
        # bytes of the flows added since time last moved: appended in one copy when it next does,
        # not one array copy per flow (many flows start at one timestamp)
        self._added: list[float] = []
        self._rates = np.zeros(0)
        self._dirty = False
        self.solves = 0
        # The same sets of concurrent routes recur (every ring step, every loop iteration): a
        # bounded memo of solved allocations, keyed by the routes in order, saves most solves.
        self._memo: dict[tuple[tuple[int, ...], ...], np.ndarray] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, flow_id: int, route: tuple[int, ...], nbytes: float) -> None:
        """Start a flow of `nbytes` over `route` (rates are re-solved before time advances)."""
        self._ids.append(flow_id)
        self._routes.append(route)
        self._added.append(float(nbytes))
        self._dirty = True

    def _solve(self) -> None:
        if self._added:
            self._remaining = np.concatenate((self._remaining, self._added))
            self._added = []
        if self._dirty:
            key = tuple(self._routes)
            rates = self._memo.get(key)
            if rates is None:
                rates = max_min_rates(self._routes, self.capacity)
                self.solves += 1
                if len(self._memo) >= 4096:
                    self._memo.clear()
                self._memo[key] = rates
            self._rates = rates
            self._dirty = False

    def time_to_next_finish(self) -> float:
        """Seconds until the first in-flight flow finishes at current rates (inf if none)."""
        if not self._ids:
            return float("inf")
        self._solve()
        return float((self._remaining / self._rates).min())

    def advance(self, dt: float, slack: float = 0.0) -> list[int]:
        """Move every flow forward by `dt` seconds; remove and return the flows that finished.

        A flow finishes when what is left would take no longer than `dt` plus `slack` (the
        caller's notion of "the same instant") plus a rounding error of `dt`.
        """
        if not self._ids:
            return []
        self._solve()
        left = self._remaining / self._rates
        done = left <= dt * (1.0 + 1e-9) + slack + 1e-15
        self._remaining = self._remaining - self._rates * dt
        if not done.any():
            return []
        finished = [self._ids[i] for i in np.flatnonzero(done)]
        keep = ~done
        self._ids = [f for f, k in zip(self._ids, keep, strict=True) if k]
        self._routes = [r for r, k in zip(self._routes, keep, strict=True) if k]
        self._remaining = self._remaining[keep]
        self._rates = self._rates[keep]
        self._dirty = True
        return finished
