"""Planning with caches in any state: the cache folder a file, a plan-cache entry or compile-cache
entries that are directories. Planning recovers (one warning line, the same plan); never a traceback,
never a degraded plan."""

import logging
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from aoizora.plan import plan_function
from aoizora.stage2 import CompileCache
from aoizora.topology import get_topology
from tests.plan.test_plan import ARGS, STRATEGIES, mlp

STRATS = STRATEGIES[:2]


def _plan(**kwargs):
    return plan_function(mlp, ARGS, STRATS, get_topology("v5e:2x2"), top_k=2, verify_top=0, progress=False, **kwargs)


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    """A plan made with a fresh cache folder (which then holds its plan, Stage 1 and compile entries)."""
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("AOIZORA_CACHE_DIR", str(cache))
    yield SimpleNamespace(result=_plan(), cache=cache, mp=mp)
    mp.undo()


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_compile_cache_entries_that_are_directories_do_not_degrade_the_plan(planned, caplog):
    """Once "compile failed: IsADirectoryError": the strategy was dropped and the degraded plan cached."""
    compiled = planned.cache / "compiled"
    entries = sorted(compiled.glob("*.json.gz"))
    assert entries
    for path in entries:
        path.unlink()
        (path / "inside").mkdir(parents=True)  # a directory that cannot simply be removed
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        result = _plan(use_cache=False, compile_cache=CompileCache(compiled))
    assert not any(a.get("dropped") for a in result.plan.data["alternatives"])
    assert result.plan.strategy == planned.result.plan.strategy
    assert all("\n" not in line for line in _warnings(caplog)) and len(_warnings(caplog)) <= 2


def test_a_plan_cache_entry_that_is_a_directory_is_planned_again(planned, caplog):
    from aoizora.plan.cache import cache_key

    entry = planned.cache / f"{cache_key(planned.result.plan.data['request'])}.json"
    entry.unlink()
    (entry / "inside").mkdir(parents=True)
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        again = _plan()
    assert not again.from_cache and again.plan.strategy == planned.result.plan.strategy
    assert any("cannot use plan-cache entry" in line for line in _warnings(caplog))


def test_a_cache_folder_that_is_a_file_plans_without_caches(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    monkeypatch.setenv("AOIZORA_CACHE_DIR", str(blocker))
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        result = _plan()
    assert not result.from_cache and not any(a.get("dropped") for a in result.plan.data["alternatives"])
    (line,) = _warnings(caplog)
    assert "the cache folder cannot be used" in line and "AOIZORA_CACHE_DIR" in line
    assert blocker.read_text() == "not a folder"


@pytest.mark.slow  # runs the CLI in a subprocess (Stage 1 of the 1.3B model on one chip, no cache)
def test_the_cli_says_one_line_when_the_cache_folder_cannot_be_used(tmp_path):
    """Once a traceback after Stage 1 had done its work."""
    blocker = tmp_path / "cache"
    blocker.write_text("not a folder")
    env_dir = blocker / "sub"
    proc = subprocess.run(
        [sys.executable, "-c", "from aoizora.cli import main; main()", "plan", "--model", "wan2.1-t2v-1.3b",
         "--topology", "v5e:1x1", "--resolution", "480p", "--frames", "5", "--stage1-only", "--json"],
        capture_output=True, text=True, timeout=300,
        env={**os.environ, "AOIZORA_CACHE_DIR": str(env_dir)},
    )
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "the cache folder cannot be used" in lines[0], proc.stderr
    assert blocker.read_text() == "not a folder"
