"""How Q2 reads the compiler's collective algorithm: ring direction, ring order and ring grid.

The config is parsed once, with the simulator, into `aoizora.hlo.AlgorithmConfig` (rules and
evidence in `aoizora.hlo.algorithm`). Q2's own choices on top of it:
- a config that names no direction (all-gather emitters, no config) is taken as bidirectional,
  the ICI default of the textbook costs;
- only N-D *ring* strategies (``...NDRingStrategy``) are costed in phases, one ring pass per grid
  dimension; libtpu's ``StrategyND`` is costed as one ring over the group's listed order.
Each assumption the compiler's text cannot settle is a switch of `Q2Options`, never a hidden
constant.
"""

from __future__ import annotations

from dataclasses import dataclass

from aoizora.errors import CostModelOptionError
from aoizora.hlo.algorithm import AlgorithmConfig, RingDirection, RingOrder, resolve_direction

# The user-facing spelling of the direction switch (CLI `--ring-direction`, plan files); the ring
# order is spelled as its `RingOrder` value everywhere.
_RING_DIRECTIONS = {"auto": None, "uni": RingDirection.UNIDIRECTIONAL, "bi": RingDirection.BIDIRECTIONAL}


@dataclass(frozen=True)
class Q2Options:
    """Switches for the assumptions Q2 makes about what the compiler does.

    ring_order: a `RingOrder` value: `listed` rings follow the replica group's order; `best` rings
        take the order over the member chips with the least loaded bottleneck link;
        `reordering-map` uses `best` where the compiler reports a reordering map and `listed`
        elsewhere.
    ring_direction: `uni` one ring direction, `bi` half the data each way, `auto` from the config
        (two colours or a bidirectional strategy -> bi; unidirectional with one colour -> uni;
        no direction named -> bi, the ICI default of the textbook costs).
    """

    ring_order: str = RingOrder.REORDERING_MAP.value
    ring_direction: str = "auto"

    def __post_init__(self) -> None:
        if self.ring_order not in tuple(RingOrder):
            raise CostModelOptionError(f"ring_order must be one of {', '.join(RingOrder)}, not {self.ring_order!r}")
        if self.ring_direction not in _RING_DIRECTIONS:
            raise CostModelOptionError(f"ring_direction must be one of {', '.join(_RING_DIRECTIONS)}, "
                             f"not {self.ring_direction!r}")

    @property
    def order(self) -> RingOrder:
        """The ring-order switch as the enum Q2 and the simulator share."""
        return RingOrder(self.ring_order)

    @property
    def direction(self) -> RingDirection | None:
        """The forced ring direction, or None to read it from each collective's config."""
        return _RING_DIRECTIONS[self.ring_direction]


def ring_is_bidirectional(algorithm: AlgorithmConfig | None, options: Q2Options) -> bool:
    """Whether the collective's rings carry half of the data each way."""
    direction = resolve_direction(options.direction, algorithm, default=RingDirection.BIDIRECTIONAL)
    return direction is RingDirection.BIDIRECTIONAL


def ring_dims(algorithm: AlgorithmConfig | None, group_size: int) -> tuple[int, ...]:
    """Grid Q2 lays a group on: an N-D ring strategy's grid when it fits the group (one ring per
    dimension, in phases; the listed order laid row-major on the grid), else one 1-D ring."""
    grid = algorithm.grid_of(group_size) if algorithm is not None and algorithm.nd_ring else None
    return grid or (group_size,)


def ring_dim_orders(algorithm: AlgorithmConfig | None, ndims: int) -> tuple[tuple[int, ...], ...]:
    """Per colour, the order in which an N-D strategy walks its `ndims` dimensions.

    libtpu prints e.g. `dim_used:{0 1},{1 0},{0 1},{1 0}`: four colours, half of them walking the
    dimensions the other way round, so the phases of different colours load different links at
    once. Each colour carries an equal share of the data. Default: one colour, dimensions in order.
    """
    if algorithm is None:
        return (tuple(range(ndims)),)
    return algorithm.dim_orders_of(ndims)
