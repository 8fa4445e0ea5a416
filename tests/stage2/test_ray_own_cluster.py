"""The Ray cluster that aoizora starts itself (`--executor ray` with no cluster running)."""

from __future__ import annotations

import os

import pytest

ray = pytest.importorskip("ray", reason="Ray is an optional extra: pip install 'aoizora[ray]'")

from aoizora.stage2.ray_executor import RayCompileWorkers  # noqa: E402  (imports ray)

pytestmark = pytest.mark.ray


@ray.remote
def _niceness() -> int:
    return os.nice(0)


def test_the_cluster_aoizora_starts_runs_its_workers_at_this_process_priority():
    # Ray's default is nice 15 for a local cluster's workers; a compile there waits on everything else
    assert not ray.is_initialized()
    workers = RayCompileWorkers(None)
    try:
        worker_nice = ray.get(_niceness.remote())
    finally:
        workers.close()
    assert worker_nice == os.nice(0)
    assert not ray.is_initialized()  # the cluster it started stopped with it
