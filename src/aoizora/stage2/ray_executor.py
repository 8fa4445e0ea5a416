"""Stage 2 compiles on a Ray cluster (`--executor ray` or `--executor ray://HOST:PORT`).

A compile runs in a Ray actor, the Ray counterpart of a local compile child
(`aoizora.stage2.compile_workers`): it receives the same `CompileJob`, runs the same job code
(`_run`: unpickle the space, lower again, check the lowered program's digest, compile) and answers
the same way. The pool around the actors is `CompileWorkers`'s: up to `size` compiles at once, an
actor reused for the next compile (jax and libtpu are imported once per actor), killed
(`ray.kill`, which ends its worker process) when its compile exceeds its timeout or the caller is
interrupted or closes the pool. Nothing is written on the cluster: the compiled text comes back and
the caller stores it in its compile cache.

A worker that compiles with another jax, jaxlib or libtpu, another aoizora, or other compiler flags
in its environment (`LIBTPU_INIT_ARGS`, `XLA_FLAGS`, which libtpu applies to every compile and the
compile cache keys) would return a program other than the one its cache key names. So every node
with CPUs is checked when the executor starts, and every actor again before its first compile;
a difference raises ExecutorError naming it.

Each actor reserves `cpus_per_compile` of Ray's CPUs (a libtpu compile keeps about one core busy),
so Ray never runs more compiles on a node than it has cores for; the pool is no larger than the
cluster's CPUs allow, since an actor that cannot be placed would wait forever.

This module imports Ray; `aoizora.stage2.executors.executor_from_spec` imports it only when
Ray is asked for.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from aoizora.defaults import DEFAULT_RAY_CPUS_PER_COMPILE
from aoizora.errors import ExecutorError
from aoizora.stage2.compile_limits import CompileLimit
from aoizora.stage2.compile_workers import (
    CHILD_START_TIMEOUT_S,
    ChildDied,
    ChildResult,
    CompileChild,
    CompileJob,
    CompileTimeout,
    CompileWorkers,
    _run,
    result_of,
)
from aoizora.toolchain import compile_environment

log = logging.getLogger("aoizora.stage2")

def _environment_here() -> dict[str, Any]:
    """What this Ray worker compiles with, and where it runs."""
    return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(), "environment": compile_environment()}


@ray.remote(num_cpus=0)
def _probe() -> dict[str, Any]:
    """A node's compile environment (scheduled onto each node in turn)."""
    return _environment_here()


@ray.remote(max_restarts=0, max_task_retries=0)
class _CompileActor:
    """A compile process on the cluster: `_run` on the jobs it is sent, one at a time."""

    def __init__(self) -> None:
        self._spaces: dict[bytes, Any] = {}

    def ready(self) -> dict[str, Any]:
        import jax  # noqa: F401  (the imports a compile needs, before the caller's clock starts)

        return _environment_here()

    def run(self, job: CompileJob) -> tuple[Any, ...]:
        return _run(job, self._spaces)


def environment_differences(here: dict[str, str], there: dict[str, str]) -> list[str]:
    """What a worker's compile environment has that this process's has not, one phrase each."""
    return [f"{name} {there.get(name, 'absent')!r} there, {value!r} here"
            for name, value in here.items() if there.get(name) != value]


def check_environment(here: dict[str, str], reported: dict[str, Any]) -> None:
    """ExecutorError unless a worker (its `_environment_here` report) compiles as this process does."""
    differences = environment_differences(here, reported["environment"])
    if differences:
        raise ExecutorError(
            f"the Ray worker on node {reported['node'][:12]} would compile differently from this process "
            f"({'; '.join(differences)}); install the same jax, jaxlib, libtpu and aoizora on the cluster and "
            "give its workers the same LIBTPU_INIT_ARGS and XLA_FLAGS, or use --executor local")


class _RayChild(CompileChild):
    """One compile actor, in the pool in place of a local compile child."""

    def __init__(self, cpus: float, expected: dict[str, str]) -> None:
        super().__init__()
        actor_class: Any = _CompileActor  # a Ray actor class: ray.remote adds `options`
        self.actor = actor_class.options(num_cpus=cpus).remote()
        self.cpus = cpus
        self.expected = expected
        self.pid: int | None = None  # the actor's worker process, once it answered

    def _get_ready(self) -> None:
        """Wait for the actor's imports and check its environment."""
        try:
            reported = ray.get(self.actor.ready.remote(), timeout=CHILD_START_TIMEOUT_S)
        except ray.exceptions.GetTimeoutError:
            raise ChildDied(f"a Ray compile worker did not start within {CHILD_START_TIMEOUT_S:.0f} s "
                            f"(does the cluster have {self.cpus:g} free CPUs on one node?)") from None
        except ray.exceptions.RayError as exc:
            raise ChildDied(f"a Ray compile worker did not start ({_first_line(exc)})") from None
        self.pid = reported["pid"]
        check_environment(self.expected, reported)

    def run(self, job: CompileJob, limit: CompileLimit) -> ChildResult:
        # an actor's process may be on another node, where its CPU time cannot be read: its
        # compile's own limit applies to the wall clock (`compile_limits`)
        wall = limit.as_wall_seconds()
        ref = self.actor.run.remote(job)
        done, _ = ray.wait([ref], timeout=wall)
        if not done:
            self.kill()
            raise CompileTimeout(f"compile did not finish within {wall:.0f} s", wall_clock=limit.wall_binds())
        try:
            answer = ray.get(ref)
        except ray.exceptions.RayError as exc:  # the actor died: killed from outside, or crashed
            raise ChildDied(f"the Ray compile worker {self.pid} ended without an answer ({_first_line(exc)})") from None
        return result_of(answer)

    def _end(self) -> None:
        """End the actor's worker process."""
        try:
            ray.kill(self.actor, no_restart=True)
        except Exception as exc:  # the cluster is gone already: so is the actor
            log.debug("aoizora: could not kill a Ray compile worker (%s)", exc)

    def stop(self) -> None:
        self.kill()  # an idle actor holds nothing worth a graceful exit


class RayCompileWorkers(CompileWorkers):
    """`CompileWorkers` whose compile processes are actors on a Ray cluster.

    `address`: None for a cluster on this machine (the one `ray.init()` finds, else a new one),
    or `ray://HOST:PORT`. Raises ExecutorError when the cluster cannot be reached, has no room for a
    compile, or has a node whose compile environment differs from this process's.
    """

    def __init__(self, address: str | None, size: int = 1, *, cpus_per_compile: float | None = None) -> None:
        self.cpus_per_compile = DEFAULT_RAY_CPUS_PER_COMPILE if cpus_per_compile is None else cpus_per_compile
        if self.cpus_per_compile <= 0:
            raise ExecutorError(f"a compile needs a positive number of CPUs, not {self.cpus_per_compile:g}")
        self.address = address
        self._owns_connection = _connect(address)
        try:
            self.expected = compile_environment()
            room = _room(self.cpus_per_compile)
            if room == 0:
                raise ExecutorError(
                    f"no node of the Ray cluster has {self.cpus_per_compile:g} CPUs for a compile; "
                    "lower --ray-cpus-per-compile or add nodes")
            _check_nodes(self.expected)
        except BaseException:
            self._disconnect()
            raise
        if size > room:
            log.warning("aoizora: the Ray cluster has room for %d compiles of %g CPUs at once, not %d",
                        room, self.cpus_per_compile, size)
        super().__init__(min(size, room))

    def _start_child(self) -> _RayChild:
        return _RayChild(self.cpus_per_compile, self.expected)

    def close(self) -> None:
        """Kill every actor, then leave the cluster (a local cluster started here stops)."""
        super().close()
        self._disconnect()

    def _disconnect(self) -> None:
        if self._owns_connection:
            self._owns_connection = False
            ray.shutdown()


def _connect(address: str | None) -> bool:
    """Join the Ray cluster at `address`; True when this call connected (and `ray.shutdown` is ours)."""
    if ray.is_initialized():  # the caller connected already: that cluster is used, and left connected
        return False
    where = address or "a Ray cluster on this machine"
    try:
        if address is None:
            _init_on_this_machine()
        else:
            ray.init(address=address, log_to_driver=False, configure_logging=False)
    except ExecutorError:
        raise
    except Exception as exc:  # unreachable, refused, another Ray version: Ray raises many kinds
        raise ExecutorError(f"cannot connect to {where} ({_first_line(exc)}); check the address, that the cluster "
                            "runs the same Ray version and, if it requires token authentication (Ray's default), "
                            "that RAY_AUTH_MODE=token is set here with its token; or use --executor local") from None
    return True


# Ray starts a local cluster's workers at nice 15, where a compile yields to everything else on the
# machine (the planner's own Stage 1 lowering beside the early compiles included): the cluster that
# aoizora starts runs them at normal priority.
_OWN_CLUSTER_CONFIG = {"worker_niceness": 0}


def _init_on_this_machine() -> None:
    """Join the Ray cluster running on this machine, else start one with `_OWN_CLUSTER_CONFIG`."""
    try:
        ray.init(include_dashboard=False, log_to_driver=False, configure_logging=False,
                 _system_config=_OWN_CLUSTER_CONFIG)
    except ValueError:  # Ray refuses a _system_config when joining: join the running cluster as it is
        ray.init(log_to_driver=False, configure_logging=False)


def _alive_nodes() -> list[dict[str, Any]]:
    return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]


def _room(cpus_per_compile: float) -> int:
    """Compiles of `cpus_per_compile` CPUs the cluster's nodes can run at once."""
    return sum(int(n["Resources"]["CPU"] // cpus_per_compile) for n in _alive_nodes())


def _check_nodes(expected: dict[str, str]) -> None:
    """ExecutorError unless every node with CPUs compiles as this process does."""
    probes = [_probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
              for n in _alive_nodes()]
    try:
        reports = ray.get(probes, timeout=CHILD_START_TIMEOUT_S)
    except ray.exceptions.RayError as exc:
        raise ExecutorError(f"the Ray cluster's workers cannot run aoizora ({_first_line(exc)}); install the same "
                            "aoizora, jax, jaxlib and libtpu on the cluster, or use --executor local") from None
    for reported in reports:
        check_environment(expected, reported)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:240] if text else type(exc).__name__
