"""A Wan strategy's order probe (`WanSpace.order_probe`): the same strategy at the blocks fitted to
libtpu's default scoped-VMEM limit, without the raised limit its searched tile needs."""

from __future__ import annotations

import dataclasses

from aoizora.models.registry import wan_space
from aoizora.models.wan.splash_tiles import fitted_splash_blocks


def _candidate(space, key_prefix: str, num_devices: int = 8):
    return next(c.strategy for c in space.candidates(num_devices)
                if c.key == key_prefix or c.key.startswith(key_prefix + " |"))


def test_a_strategy_under_a_raised_limit_is_probed_at_the_default_limit_with_fitted_blocks():
    space = wan_space("wan2.1-t2v-14b", "720p", 81, generation="v5e")
    strategy = _candidate(space, "fsdp=2,context=4 | weights=gathered | attn=allgather")
    assert strategy.scoped_vmem_kib is not None, "the tile search raised this strategy's limit"
    probe = space.order_probe(strategy)
    fitted = fitted_splash_blocks(strategy, space.video.tokens(space.config), space.batch, space.splash_max_block_q)
    assert probe == dataclasses.replace(strategy, splash_blocks=fitted, scoped_vmem_kib=None)
    assert probe.splash_blocks != strategy.splash_blocks
    assert space.compile_flags(probe) == "" and space.mesh_spec(probe) == space.mesh_spec(strategy)
    assert space.order_probe(probe) is None, "a strategy at the default limit is its own cheapest compile"


def test_a_space_without_fitted_blocks_has_no_probe():
    space = wan_space("wan2.1-t2v-1.3b", "480p", 5, generation=None)
    strategy = _candidate(space, "context=8 | weights=replicated | attn=allgather")
    assert space.order_probe(dataclasses.replace(strategy, scoped_vmem_kib=65536)) is None
