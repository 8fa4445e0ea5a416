"""`aoizora measure` compiles several programs at once and times them one by one (CPU devices stand
in for the chip: the compile and the timing loop are the same code)."""

from __future__ import annotations

import threading
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from aoizora.measure import chip
from aoizora.measure.local_program import localize, partitioned_module
from aoizora.measure.per_device import fusion_bound
from aoizora.topology import hardware_profile


def test_results_come_in_the_jobs_order_and_a_batch_is_whole_before_any_of_it_is_handed_on():
    running, peak, done = [0], [0], []
    lock = threading.Lock()

    def job(i: int, seconds: float):
        def run() -> int:
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(seconds)
            with lock:
                running[0] -= 1
                done.append(i)
            return i
        return run

    # the first job of each batch is the slowest: a batch handed on early would show it unfinished
    jobs = [job(i, 0.2 if i % 3 == 0 else 0.01) for i in range(7)]
    seen = []
    for i in chip.compiled_in_order(jobs, workers=3):
        batch = range(i - i % 3, min(i - i % 3 + 3, 7))
        assert set(batch) <= set(done), "a result was handed on while its batch still compiled"
        assert running[0] == 0, "a compile runs while the caller times"
        seen.append(i)
    assert seen == list(range(7)) and peak[0] == 3


def test_one_worker_runs_the_jobs_one_after_another():
    order = []
    jobs = [lambda i=i: order.append(i) or i for i in range(4)]
    assert list(chip.compiled_in_order(jobs, workers=1)) == [0, 1, 2, 3] == order


@pytest.fixture(scope="module")
def local_text() -> str:
    mesh = Mesh(np.array(jax.devices("cpu")[:8]).reshape(2, 4), ("f", "c"))
    args = [jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=NamedSharding(mesh, P("c", None))),
            jax.ShapeDtypeStruct((128, 256), jnp.float32, sharding=NamedSharding(mesh, P("f", None)))]
    return localize(partitioned_module(jax.jit(lambda x, w: jnp.tanh(x @ w)).lower(*args))).text


def test_programs_compiled_in_threads_run_and_are_timed(local_text):
    device = jax.devices("cpu")[0]
    jobs = [lambda: chip.compile_module(local_text, None, device) for _ in range(3)]
    for compiled in chip.compiled_in_order(jobs, workers=3):
        assert compiled.refused is None and compiled.text and "ENTRY" in compiled.text
        timing = chip.time_compiled(compiled, runs=2)
        assert len(timing.seconds) == 2 and all(s > 0 for s in timing.seconds)
        assert timing.compile_seconds == compiled.compile_seconds > 0


def test_a_program_the_compiler_refuses_is_a_result_not_a_failure():
    compiled = chip.compile_module("HloModule broken\nENTRY e { this is not HLO }", None, jax.devices("cpu")[0])
    assert compiled.make_run is None and compiled.refused
    timing = chip.time_compiled(compiled, runs=3)
    assert timing.seconds == [] and timing.median_seconds is None and timing.refused == compiled.refused


def test_a_fusion_is_bound_by_the_unit_its_roofline_says():
    hw = hardware_profile("v5e")
    # a 4096^3 bf16 matmul: 137 GFLOP over 100 MB; a bf16 add over 64M elements: 64 MFLOP over 384 MB
    assert fusion_bound(2 * 4096 ** 3, 3 * 4096 * 4096 * 2, hw) == "mxu"
    assert fusion_bound(64e6, 3 * 64e6 * 2, hw) == "hbm"
