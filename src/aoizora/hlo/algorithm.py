"""libtpu's ``collective_algorithm_config``, read once into the typed fields Q2 and the simulator share.

libtpu 0.0.42.1 prints, in the backend config of every ring collective it emits, which emitter
and strategy it chose, e.g.::

    collective_algorithm_config={"emitter":"RotatedPincerEmitter",
        "debug":"\\nUniDirection1DRingStrategy{colors:2 phases:1 cores:{8} has_reordering_map:0}"}

`parse_algorithm_config` turns that into an `AlgorithmConfig` when the HLO is parsed. Besides
the names and every ``key:value`` of the free-form ``debug`` text, it carries the three facts a
link-level model reads from it, each decided here and nowhere else:

* ``direction`` (`RingDirection`): which way the rings run, when the names say so:

  - ``BiDirection...`` anywhere in the emitter or strategy names -> bidirectional;
  - a ``Pincer`` emitter (``RotatedPincerEmitter``, ``RotatedPincerShortEmitter``): ``colors:1``
    -> unidirectional (a one-armed pincer), otherwise bidirectional: the two colours are the two
    arms of the pincer, i.e. the data split in halves going opposite ways round the ring (this
    holds even when the strategy is named ``UniDirection1DRingStrategy{colors:2}``: each colour
    is a one-way ring, the pair is not);
  - ``UniDirection...`` or ``StrategyRing`` -> unidirectional;
  - anything else (``1DAllGatherNonMajorDim``, ``AllToAllEmitter``) -> None: the config names
    no direction and each model applies its default;

* ``grid``: the grid of an N-D strategy (``StrategyND``, ``UniDirectionNDRingStrategy``, any
  config with ``num_dims`` >= 2), from ``dim_sizes:a,b`` or else the first colour's
  ``cores:{a b}``; None for a 1-D strategy. Such a strategy runs one ring per grid dimension, in
  phases; ``dim_orders`` holds, per colour, the order it walks the dimensions
  (``dim_used:{0 1},{1 0}``). ``nd_ring`` tells an N-D *ring* strategy
  (``...NDRingStrategy``) from libtpu's ``StrategyND``;

* ``has_reordering_map``: the compiler keeps a map from the group's listed order to its own
  ring order (printed e.g. for ``1DAllGatherNonMajorDim`` all-gathers).

Every reading of a name is an assumption from the printed strings, not from libtpu's source;
the models expose the choices it feeds as switches (`RingOrder`, `RingDirection`).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


class RingDirection(enum.StrEnum):
    """Which way a ring collective's data moves."""

    UNIDIRECTIONAL = "unidirectional"  # one way round the ring
    BIDIRECTIONAL = "bidirectional"  # half of the data each way


class RingOrder(enum.StrEnum):
    """In which order a ring visits the members of its group. The values are the switch's one
    spelling: `--ring-order`, `Q2Options.ring_order`, `simulate(ring_order=...)` and plans."""

    LISTED = "listed"  # the replica group's listed order
    BEST = "best"  # the order over the members with the least loaded bottleneck link
    REORDERING_MAP = "reordering-map"  # BEST where the config has a reordering map, LISTED elsewhere

    def reorders(self, algorithm: AlgorithmConfig | None) -> bool:
        """Whether a collective compiled with `algorithm` takes the best order under this choice."""
        if self is RingOrder.REORDERING_MAP:
            return bool(algorithm is not None and algorithm.has_reordering_map)
        return self is RingOrder.BEST


def resolve_direction(forced: RingDirection | None, algorithm: AlgorithmConfig | None,
                      default: RingDirection) -> RingDirection:
    """The direction a model uses: `forced` when given, else the config's, else `default`."""
    if forced is not None:
        return forced
    if algorithm is not None and algorithm.direction is not None:
        return algorithm.direction
    return default


_KEY_VALUE = re.compile(r"([A-Za-z_][\w]*)\s*(?:=|:)\s*(\{[^{}]*\}|[^\s,;{}]+)")
_STRATEGY = re.compile(r"([A-Za-z_]\w*)\{")
_BIDIRECTIONAL = re.compile(r"bi-?direction", re.IGNORECASE)
_UNIDIRECTIONAL = re.compile(r"uni-?direction|strategyring", re.IGNORECASE)
_DIM_SIZES = re.compile(r"dim_sizes:\s*([0-9,\s]+?)(?:\s+[a-z_]+:|\}|$)")
_NUM_DIMS = re.compile(r"num_dims:\s*(\d+)")
_DIM_USED = re.compile(r"dim_used:\s*((?:\{[0-9\s]+\},?)+)")


@dataclass(frozen=True, slots=True)
class AlgorithmConfig:
    """The compiler's choice of collective algorithm (``collective_algorithm_config``).

    ``fields`` holds every ``key: value`` / ``key=value`` / ``key:value`` found in the free-form
    ``debug`` text (e.g. ``colors``, ``phases``, ``group_size``, ``shard_size``). ``direction``,
    ``grid``, ``nd_ring`` and ``dim_orders`` are derived from the names and the ``debug`` text
    when the config is built (rules in the module docstring).
    """

    emitter: str | None
    strategy: str | None
    strategies: tuple[str, ...]
    colors: int | None
    phases: int | None
    has_reordering_map: bool | None
    is_multistep: bool | None
    fields: Mapping[str, str]
    raw: Mapping[str, Any]
    direction: RingDirection | None = field(init=False)
    grid: tuple[int, ...] | None = field(init=False)
    nd_ring: bool = field(init=False)
    dim_orders: tuple[tuple[int, ...], ...] = field(init=False)

    def __post_init__(self) -> None:
        debug = self.raw.get("debug", "") if isinstance(self.raw, Mapping) else ""
        debug = debug if isinstance(debug, str) else ""
        strategy_names = " ".join(n for n in (self.strategy, *self.strategies) if n)
        object.__setattr__(self, "direction", _named_direction(self.emitter, strategy_names, self.colors))
        object.__setattr__(self, "grid", _strategy_grid(strategy_names, debug, self.fields))
        object.__setattr__(self, "nd_ring", "ndring" in strategy_names.lower())
        object.__setattr__(self, "dim_orders", _dim_orders(debug))

    def grid_of(self, group_size: int) -> tuple[int, ...] | None:
        """The N-D grid when it lays out a group of `group_size` members, else None (one ring)."""
        if self.grid is not None and math.prod(self.grid) == group_size:
            return self.grid
        return None

    def dim_orders_of(self, ndims: int) -> tuple[tuple[int, ...], ...]:
        """Per colour, its order over `ndims` grid dimensions; one colour in order by default."""
        identity = tuple(range(ndims))
        orders = tuple(o for o in self.dim_orders if sorted(o) == list(identity))
        return orders or (identity,)

    def to_json(self) -> dict[str, Any]:
        """JSON-ready dict (the raw backend config is left out: it is in the HLO text)."""
        return {
            "emitter": self.emitter,
            "strategy": self.strategy,
            "strategies": list(self.strategies),
            "colors": self.colors,
            "phases": self.phases,
            "has_reordering_map": self.has_reordering_map,
            "is_multistep": self.is_multistep,
            "fields": dict(self.fields),
        }


def parse_algorithm_config(cfg: Mapping[str, Any] | None) -> AlgorithmConfig | None:
    """The typed config of a ``collective_algorithm_config`` mapping; None when it is empty."""
    if not cfg:
        return None
    debug = str(cfg.get("debug", ""))
    fields: dict[str, str] = {}
    for m in _KEY_VALUE.finditer(debug):
        fields.setdefault(m.group(1), m.group(2))
    for key, val in cfg.items():
        if key != "debug" and isinstance(val, (str, int, float, bool)):
            fields.setdefault(key, str(val))
    return AlgorithmConfig(
        emitter=cfg.get("emitter"),
        strategy=cfg.get("strategy"),
        strategies=tuple(_STRATEGY.findall(debug)),
        colors=_int_field(fields, "colors", "color_count"),
        phases=_int_field(fields, "phases", "phase_count"),
        has_reordering_map=_bool_field(fields, "has_reordering_map"),
        is_multistep=_bool_field(fields, "is_multistep"),
        fields=fields,
        raw=cfg,
    )


def _int_field(fields: Mapping[str, str], *keys: str) -> int | None:
    for key in keys:
        value = fields.get(key)
        if value is not None:
            try:
                return int(value)
            except ValueError:
                pass
    return None


def _bool_field(fields: Mapping[str, str], key: str) -> bool | None:
    value = fields.get(key)
    return None if value is None else value.lower() in ("1", "true")


def _named_direction(emitter: str | None, strategy_names: str, colors: int | None) -> RingDirection | None:
    names = " ".join(n for n in (emitter, strategy_names) if n)
    if _BIDIRECTIONAL.search(names):
        return RingDirection.BIDIRECTIONAL
    if "pincer" in names.lower():
        return RingDirection.UNIDIRECTIONAL if colors == 1 else RingDirection.BIDIRECTIONAL
    if _UNIDIRECTIONAL.search(names):
        return RingDirection.UNIDIRECTIONAL
    return None


def _strategy_grid(strategy_names: str, debug: str, fields: Mapping[str, str]) -> tuple[int, ...] | None:
    num_dims = _NUM_DIMS.search(debug)
    if "ND" not in strategy_names and not (num_dims and int(num_dims.group(1)) >= 2):
        return None
    printed = _DIM_SIZES.search(debug)
    text = printed.group(1) if printed else fields.get("dim_sizes") or fields.get("cores", "")
    sizes = tuple(int(t) for t in re.findall(r"\d+", text))
    return sizes if len(sizes) >= 2 else None


def _dim_orders(debug: str) -> tuple[tuple[int, ...], ...]:
    used = _DIM_USED.search(debug)
    if used is None:
        return ()
    return tuple(tuple(int(v) for v in block.split()) for block in re.findall(r"\{([0-9\s]+)\}", used.group(1)))
