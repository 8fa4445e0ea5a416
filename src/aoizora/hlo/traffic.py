"""Bandwidth-optimal traffic of a collective on each device: the one formula of the package.

The parser's per-device send/receive figures (`Collective.send_bytes`), Q2's link loads and the
simulator's transfers all come from here. A ring collective over a grid of group members (one
dimension for a 1-D ring) runs in phases, one ring pass per grid dimension:

* reduce-scatter along each dimension in turn: every step a device sends 1/n of what it holds
  (n members on the ring), n - 1 steps, after which it holds 1/n of it;
* all-gather along each dimension, in the reverse order: every step a device sends what it
  holds, n - 1 steps, after which it holds n times as much;
* all-reduce: the reduce-scatter phases, then the all-gather phases.

On one ring of n members that is (n-1)/n·S per device for a reduce-scatter of S bytes, (n-1)·S
for an all-gather of an S-byte shard and 2·(n-1)/n·S for an all-reduce. An all-to-all sends
1/n of its S bytes to each of the other n - 1 members directly.

Byte counts take any number type: floats for the models, `fractions.Fraction` for exact whole
bytes (the parser floors the exact figure).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Generic, TypeVar

from aoizora.hlo.program import CollectiveKind

Bytes = TypeVar("Bytes", float, Fraction)

_SCATTERS = (CollectiveKind.REDUCE_SCATTER, CollectiveKind.ALL_REDUCE)
_GATHERS = (CollectiveKind.ALL_GATHER, CollectiveKind.ALL_REDUCE)


@dataclass(frozen=True, slots=True)
class RingPhase(Generic[Bytes]):
    """One ring pass along one grid dimension (every ring of that dimension at once)."""

    dim: int  # the grid dimension the rings run along
    steps: int  # ring steps: members on the ring - 1
    bytes_per_step: Bytes  # bytes each device sends per step (both directions together)


def ring_phases(kind: CollectiveKind, grid: Sequence[int], dim_order: Sequence[int],
                held: Bytes) -> list[RingPhase[Bytes]]:
    """The phases of a ring collective on `grid`, reduce-scatter phases walking `dim_order`.

    `held`: bytes each device holds when the collective starts (its shard for an all-gather, its
    whole input for a reduce-scatter or an all-reduce). Not a ring collective: no phases.
    """
    phases: list[RingPhase[Bytes]] = []
    if kind in _SCATTERS:
        for d in dim_order:
            phases.append(RingPhase(d, grid[d] - 1, held / grid[d]))
            held = held / grid[d]
    if kind in _GATHERS:
        for d in reversed(dim_order):
            phases.append(RingPhase(d, grid[d] - 1, held))
            held = held * grid[d]
    return phases


def all_to_all_chunk(members: int, held: Bytes) -> Bytes:
    """Bytes an all-to-all device sends to each other member of its group."""
    return held / members


def bytes_sent_per_device(kind: CollectiveKind, members: int, held: Bytes) -> Bytes:
    """Bytes each device of a one-ring group of `members` sends (what it receives is the same).

    Collective-permute is not a group collective: a device sends `held` per pair it sources.
    """
    if kind is CollectiveKind.ALL_TO_ALL:
        return (members - 1) * all_to_all_chunk(members, held)
    phases = ring_phases(kind, (members,), (0,), held)
    return sum((p.steps * p.bytes_per_step for p in phases), held * 0)
