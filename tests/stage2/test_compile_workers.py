"""Compiles in child processes: a timeout kills the child and leaves nothing in the compile cache."""

import os

import pytest

from aoizora.placement import enumerate_placements
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compile_workers import ORPHAN_POLL_S, CompileTimeout, CompileWorkers
from aoizora.stage2.compiling import compile_strategy
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

CFG = TransformerConfig(layers=2, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2)


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.fixture(scope="module")
def strategy():
    space = TransformerSpace(CFG)
    topo = get_topology("v5e:2x2")
    candidate = next(c for c in space.candidates(topo.num_devices) if c.legal)
    placement = enumerate_placements(topo, space.mesh_spec(candidate.strategy)).placements[0]
    return space, topo, candidate, placement


def test_a_compile_over_its_timeout_kills_its_child_and_caches_nothing(strategy, tmp_path):
    space, topo, candidate, placement = strategy
    cache = CompileCache(tmp_path)
    with CompileWorkers(1) as workers:
        with pytest.raises(CompileTimeout):
            compile_strategy(space, candidate.strategy, candidate.key, topo, placement, 0.01, cache, executor=workers)
        (pid,) = workers.pids
        assert _gone(pid)  # killed and reaped, not left compiling
        assert not list(tmp_path.iterdir())  # no entry, no temporary file
        # the next compile starts a fresh child, which finishes and is stored
        done = compile_strategy(space, candidate.strategy, candidate.key, topo, placement, 600, cache, executor=workers)
        assert len(workers.pids) == 2 and done.program.collectives is not None and not done.from_cache
    assert all(_gone(pid) for pid in workers.pids)  # closing stops the idle child
    assert [p.name.endswith(".json.gz") for p in tmp_path.iterdir()] == [True]


def test_a_child_compile_gives_the_in_process_program(strategy, tmp_path):
    """The child lowers the program again from the pickled space; the parent checks it is the same
    program and parses the child's compiled text: the same program as compiling here."""
    from aoizora.cost import CostModel

    space, topo, candidate, placement = strategy
    with CompileWorkers(1) as workers:
        child = compile_strategy(space, candidate.strategy, candidate.key, topo, placement, 600, executor=workers)
        workers.refuse(space)  # as for a space a child cannot load: compiled in this process
        here = compile_strategy(space, candidate.strategy, candidate.key, topo, placement, 600, executor=workers)
        assert len(workers.pids) == 1
    model = CostModel(topo)
    assert model.evaluate(child.program, placement).step_seconds == model.evaluate(here.program, placement).step_seconds
    assert child.program.device_ids == here.program.device_ids and child.memory_bytes == here.memory_bytes


def test_a_space_that_cannot_be_pickled_compiles_in_this_process(tmp_path):
    import jax
    import jax.numpy as jnp
    from jax.sharding import PartitionSpec as P

    from aoizora.placement import MeshSpec
    from aoizora.plan.function_space import FunctionSpace, FunctionStrategy

    topo = get_topology("v5e:2x2")
    strategy = FunctionStrategy("data", MeshSpec(("data",), (4,)), (P("data", None),))
    space = FunctionSpace(lambda x: jnp.sin(x) * 2, (jax.ShapeDtypeStruct((512, 128), jnp.float32),), [strategy])
    placement = enumerate_placements(topo, strategy.mesh).placements[0]
    with CompileWorkers(1) as workers:
        done = compile_strategy(space, strategy, "data", topo, placement, 600, CompileCache(tmp_path), executor=workers)
        assert workers.pids == []  # no child was started
    assert done.program is not None and len(list(tmp_path.glob("*.json.gz"))) == 1


def test_an_interrupted_compile_kills_its_child(tmp_path):
    """Ctrl-C (SIGINT) while a compile runs: the child is killed, not left compiling, and nothing is cached."""
    import signal
    import threading
    import time

    class Interrupted(Exception):
        pass

    def interrupt(*_):
        raise Interrupted

    space = TransformerSpace(TransformerConfig(layers=8, dim=1024, heads=8, head_dim=128, mlp=4096, seq=2048, batch=2))
    topo = get_topology("v5e:2x2")
    candidate = next(c for c in space.candidates(topo.num_devices) if c.legal)
    placement = enumerate_placements(topo, space.mesh_spec(candidate.strategy)).placements[0]
    handed = threading.Event()

    class Watched(CompileWorkers):
        def compile(self, job, timeout_s):
            handed.set()
            return super().compile(job, timeout_s)

    def interrupt_once_handed():
        # the child still has its imports (seconds) and a compile of several seconds ahead of it
        if handed.wait(120):
            time.sleep(1.0)
            os.kill(os.getpid(), signal.SIGINT)

    previous = signal.signal(signal.SIGINT, interrupt)
    timer = threading.Thread(target=interrupt_once_handed, daemon=True)
    try:
        with Watched(1) as workers:
            timer.start()
            with pytest.raises(Interrupted):
                compile_strategy(space, candidate.strategy, candidate.key, topo, placement, 600, CompileCache(tmp_path),
                                 executor=workers)
            assert workers.pids and all(_gone(pid) for pid in workers.pids)
    finally:
        timer.join(130)
        signal.signal(signal.SIGINT, previous)
    assert not list(tmp_path.iterdir())


def test_a_wan_space_that_has_lowered_can_still_go_to_a_child():
    """The Wan space caches meshes (holding devices, which do not pickle) as it lowers; a copy for
    a child process leaves them out, so its compiles can still be stopped."""
    import pickle

    from aoizora.models.registry import wan_space

    topo = get_topology("v5e:2x2")
    space = wan_space("wan2.1-t2v-1.3b", "480p", 21, generation=None)
    candidate = next(c for c in space.candidates(topo.num_devices) if c.legal)
    placement = enumerate_placements(topo, space.mesh_spec(candidate.strategy)).placements[0]
    space.lowering_inputs(candidate.strategy, placement.jax_mesh(topo))
    job = CompileWorkers(1).job(space, candidate.strategy, topo.name, placement, None, "lowered text")
    assert job is not None
    again = pickle.loads(job.space_blob)
    assert again.workload() == space.workload()


def test_close_while_a_child_starts_leaves_no_process(monkeypatch):
    """`close` from one thread while another is starting a child: when `close` returns, every child
    started has ended (a child started but not yet registered used to outlive `close`)."""
    import threading
    import time

    import aoizora.stage2.compile_workers as compile_workers

    real_child = compile_workers._Child
    popened = threading.Event()
    started = []

    class SlowToRegister(real_child):
        def __init__(self):
            super().__init__()
            started.append(self.pid)
            popened.set()
            time.sleep(1.0)  # the process exists; `close` runs now

    monkeypatch.setattr(compile_workers, "_Child", SlowToRegister)
    workers = CompileWorkers(1)
    taker = threading.Thread(target=lambda: workers._take(), daemon=True)
    taker.start()
    assert popened.wait(30)
    workers.close()
    assert started and all(_gone(pid) for pid in started)
    taker.join(30)


_KILLED_PARENT = """
import os, signal, sys, threading, time
from aoizora.placement import enumerate_placements
from aoizora.stage2 import CompileWorkers, compile_strategy
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

space = TransformerSpace(TransformerConfig(layers=8, dim=1024, heads=8, head_dim=128, mlp=4096, seq=2048, batch=2))
topo = get_topology("v5e:2x2")
first, second = [c for c in space.candidates(topo.num_devices) if c.legal][:2]
handed = threading.Event()

class Watched(CompileWorkers):
    def compile(self, job, timeout_s):
        handed.set()
        return super().compile(job, timeout_s)

def place(c):
    return enumerate_placements(topo, space.mesh_spec(c.strategy)).placements[0]

workers = Watched(1)
compile_strategy(space, first.strategy, first.key, topo, place(first), 600, executor=workers)  # the child is ready
t0 = time.perf_counter()
compile_strategy(space, second.strategy, second.key, topo, place(second), 600, executor=workers)
compile_s = time.perf_counter() - t0  # what the compile the parent dies during takes
handed.clear()
threading.Thread(target=compile_strategy, args=(space, second.strategy, second.key, topo, place(second), 600),
                 kwargs={"executor": workers}, daemon=True).start()
handed.wait(120)
time.sleep(0.2)  # the job is on its way: the child is compiling
with open(sys.argv[1], "w") as out:
    out.write(f"{compile_s} {workers.pids[0]}")
os.kill(os.getpid(), signal.SIGKILL)  # no close(), no finalizer: as a kill -9 or an OOM kill
"""


@pytest.mark.slow
def test_a_child_ends_when_its_parent_is_killed_mid_compile(tmp_path):
    """A parent killed outside Python's control cannot close its workers; its child, busy compiling,
    notices that it was orphaned and ends instead of compiling on for nobody."""
    import subprocess
    import sys
    import time

    report = tmp_path / "child"
    # no pipe to the parent: the child inherits the parent's standard streams and would hold them open
    parent = subprocess.Popen([sys.executable, "-c", _KILLED_PARENT, str(report)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    assert parent.wait(timeout=300) == -9
    compile_s, child = float(report.read_text().split()[0]), int(report.read_text().split()[1])
    # left alone, the child would compile on for about compile_s - 0.2 s after its parent died
    allowed = compile_s / 2
    deadline = time.monotonic() + allowed
    while not _ended(child) and time.monotonic() < deadline:
        time.sleep(0.02)
    gone = _ended(child)
    if not gone:
        os.kill(child, 9)
    if compile_s < 4 * ORPHAN_POLL_S:
        pytest.skip(f"a compile of {compile_s:.2f} s is too short to tell an orphan check from its end")
    assert gone, f"the orphaned child was still compiling {allowed:.1f} s after its parent was killed"


def _ended(pid: int) -> bool:
    """Gone, or a zombie (it has exited; whoever adopted the orphan has not reaped it yet)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True
    except OSError:  # no /proc: the signal test alone
        return _gone(pid)
