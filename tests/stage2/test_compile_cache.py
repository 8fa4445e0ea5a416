"""The compile cache on its own: keys, refusals, corrupt entries."""

import gzip

import pytest

from aoizora.stage2.compile_cache import CompileCache, CompileRecord

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
    assert ((a.hlo_text, a.device_ids, a.memory_bytes, a.compile_seconds, a.error)
            == ("HloModule m", (0, 1), 123, 4.5, None))
    assert b.hlo_text is None and b.error.startswith("out of HBM")
    assert cache.get("missing") is None
    assert (cache.hits, cache.misses) == (2, 1)
    assert a.memory_parts is None  # entries written without the parts read back without them
    parts = {"argument": 10, "output": 2, "temp": 100, "alias": 0, "generated_code": 11}
    cache.put("c", CompileRecord("HloModule m", (0, 1), 123, 4.5, memory_parts=parts))
    assert cache.get("c").memory_parts == parts


@pytest.mark.parametrize("content", [b"not gzip", gzip.compress(b"{}", mtime=0),
                                     gzip.compress(b'{"hlo_text": null, "error": null, "device_ids": null,'
                                                   b' "memory_bytes": null, "compile_seconds": 1}', mtime=0)],
                         ids=["not-gzip", "empty-object", "no-record"])
def test_corrupt_entries_are_discarded(tmp_path, content):
    cache = CompileCache(tmp_path)
    (tmp_path / "k.json.gz").write_bytes(content)
    assert cache.get("k") is None
    assert not (tmp_path / "k.json.gz").exists()


def test_key_ignores_where_the_code_is_installed(tmp_path, monkeypatch):
    """A Pallas kernel's Mosaic body carries debug locations naming its source files: the same
    kernel traced from a copy of its module elsewhere (as in another clone's virtualenv) must share
    the key; a different kernel must not."""
    import importlib.util
    import shutil
    import sys

    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as masks
    from jax.sharding import SingleDeviceSharding

    from aoizora.topology import get_topology

    copy = tmp_path / "elsewhere" / "splash_attention_kernel.py"
    copy.parent.mkdir()
    shutil.copy(splash_attention_kernel.__file__, copy)
    spec = importlib.util.spec_from_file_location("splash_attention_kernel_elsewhere", copy)
    moved_module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, moved_module)  # its dataclasses look themselves up
    spec.loader.exec_module(moved_module)
    tpu = SingleDeviceSharding(get_topology("v5e:2x2").devices[0])

    def lowered_text(splash, block: int) -> str:
        mask = masks.MultiHeadMask([masks.FullMask((256, 256))] * 2)
        sizes = splash.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block)
        kernel = splash.make_splash_mha(mask, head_shards=1, q_seq_shards=1, block_sizes=sizes)
        q = jax.ShapeDtypeStruct((2, 256, 128), jnp.bfloat16, sharding=tpu)
        return jax.jit(kernel).lower(q, q, q).as_text()

    here, there = lowered_text(splash_attention_kernel, 128), lowered_text(moved_module, 128)
    assert here != there  # the kernel bodies name their source files
    cache = CompileCache(tmp_path / "cache")
    key = cache.key(here, "v5e:2x2", [0, 1, 2, 3], TOOLCHAIN)
    assert cache.key(there, "v5e:2x2", [0, 1, 2, 3], TOOLCHAIN) == key
    assert cache.key(lowered_text(splash_attention_kernel, 256), "v5e:2x2", [0, 1, 2, 3], TOOLCHAIN) != key


def _rewrite(path, edit):
    import json

    with gzip.open(path, "rt", encoding="utf-8") as f:
        entry = json.load(f)
    edit(entry)
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(entry, f)


@pytest.mark.parametrize(
    "edit",
    [
        lambda e: e["record"].update(hlo_text="HloModule tampered"),  # reads back cleanly, checksum disagrees
        lambda e: e.update(key="another-key"),  # an entry moved under another key
        lambda e: e.pop("sha256"),  # no checksum (e.g. written by an older aoizora)
    ],
)
def test_entries_that_do_not_match_their_checksum_or_key_are_discarded_and_logged(tmp_path, caplog, edit):
    cache = CompileCache(tmp_path)
    cache.put("k", CompileRecord("HloModule m", (0, 1), 123, 4.5))
    _rewrite(tmp_path / "k.json.gz", edit)
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        assert cache.get("k") is None
    assert not (tmp_path / "k.json.gz").exists()
    (message,) = [r.getMessage() for r in caplog.records]
    assert "discarded compile-cache entry k" in message and "\n" not in message
    assert (cache.hits, cache.misses) == (0, 1)


def test_a_lowered_program_compiles_once_through_the_cache_and_a_refusal_is_read_back(tmp_path, monkeypatch):
    """`cached_compile`: a miss compiles and stores libtpu's program; a hit compiles nothing; a
    refusal for memory is stored and raised again from the cache, while another failure is not."""
    import jax
    import jax.numpy as jnp

    from aoizora.stage2 import compiling
    from aoizora.stage2.outcomes import OUT_OF_VMEM, CachedCompileError
    from aoizora.toolchain import SCOPED_VMEM_FLAG, CompilerFlags, compile_only_devices

    device = compile_only_devices("v5e:2x2")[0]
    sharding = jax.sharding.SingleDeviceSharding(device)
    x = jax.ShapeDtypeStruct((128, 128), jnp.float32)

    def lowered(scale: float):
        return jax.jit(lambda a: a * scale, in_shardings=sharding).lower(x)

    compiles = []
    real = compiling.compile_lowered

    def counted(low, flags):
        compiles.append(flags)
        if flags:
            raise RuntimeError("RESOURCE_EXHAUSTED: CompileTimeScopedVmemOom: scoped vmem out of memory")
        return real(low, flags)

    monkeypatch.setattr(compiling, "compile_lowered", counted)
    compile_with = compiling.cached_compile(CompileCache(tmp_path), "v5e:2x2")
    first = compile_with(lowered(2.0), None)
    assert first.hlo_text and "multiply" in first.hlo_text and first.memory_bytes
    assert first.memory_parts["argument"] == first.memory_parts["output"] == 128 * 128 * 4
    assert compile_with(lowered(2.0), None) == first and len(compiles) == 1
    compile_with(lowered(3.0), None)
    assert len(compiles) == 2  # another program, another entry
    flags = CompilerFlags(((SCOPED_VMEM_FLAG, "1024"),))
    for _ in range(2):
        with pytest.raises(Exception, match="(?i)vmem") as info:
            compile_with(lowered(2.0), flags)
    assert len(compiles) == 3 and isinstance(info.value, CachedCompileError)
    assert str(info.value).startswith(OUT_OF_VMEM)

    def broken(low, flags):
        compiles.append(flags)
        raise RuntimeError("INTERNAL: not a refusal")

    monkeypatch.setattr(compiling, "compile_lowered", broken)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="INTERNAL"):
            compile_with(lowered(5.0), None)
    assert len(compiles) == 5  # not stored: compiled again
