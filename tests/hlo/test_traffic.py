"""The one bandwidth-optimal traffic formula (aoizora.hlo.traffic)."""

from fractions import Fraction

import pytest

from aoizora.hlo.program import CollectiveKind as K
from aoizora.hlo.traffic import RingPhase, bytes_sent_per_device, ring_phases


@pytest.mark.parametrize("kind, expected", [
    (K.ALL_REDUCE, 2 * 7 * 1024 / 8), (K.ALL_GATHER, 7 * 1024), (K.REDUCE_SCATTER, 7 * 1024 / 8),
    (K.ALL_TO_ALL, 7 * 1024 / 8),
])
def test_one_ring_sends_the_textbook_bytes(kind, expected):
    assert bytes_sent_per_device(kind, 8, 1024.0) == expected


def test_exact_bytes_are_floored_whole_bytes():
    # 2·(n-1)·S/n with S = 6, n = 4 is 9 bytes, though each pass alone is 4.5
    assert int(bytes_sent_per_device(K.ALL_REDUCE, 4, Fraction(6))) == 9
    assert bytes_sent_per_device(K.ALL_GATHER, 1, Fraction(6)) == 0


def test_grid_phases_scatter_in_order_then_gather_in_reverse():
    phases = ring_phases(K.ALL_REDUCE, (2, 4), (1, 0), 64.0)
    assert phases == [RingPhase(1, 3, 16.0), RingPhase(0, 1, 8.0), RingPhase(0, 1, 8.0), RingPhase(1, 3, 16.0)]
    assert [p.dim for p in ring_phases(K.ALL_GATHER, (2, 4), (1, 0), 8.0)] == [0, 1]
    assert ring_phases(K.ALL_TO_ALL, (8,), (0,), 8.0) == []
