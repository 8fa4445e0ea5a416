"""The compile cache on its own: keys, refusals, corrupt entries."""

import gzip

import pytest

from aoizora.plan.compile_cache import CompileCache, CompileRecord

TOOLCHAIN = {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1"}


def test_key_covers_program_device_order_slice_toolchain_and_flags(tmp_path, monkeypatch):
    cache = CompileCache(tmp_path)
    base = cache.key("module", "v5e:2x2", [0, 1, 2, 3], TOOLCHAIN)
    assert base == cache.key("module", "v5e:2x2", [0, 1, 2, 3], TOOLCHAIN)
    others = {
        cache.key("module'", "v5e:2x2", [0, 1, 2, 3], TOOLCHAIN),
        cache.key("module", "v5e:2x4", [0, 1, 2, 3], TOOLCHAIN),
        cache.key("module", "v5e:2x2", [1, 0, 2, 3], TOOLCHAIN),
        cache.key("module", "v5e:2x2", [0, 1, 2, 3], {**TOOLCHAIN, "libtpu": "0.0.43"}),
    }
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_enable_async_collective_fusion=false")
    others.add(cache.key("module", "v5e:2x2", [0, 1, 2, 3], TOOLCHAIN))
    assert base not in others and len(others) == 5


def test_programs_and_refusals_round_trip(tmp_path):
    cache = CompileCache(tmp_path)
    cache.put("a", CompileRecord("HloModule m", (0, 1), 123, 4.5, label="s / jax-default / v5e:2x2"))
    cache.put("b", CompileRecord(None, None, None, 0.7, error="out of HBM at compile: RESOURCE_EXHAUSTED"))
    a, b = cache.get("a"), cache.get("b")
    assert (a.hlo_text, a.device_ids, a.memory_bytes, a.compile_seconds, a.error) == ("HloModule m", (0, 1), 123, 4.5, None)
    assert b.hlo_text is None and b.error.startswith("out of HBM")
    assert cache.get("missing") is None
    assert (cache.hits, cache.misses) == (2, 1)


@pytest.mark.parametrize("content", [b"not gzip", gzip.compress(b"{}"), gzip.compress(b'{"hlo_text": null, "error": null,'
                                                                                      b' "device_ids": null, "memory_bytes": null,'
                                                                                      b' "compile_seconds": 1}')])
def test_corrupt_entries_are_discarded(tmp_path, content):
    cache = CompileCache(tmp_path)
    (tmp_path / "k.json.gz").write_bytes(content)
    assert cache.get("k") is None
    assert not (tmp_path / "k.json.gz").exists()
