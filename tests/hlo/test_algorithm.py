"""The typed collective algorithm config Q2 and the simulator share (aoizora.hlo.algorithm)."""

import pytest

from aoizora.hlo.algorithm import RingDirection, RingOrder, parse_algorithm_config, resolve_direction

# printed by libtpu 0.0.42.1 for a 16-device psum on v5e:4x4
ND_RING = {"emitter": "RotatedPincerEmitter",
           "debug": "\nUniDirectionNDRingStrategy{colors:4 phases:2 cores:{4 4},{4 4},{4 4},{4 4} nophase0:0 "
                    "reserved_sflags:1 has_reordering_map:0 num_dims:2 active_dims:111 dim_sizes:4,4 "
                    "dim_used:{0 1},{1 0},{0 1},{1 0}}"}
STRATEGY_ND = {"emitter": "RotatedPincerShortEmitter",
               "debug": "\nStrategyND{colors:2 phases:2 cores:{4 4},{4 4} nophase0:0 num_dims:2 "
                        "active_dims:111 dim_sizes:4,4 dim_used:{0 1},{1 0} use_ndnway:0}"}


@pytest.mark.parametrize("emitter, debug, expected", [
    ("RotatedPincerEmitter", "\nUniDirection1DRingStrategy{colors:2 phases:1 cores:{8} has_reordering_map:0}",
     RingDirection.BIDIRECTIONAL),  # the two colours are the pincer's two arms
    ("RotatedPincerShortEmitter", "\nStrategyRing{colors:1 phases:1 cores:{4} has_reordering_map:0}",
     RingDirection.UNIDIRECTIONAL),
    ("RotatedPincerEmitter", "colors:1", RingDirection.UNIDIRECTIONAL),  # a one-armed pincer
    ("SomeEmitter", "\nBiDirection1DRingStrategy{colors:1}", RingDirection.BIDIRECTIONAL),
    ("1DAllGatherNonMajorDim", "\nhas_reordering_map: true \n", None),  # names no direction
    ("AllToAllEmitter", "", None),
])
def test_direction_is_read_from_the_names(emitter, debug, expected):
    assert parse_algorithm_config({"emitter": emitter, "debug": debug}).direction == expected


def test_an_nd_ring_strategy_carries_its_grid_and_colour_orders():
    cfg = parse_algorithm_config(ND_RING)
    assert cfg.grid == (4, 4) and cfg.nd_ring and cfg.colors == 4
    assert cfg.grid_of(16) == (4, 4) and cfg.grid_of(8) is None
    assert cfg.dim_orders_of(2) == ((0, 1), (1, 0), (0, 1), (1, 0))
    assert cfg.dim_orders_of(1) == ((0,),)  # no printed order fits one dimension: the default


def test_strategy_nd_has_a_grid_but_is_not_a_ring_strategy():
    cfg = parse_algorithm_config(STRATEGY_ND)
    assert cfg.grid == (4, 4) and not cfg.nd_ring
    one_d = parse_algorithm_config({"emitter": "RotatedPincerEmitter",
                                    "debug": "\nStrategyRing{colors:2 phases:1 cores:{4}}"})
    assert one_d.grid is None and one_d.dim_orders_of(1) == ((0,),)


def test_ring_order_and_direction_switches():
    mapped = parse_algorithm_config({"emitter": "1DAllGatherNonMajorDim", "debug": "has_reordering_map: true"})
    plain = parse_algorithm_config(ND_RING)
    assert RingOrder.REORDERING_MAP.reorders(mapped) and not RingOrder.REORDERING_MAP.reorders(plain)
    assert not RingOrder.REORDERING_MAP.reorders(None)
    assert RingOrder.BEST.reorders(plain) and not RingOrder.LISTED.reorders(mapped)
    uni, bi = RingDirection.UNIDIRECTIONAL, RingDirection.BIDIRECTIONAL
    assert resolve_direction(uni, plain, bi) is uni  # forced
    assert resolve_direction(None, parse_algorithm_config(STRATEGY_ND), uni) is bi  # from the config
    assert resolve_direction(None, mapped, uni) is uni and resolve_direction(None, None, bi) is bi  # default
