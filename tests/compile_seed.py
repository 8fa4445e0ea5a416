"""The test suite's compile seed: libtpu's output for the programs the tests compile, planted in
each session's compile cache so that a test pays for a compile only when its program changed.

The seed is entries of `aoizora.stage2.compile_cache.CompileCache` as a session wrote them, one
gzipped file per key. A key is the lowered program's text, the device order, the slice, the
toolchain versions and the compiler flags; libtpu is pinned, so an entry holds what compiling
that program gives. A test whose program changed misses the seed and compiles for real; the
session then says how many programs the seed lacked. `make test-seed` runs the suite with an
empty cache and keeps what it compiled (`AOIZORA_TEST_RECORD_SEED=1`). Tests that compile with
`lowered.compile()` themselves, or under their own cache folder, never read the seed.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
from pathlib import Path

SEED = Path(__file__).parent / "data" / "compile_seed"
_ENTRY = "*.json.gz"


def recording() -> bool:
    """Whether this session records the seed (`make test-seed`) instead of reading it."""
    return os.environ.get("AOIZORA_TEST_RECORD_SEED") == "1"


def adding() -> bool:
    """Whether this session reads the seed and adds to it what it compiled that the seed lacks
    (`AOIZORA_TEST_RECORD_SEED=add pytest FILES`: after a change to a few tests' programs)."""
    return os.environ.get("AOIZORA_TEST_RECORD_SEED") == "add"


def _compiled(cache_dir: Path) -> Path:
    return cache_dir / "compiled"


def plant(cache_dir: Path) -> int:
    """Copy the seed's entries into the compile cache under `cache_dir`; how many."""
    entries = sorted(SEED.glob(_ENTRY))
    if entries:
        _compiled(cache_dir).mkdir(parents=True, exist_ok=True)
    for entry in entries:
        shutil.copyfile(entry, _compiled(cache_dir) / entry.name)
    return len(entries)


def missing(cache_dir: Path) -> int:
    """How many entries of the session's compile cache the seed does not hold."""
    seeded = {p.name for p in SEED.glob(_ENTRY)}
    return sum(1 for p in _compiled(cache_dir).glob(_ENTRY) if p.name not in seeded)


def keep(cache_dir: Path) -> int:
    """Make the session's compiled entries the seed (the old seed's entries go); how many. The
    programs are kept without the folders their source files were in (`without_machine_paths`)."""
    SEED.mkdir(parents=True, exist_ok=True)
    for old in SEED.glob(_ENTRY):
        old.unlink()
    return add(cache_dir)


def add(cache_dir: Path) -> int:
    """Add to the seed the session's compiled entries it lacks (`without_machine_paths`); how many."""
    from aoizora.stage2.compile_cache import CompileCache

    SEED.mkdir(parents=True, exist_ok=True)
    seeded = {p.name for p in SEED.glob(_ENTRY)}
    session, seed = CompileCache(_compiled(cache_dir)), CompileCache(SEED)
    added = 0
    for entry in sorted(_compiled(cache_dir).glob(_ENTRY)):
        key = entry.name.removesuffix(".json.gz")
        record = None if entry.name in seeded else session.get(key)
        if record is not None:
            seed.put(key, dataclasses.replace(record, hlo_text=without_machine_paths(record.hlo_text)))
            added += 1
    return added


#: the folders before a source file's path inside the project or an installed package
_FOLDERS = re.compile(r'(?<=")/[^"\n]*?/(?=src/aoizora/|tests/|benchmarks/|site-packages/|python3\.\d+/)')


def without_machine_paths(hlo_text: str | None) -> str | None:
    """A compiled program's text with its source files named from the project or the installed
    package (`src/aoizora/...`, `site-packages/jax/...`), not from the folder they were on."""
    return None if hlo_text is None else _FOLDERS.sub("", hlo_text)


def through_cache(topology: str, mesh=None):
    """A compile (lowered, flags) -> `CompileRecord` that reads the session's compile cache (and so
    the seed) first: for `compile_splash_call`'s one-device programs, or for a program lowered over
    `mesh` (its device order is in the key); a refusal for memory read back is raised as
    `CachedCompileError`."""
    from aoizora.stage2.compile_cache import default_compile_cache
    from aoizora.stage2.compiling import cached_compile

    devices = () if mesh is None else [d.id for d in mesh.devices.flat]
    return cached_compile(default_compile_cache(), topology, devices)
