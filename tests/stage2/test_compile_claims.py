"""Compile claims: planners sharing a compile cache compile one program once."""

import multiprocessing
import os
import signal
import threading
import time

import pytest

from aoizora.placement import enumerate_placements
from aoizora.stage2.compile_cache import CompileAbandoned, CompileCache
from aoizora.stage2.compile_workers import CompileWorkers
from aoizora.stage2.compiling import compile_strategy
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

CFG = TransformerConfig(layers=2, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2)


def _never() -> bool:
    return False


def test_a_second_claim_waits_for_the_first_and_says_so(tmp_path):
    cache = CompileCache(tmp_path)
    order, released = [], threading.Event()

    def second():
        with cache.claim("k", abandon=_never, poll_s=0.01) as waited:
            order.append(("second", waited, released.is_set()))

    with cache.claim("k", abandon=_never) as waited:
        order.append(("first", waited, False))
        thread = threading.Thread(target=second)
        thread.start()
        time.sleep(0.3)
        assert thread.is_alive()  # waiting for the first holder
        released.set()
    thread.join(10)
    assert order == [("first", False, False), ("second", True, True)]
    assert not list(tmp_path.iterdir())  # released claims leave no file
    with cache.claim("other", abandon=_never) as waited:  # another key is never waited for
        assert waited is False


def test_a_waiting_claim_gives_up_when_its_compiles_are_stopped(tmp_path):
    cache = CompileCache(tmp_path)
    stopped = threading.Event()
    with cache.claim("k", abandon=_never):
        threading.Timer(0.2, stopped.set).start()
        t0 = time.perf_counter()
        with pytest.raises(CompileAbandoned):
            with cache.claim("k", abandon=stopped.is_set, poll_s=0.01):
                pass
        assert time.perf_counter() - t0 < 5


def _hold_forever(root: str, ready) -> None:
    with CompileCache(root).claim("k", abandon=_never):
        ready.set()
        time.sleep(600)


def test_a_claim_dies_with_its_process(tmp_path):
    ready = multiprocessing.get_context("spawn").Event()
    holder = multiprocessing.get_context("spawn").Process(target=_hold_forever, args=(str(tmp_path), ready))
    holder.start()
    try:
        assert ready.wait(60)
        os.kill(holder.pid, signal.SIGKILL)
        holder.join(10)
        with CompileCache(tmp_path).claim("k", abandon=_never, poll_s=0.01) as waited:
            assert waited in (True, False)  # the killed holder's lock went with it: no hang
    finally:
        holder.kill()


def test_a_cache_folder_that_cannot_be_written_runs_unclaimed(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with CompileCache(blocker / "compiled").claim("k", abandon=_never) as waited:
        assert waited is False


def test_two_planners_compiling_one_program_at_once_compile_it_once(tmp_path):
    """Two threads (as two planners sharing the cache) ask for the same program at the same moment:
    one compile, the other reads its entry."""
    space = TransformerSpace(CFG)
    topo = get_topology("v5e:2x2")
    candidate = next(c for c in space.candidates(topo.num_devices) if c.legal)
    placement = enumerate_placements(topo, space.mesh_spec(candidate.strategy)).placements[0]
    compiles = []

    class Counted(CompileWorkers):
        def compile(self, job, timeout_s):
            compiles.append(job)
            return super().compile(job, timeout_s)

    results, start = [], threading.Barrier(2)

    def plan(workers):
        start.wait()
        results.append(compile_strategy(space, candidate.strategy, candidate.key, topo, placement, 600,
                                        CompileCache(tmp_path), executor=workers))

    with Counted(1) as one, Counted(1) as other:
        threads = [threading.Thread(target=plan, args=(w,)) for w in (one, other)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(600)
    assert len(compiles) == 1
    assert sorted(r.from_cache for r in results) == [False, True]
    assert results[0].program.collectives == results[1].program.collectives
    assert [p.name.endswith(".json.gz") for p in tmp_path.iterdir()] == [True]
