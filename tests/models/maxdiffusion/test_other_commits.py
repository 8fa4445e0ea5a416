"""MaxDiffusion's step built from a checkout at another commit than the one aoizora's facts were
read at (the hardware suite compiles each entry's commit): overrides its config lacks are dropped
only where they set what that commit ran without them, and `WanModel`'s keyword arguments take the
commit's form. Needs no MaxDiffusion: the config keys and model signatures are given."""

from __future__ import annotations

import json

import pytest

from aoizora.errors import MaxDiffusionUnavailable
from aoizora.models.maxdiffusion import program
from aoizora.models.maxdiffusion.overrides import facts

CONFIG = "src/maxdiffusion/configs/base_wan_14b.yml"


def test_an_override_at_its_default_is_dropped_where_the_config_lacks_the_key():
    keys = set(facts()["configs"][CONFIG]["values"]) - {"ulysses_attention_chunks"}
    overrides = [("attention", "ulysses"), ("ulysses_attention_chunks", "1")]
    assert program.checkout_overrides(CONFIG, overrides, keys, "4e694ceb") == [("attention", "ulysses")]


def test_an_override_the_commit_cannot_honour_is_refused_in_one_line():
    keys = set(facts()["configs"][CONFIG]["values"]) - {"ulysses_attention_chunks"}
    with pytest.raises(MaxDiffusionUnavailable, match="4e694ceb has no 'ulysses_attention_chunks'.* 2"):
        program.checkout_overrides(CONFIG, [("ulysses_attention_chunks", "2")], keys, "4e694cebe7ab")


def test_a_key_the_config_has_is_kept_whatever_its_value():
    keys = set(facts()["configs"][CONFIG]["values"])
    overrides = [("ulysses_attention_chunks", "4"), ("height", "720")]
    assert program.checkout_overrides(CONFIG, overrides, keys | {"height"}, None) == overrides


def test_earlier_commits_get_the_dq_blocks_their_benchmark_set():
    keys = set(facts()["configs"][CONFIG]["values"])
    blocks = '{"block_q":2048,"block_kv":2048,"block_kv_compute":1024}'
    (key, value), = program.checkout_overrides(CONFIG, [("flash_block_sizes", blocks)], keys, "4e694ceb")
    assert key == "flash_block_sizes"
    assert json.loads(value) == {"block_q": 2048, "block_kv": 2048, "block_kv_compute": 1024, "block_q_dq": 2048,
                                 "block_kv_dq": 2048, "use_fused_bwd_kernel": False}
    picked = [("flash_block_sizes", "{}")]  # the kernel's own pick: nothing to complete
    assert program.checkout_overrides(CONFIG, picked, keys, None) == picked


class _Later:
    def __init__(self, mesh, attention_config, rngs=None):
        pass


class _Earlier:
    def __init__(self, mesh, use_base2_exp, use_experimental_scheduler, context_ulysses_parallelism=1, rngs=None):
        pass


class _Config:
    context_ulysses_parallelism = 2

    def __getattr__(self, key):  # pyconfig raises ValueError for a key its config lacks
        raise ValueError(f"Requested key {key}, not in config")


ARGS = {"mesh": "m", "attention_config": {"use_base2_exp": True, "use_experimental_scheduler": False,
                                          "ulysses_shards": -1, "ulysses_attention_chunks": 1}}


def test_a_model_taking_attention_config_gets_the_arguments_as_they_are():
    assert program._fit_signature(dict(ARGS), _Later, _Config()) == ARGS


def test_an_earlier_model_gets_attention_configs_entries_as_arguments_and_the_configs_2d_split():
    assert program._fit_signature(dict(ARGS), _Earlier, _Config()) == {
        "mesh": "m", "use_base2_exp": True, "use_experimental_scheduler": False, "context_ulysses_parallelism": 2}


def test_an_earlier_model_cannot_take_a_setting_it_did_not_have():
    args = {**ARGS, "attention_config": {**ARGS["attention_config"], "ulysses_attention_chunks": 4}}
    with pytest.raises(MaxDiffusionUnavailable, match="ulysses_attention_chunks"):
        program._fit_signature(args, _Earlier, _Config())


def test_an_earlier_commit_gets_the_2d_split_in_its_own_keys():
    keys = (set(facts()["configs"][CONFIG]["values"]) - {"ulysses_shards"}) | {"context_ulysses_parallelism",
                                                                                "context_ring_parallelism"}
    overrides = [("ici_context_parallelism", "4"), ("attention", "ulysses_ring"), ("ulysses_shards", "2")]
    assert program.checkout_overrides(CONFIG, overrides, keys, "4e694ceb") == [
        ("ici_context_parallelism", "4"), ("attention", "ulysses_ring"), ("context_ulysses_parallelism", "2"),
        ("context_ring_parallelism", "2")]
