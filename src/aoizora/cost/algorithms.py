"""How Q2 reads the compiler's collective algorithm: ring direction and ring order.

Evidence from libtpu 0.0.42.1 on v5e (see README, "What the compiler decides"):
- all-reduce prints `RotatedPincerEmitter` with `UniDirection1DRingStrategy{colors:2 ...
  has_reordering_map:0}`: a pincer with two colours, read here as two rings running in opposite
  directions over the group's listed order, each carrying half of the data (bidirectional);
- all-gather prints `1DAllGatherNonMajorDim ... has_reordering_map: true`: the compiler keeps a map
  from the listed order to its own ring, read here as "the compiler picks the ring order".
Both readings are assumptions; they are switches of `Q2Options`, never hidden constants.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from aoizora.hlo.program import AlgorithmConfig

RingOrder = Literal["auto", "listed", "best"]
RingDirection = Literal["auto", "uni", "bi"]


@dataclass(frozen=True)
class Q2Options:
    """Switches for the assumptions Q2 makes about what the compiler does.

    ring_order: `listed` rings follow the replica group's order; `best` rings take the order over
        the member chips with the least loaded bottleneck link; `auto` uses `best` where the
        compiler reports a reordering map and `listed` elsewhere.
    ring_direction: `uni` one ring direction, `bi` half the data each way, `auto` from the config
        (two colours or a bidirectional strategy -> bi; unidirectional with one colour -> uni;
        no config -> bi, the ICI default of the textbook costs).
    """

    ring_order: RingOrder = "auto"
    ring_direction: RingDirection = "auto"


def ring_is_bidirectional(algorithm: AlgorithmConfig | None, options: Q2Options) -> bool:
    """Pincer emitters with two or more colours and `BiDirection` strategies run both ways;
    `UniDirection`/`StrategyRing` with one colour run one way; anything else (no config,
    all-gather emitters that name no direction) is taken as bidirectional."""
    if options.ring_direction != "auto":
        return options.ring_direction == "bi"
    if algorithm is None:
        return True
    names = " ".join(n for n in (algorithm.emitter, algorithm.strategy, *algorithm.strategies) if n).lower()
    if "bidirection" in names or ("pincer" in names and (algorithm.colors or 0) != 1):
        return True
    if "unidirection" in names or "strategyring" in names:
        return False
    return True


def ring_dim_orders(algorithm: AlgorithmConfig | None, ndims: int) -> list[tuple[int, ...]]:
    """Per colour, the order in which an N-D strategy walks its dimensions.

    libtpu prints e.g. `dim_used:{0 1},{1 0},{0 1},{1 0}`: four colours, half of them walking the
    dimensions the other way round, so the phases of different colours load different links at
    once. Each colour carries an equal share of the data. Default: one colour, dimensions in order.
    """
    debug = algorithm.raw.get("debug", "") if algorithm is not None and isinstance(algorithm.raw, dict) else ""
    orders: list[tuple[int, ...]] = []
    if isinstance(debug, str) and "dim_used:" in debug:
        tail = debug.split("dim_used:", 1)[1]
        for block in tail.split("}"):
            block = block.strip().lstrip(",").strip()
            if not block.startswith("{"):
                break
            order = tuple(int(t) for t in block[1:].split() if t.isdigit())
            if sorted(order) == list(range(ndims)):
                orders.append(order)
    return orders or [tuple(range(ndims))]


def ring_dims(algorithm: AlgorithmConfig | None, group_size: int) -> tuple[int, ...]:
    """Grid the compiler lays a group on: `NDRingStrategy` with `cores:{a b}` runs one ring per
    dimension in phases (the listed order laid row-major on the grid); otherwise one 1-D ring."""
    if algorithm is None:
        return (group_size,)
    names = " ".join(n for n in (algorithm.strategy, *algorithm.strategies) if n).lower()
    cores = algorithm.fields.get("cores", "")
    dims = tuple(int(t) for t in cores.strip("{}").split() if t.isdigit())
    if "ndring" in names and len(dims) > 1 and math.prod(dims) == group_size:
        return dims
    return (group_size,)


def ring_is_reordered(algorithm: AlgorithmConfig | None, options: Q2Options) -> bool:
    if options.ring_order != "auto":
        return options.ring_order == "best"
    return bool(algorithm is not None and algorithm.has_reordering_map)
