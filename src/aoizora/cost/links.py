"""Link loads: route incidence of a slice, cached, so a traffic matrix maps to link bytes in one product."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from aoizora.topology import Topology


@dataclass(frozen=True)
class Incidence:
    """Routes of every device pair as a sparse (N*N, links) 0/1 matrix; rows are `src * N + dst`.

    Devices are numbered 0..N-1 by `row` (device id -> row index); `hops[i, j]` counts links.
    `bandwidth[l]` is link l's one-way bandwidth (ICI and D2D links differ), `weight[l]` its time
    per byte relative to an ICI link (1 for ICI, less for a faster D2D link).
    """

    matrix: sp.csr_matrix
    hops: np.ndarray
    row: dict[int, int]
    bandwidth: np.ndarray
    weight: np.ndarray

    @property
    def num_devices(self) -> int:
        return self.hops.shape[0]

    def link_loads(self, traffic: np.ndarray) -> np.ndarray:
        """Bytes on each directed link for an (N, N) matrix of bytes sent from row i to row j."""
        return self.matrix.T @ traffic.ravel()

    def link_seconds(self, loads: np.ndarray) -> np.ndarray:
        """Seconds each directed link needs to carry `loads` bytes at its own bandwidth."""
        return loads / self.bandwidth


_CACHE: dict[str, Incidence] = {}


def incidence(topology: Topology) -> Incidence:
    """The route incidence of a slice (cached per slice and core-to-ICI assumption)."""
    hit = _CACHE.get(topology.route_key)
    if hit is not None:
        return hit
    ids = sorted(topology.positions)
    row = {d: k for k, d in enumerate(ids)}
    n = len(ids)
    rows: list[int] = []
    cols: list[int] = []
    hops = np.zeros((n, n), dtype=np.int64)
    for a in ids:
        for b in ids:
            route = topology.device_route(a, b)
            rows.extend([row[a] * n + row[b]] * len(route))
            cols.extend(route)
            hops[row[a], row[b]] = len(route)
    data = np.ones(len(rows), dtype=np.float64)
    matrix = sp.csr_matrix((data, (rows, cols)), shape=(n * n, len(topology.links)))
    bandwidth = np.array([l.bandwidth_Bps for l in topology.links], dtype=float)
    weight = np.array(topology.link_time_weights, dtype=float)
    result = Incidence(matrix, hops, row, bandwidth, weight)
    _CACHE[topology.route_key] = result
    return result
