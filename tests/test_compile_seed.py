"""The test suite's compile seed (`tests/compile_seed.py`): every entry is one the compile cache
trusts, and none names a folder of the machine that recorded it."""

from __future__ import annotations

import re
import shutil

from aoizora.stage2.compile_cache import CompileCache
from tests.compile_seed import SEED, without_machine_paths

# a quoted source file named from the root of a machine's file system
_ABSOLUTE_SOURCE = re.compile(r'"/[^"\n]*\.py"')


def test_every_seed_entry_reads_back_and_names_no_machine_folder(tmp_path):
    entries = sorted(SEED.glob("*.json.gz"))
    for entry in entries:  # read from a copy: the cache deletes an entry it does not trust
        shutil.copyfile(entry, tmp_path / entry.name)
    cache = CompileCache(tmp_path)
    for entry in entries:
        record = cache.get(entry.name.removesuffix(".json.gz"))
        assert record is not None, f"{entry.name} is not an entry the compile cache trusts"
        assert record.hlo_text is not None or record.error is not None
        assert not _ABSOLUTE_SOURCE.search(record.hlo_text or ""), entry.name
    assert cache.misses == 0


def test_source_files_are_named_from_the_project_or_the_installed_package():
    text = ('FileNames\n1 "/home/u/aoizora/src/aoizora/models/wan/transformer/model.py"\n'
            '2 "/opt/venv/lib/python3.11/site-packages/jax/_src/core.py"\n3 "<string>"')
    assert without_machine_paths(text) == ('FileNames\n1 "src/aoizora/models/wan/transformer/model.py"\n'
                                           '2 "python3.11/site-packages/jax/_src/core.py"\n3 "<string>"')
    assert without_machine_paths(None) is None


def test_a_recorded_session_becomes_the_seed_the_next_session_plants(tmp_path, monkeypatch):
    from aoizora.stage2.compile_cache import CompileRecord
    from tests import compile_seed

    monkeypatch.setattr(compile_seed, "SEED", tmp_path / "seed")
    (tmp_path / "seed").mkdir()
    (tmp_path / "seed" / "stale.json.gz").write_bytes(b"")  # an old entry no session compiled
    recorded = CompileCache(tmp_path / "recorded" / "compiled")
    recorded.put("k1", CompileRecord('HloModule m\nFileNames\n1 "/home/u/x/src/aoizora/a.py"', (0,), 1, 2.0))
    recorded.put("k2", CompileRecord(None, None, None, 1.0, error="out of scoped VMEM at compile: ..."))
    assert compile_seed.keep(tmp_path / "recorded") == 2
    assert sorted(p.name for p in (tmp_path / "seed").iterdir()) == ["k1.json.gz", "k2.json.gz"]

    session = tmp_path / "session"
    assert compile_seed.plant(session) == 2 and compile_seed.missing(session) == 0
    planted = CompileCache(session / "compiled")
    assert planted.get("k1").hlo_text == 'HloModule m\nFileNames\n1 "src/aoizora/a.py"'
    assert planted.get("k2").error.startswith("out of scoped VMEM")
    planted.put("k3", CompileRecord("HloModule n", (0,), 1, 2.0))  # a program the seed lacks
    assert compile_seed.missing(session) == 1
