"""Stage 2 compiles on a Ray cluster (a local one, started here): the same plan and compile-cache
entries as local child processes, timeouts that end the worker process, and workers that would
compile differently refused."""

from __future__ import annotations

import gzip
import json
import os
import re
import sys
import time

import pytest
from click.testing import CliRunner

from aoizora.cli import cli
from aoizora.errors import ExecutorError
from aoizora.placement import enumerate_placements
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compile_workers import CompileTimeout, CompileWorkers
from aoizora.stage2.compiling import compile_strategy
from aoizora.stage2.executors import executor_from_spec
from aoizora.stage2.search import Stage2Config, run_stage2
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

pytestmark = pytest.mark.ray

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'aoizora[ray]'")

CFG = TransformerConfig(layers=2, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2)
LONGER = TransformerConfig(layers=4, dim=1024, heads=8, head_dim=128, mlp=4096, seq=2048, batch=2)  # seconds to compile


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 CPUs for this module (executors attach to it and leave it running).
    Its workers run at this process's priority: Ray starts them at nice 15, where, beside the other
    test process of a parallel run, an actor took ~25 s to import jax instead of ~3 s."""
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False,
             _system_config={"worker_niceness": 0})
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def small():
    space = TransformerSpace(CFG)
    topo = get_topology("v5e:2x2")
    legal = [c for c in space.candidates(topo.num_devices) if c.legal]
    return space, topo, legal


def _gone(pid: int, within_s: float = 20.0) -> bool:
    """True once process `pid` has ended (Ray ends a killed actor's process asynchronously)."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


_DEBUG_SECTIONS = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


def _without_call_stacks(hlo_text: str) -> str:
    """Compiled HLO without its debug call stacks: they name the frames of the process that lowered
    the program (a local child's loop or a Ray worker's), not anything the program does."""
    kept, skipping = [], False
    for line in hlo_text.splitlines():
        if line in _DEBUG_SECTIONS:
            skipping = True
        elif skipping:
            skipping = bool(line.strip())
        else:
            kept.append(re.sub(r" stack_frame_id=\d+", "", line))
    return "\n".join(kept)


def _entries(root) -> dict[str, dict]:
    """The compile cache's records by key, without the seconds each compile took or its call stacks."""
    out = {}
    for path in root.iterdir():
        with gzip.open(path, "rt") as f:
            record = json.load(f)["record"]
        record.pop("compile_seconds")
        assert "stack_frame_id=" in record["hlo_text"]  # what is left out is there to leave out
        record["hlo_text"] = _without_call_stacks(record["hlo_text"])
        out[path.name] = record
    return out


def _pairs(outcomes) -> dict[tuple[str, str], float]:
    return {(s.key, s.placement.name): s.q2.step_seconds for o in outcomes for s in o.scored}


def _choice(outcomes) -> tuple[str, str, float, bool]:
    best = min((s for o in outcomes for s in o.scored), key=lambda s: (s.q2.step_seconds, not s.verified))
    return best.key, best.placement.name, best.q2.step_seconds, best.verified


def test_ray_gives_the_local_choice_scores_and_cache_entries(cluster, small, tmp_path):
    space, topo, legal = small
    kept = [(c.key, c.strategy) for c in legal[:3]]
    with CompileWorkers(2) as local:
        here = run_stage2(space, kept, topo, Stage2Config(compile_cache=CompileCache(tmp_path / "local"),
                                                          verify_top=2), executor=local)
    with executor_from_spec("ray", 2) as on_ray:
        there = run_stage2(space, kept, topo, Stage2Config(compile_cache=CompileCache(tmp_path / "ray"),
                                                           verify_top=2), executor=on_ray)
        assert on_ray.pids and all(pid not in local.pids for pid in on_ray.pids)
    assert _choice(there.outcomes) == _choice(here.outcomes)
    assert _pairs(there.outcomes) == _pairs(here.outcomes)
    assert all(o.compiled is not None and not o.compiled.from_cache for o in there.outcomes)
    assert there.summary.compiled == here.summary.compiled and there.summary.workers == 2
    local_entries, ray_entries = _entries(tmp_path / "local"), _entries(tmp_path / "ray")
    assert len(local_entries) >= 3 and ray_entries == local_entries
    assert ray.is_initialized()  # the cluster the caller connected to is left to it


def test_a_ray_compile_over_its_timeout_ends_its_worker_process_and_caches_nothing(cluster, small, tmp_path):
    space, topo, legal = small
    candidate = legal[-1]
    placement = enumerate_placements(topo, space.mesh_spec(candidate.strategy)).placements[0]
    cache = CompileCache(tmp_path)
    with executor_from_spec("ray", 1) as on_ray:
        with pytest.raises(CompileTimeout):
            compile_strategy(space, candidate.strategy, candidate.key, topo, placement, 0.01, cache, executor=on_ray)
        (pid,) = on_ray.pids
        assert _gone(pid)
        assert not list(tmp_path.iterdir())
        done = compile_strategy(space, candidate.strategy, candidate.key, topo, placement, 600, cache, executor=on_ray)
        assert len(on_ray.pids) == 2 and not done.from_cache and done.program.collectives is not None
        last = on_ray.pids[-1]
    assert _gone(last)  # closing ends the idle actor too
    assert len(list(tmp_path.iterdir())) == 1


def test_closing_kills_a_ray_compile_in_flight(cluster):
    """`close` (what Ctrl-C and an error in the sweep call) ends the process of a compile in flight:
    the caller's wait returns at once."""
    import threading

    from aoizora.stage2.compile_workers import ChildDied

    space, topo = TransformerSpace(LONGER), get_topology("v5e:2x4")
    candidate = next(c for c in space.candidates(topo.num_devices) if c.legal)
    placement = enumerate_placements(topo, space.mesh_spec(candidate.strategy)).placements[0]
    text = space.lowering_inputs(candidate.strategy, placement.jax_mesh(topo)).lower().as_text()
    on_ray = executor_from_spec("ray", 1)
    job = on_ray.job(space, candidate.strategy, topo.name, placement, None, text)
    raised: list[BaseException] = []

    def compile_in_thread() -> None:
        try:
            on_ray.compile(job, 600)
        except BaseException as exc:
            raised.append(exc)

    worker = threading.Thread(target=compile_in_thread, daemon=True)
    worker.start()
    deadline = time.monotonic() + 120
    while not on_ray.pids and time.monotonic() < deadline:  # the actor has started and taken the job
        time.sleep(0.05)
    time.sleep(0.5)
    t0 = time.monotonic()
    on_ray.close()
    worker.join(30)
    assert not worker.is_alive() and time.monotonic() - t0 < 30
    assert len(raised) == 1 and isinstance(raised[0], ChildDied), raised
    assert _gone(on_ray.pids[0])


def test_workers_with_other_compiler_flags_are_refused(cluster, monkeypatch):
    """The cluster's workers were started with this process's XLA_FLAGS, which have changed since:
    its compile cache keys would name programs the workers do not compile."""
    before = os.environ.get("XLA_FLAGS", "")
    monkeypatch.setenv("XLA_FLAGS", f"{before} --xla_dump_hlo_as_text".strip())
    expected = f"XLA_FLAGS {before!r} there, {os.environ['XLA_FLAGS']!r} here"
    with pytest.raises(ExecutorError, match=re.escape(expected) + ".*--executor local"):
        executor_from_spec("ray", 1)


def test_a_worker_that_joins_later_is_checked_before_it_compiles(cluster, small, tmp_path, monkeypatch):
    """A compile actor checks its own environment before its first compile, and the sweep stops on
    the refusal instead of recording a dropped strategy."""
    import aoizora.stage2.ray_executor as ray_executor

    space, topo, legal = small
    monkeypatch.setattr(ray_executor, "_check_nodes", lambda expected: None)  # as if the node joined afterwards
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_tpu_enable_latency_hiding_scheduler=true")
    with executor_from_spec("ray", 1) as on_ray:
        with pytest.raises(ExecutorError, match="LIBTPU_INIT_ARGS"):
            run_stage2(space, [(legal[0].key, legal[0].strategy)], topo,
                       Stage2Config(compile_cache=CompileCache(tmp_path), verify_top=0), executor=on_ray)
    assert not list(tmp_path.iterdir())


def test_the_check_names_each_difference():
    from aoizora.stage2.ray_executor import check_environment

    here = {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1", "XLA_FLAGS": ""}
    check_environment(here, {"node": "n" * 20, "environment": dict(here)})
    with pytest.raises(ExecutorError, match=r"libtpu '0.0.40' there, '0.0.42.1' here") as info:
        check_environment(here, {"node": "n" * 20, "environment": {**here, "libtpu": "0.0.40"}})
    assert "jax " not in str(info.value)
    with pytest.raises(ExecutorError, match=r"jaxlib 'absent' there"):
        check_environment(here, {"node": "n" * 20, "environment": {k: v for k, v in here.items() if k != "jaxlib"}})


@pytest.mark.parametrize("spec, fragment", [
    ("ray://bad", "malformed Ray address 'ray://bad'"),
    ("ray://host:99999", "malformed Ray address"),
    ("dask", "unknown executor 'dask'"),
])
def test_a_bad_executor_is_one_line_and_exit_2(spec, fragment):
    result = CliRunner().invoke(cli, ["plan", "--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--resolution",
                                      "480p", "--frames", "5", "--executor", spec], catch_exceptions=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and fragment in lines[0], result.stderr


def test_without_ray_the_error_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` fails as when it is not installed
    monkeypatch.delitem(sys.modules, "aoizora.stage2.ray_executor", raising=False)
    with pytest.raises(ExecutorError, match=r"pip install 'aoizora\[ray\]'"):
        executor_from_spec("ray", 1)
