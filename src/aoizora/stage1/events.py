"""Value events: what the sharding propagator reports about the values of the program it walks.

Why: the propagator (`propagate.py`) decides shardings and collectives and knows nothing about
buffers; the HBM model (`hbm.py`) decides buffers and knows nothing about shardings. Between
them is this stream, in program order (nested regions inside the op that walks them):

* `RegionEntered`: a region starts; its arguments are born with their per-device bytes;
* `OpStarted`: an op starts and reads its operands (per-device bytes as the op reads them);
* `CollectiveIssued`: a collective the op needs (or, after the entry region, the program's
  results need): what it reads and what it produces, per device, and why it exists;
* `OpFinished`: the op's results are born (per-device bytes under the sharding they got);
* `RegionLeft`: the region ends; what it still holds dies there if it reached its return.

Where a value dies inside a region, and whether it is written to HBM at all, is not an event:
it follows from fusion (`fusion.py`), which is the HBM model's business. The stream is plain
data (named tuples: a Wan program emits some 10^5 events, which must cost little), so the memory
model can be tested by feeding it events by hand.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from aoizora.stage1.ir import Op, Region


class Value(NamedTuple):
    """One value as the propagator sees it."""

    id: int
    bytes: float  # per device, under the sharding the propagator gave it
    # made from parameters alone (a parameter, a loop invariant, a slice or layout change of one):
    # available before any compute of its region, so the scheduler may fetch it ahead
    prefetchable: bool = False


# Why a collective exists: `reshard` gives an operand (or a result) the sharding its reader needs;
# `request` reshards a contraction's operand toward what a constraint on its result requests
# (see `hints.py`); `sharded-reduce` sums a reduction over a sharded dimension; `written` is a
# collective written in the program.
CollectiveCause = Literal["reshard", "request", "sharded-reduce", "written"]


class RegionEntered(NamedTuple):
    region: Region
    args: tuple[Value, ...]


class OpStarted(NamedTuple):
    op: Op
    operands: tuple[Value, ...]


class CollectiveIssued(NamedTuple):
    kind: str  # all-gather, all-reduce, reduce-scatter, all-to-all, collective-permute, ...
    payload_bytes: float  # per device: what it reads
    result_bytes: float  # per device: what it produces
    cause: CollectiveCause


class OpFinished(NamedTuple):
    op: Op
    results: tuple[Value, ...]


class RegionLeft(NamedTuple):
    returned: bool  # the walk reached the region's return op


ValueEvent = RegionEntered | OpStarted | CollectiveIssued | OpFinished | RegionLeft
