"""A compile's own limit counts its process's CPU seconds, so a busy host does not change which
compiles finish (and so the plan); the time budget stays on the wall clock."""

from __future__ import annotations

import os
import time

import pytest

from aoizora.stage2 import compile_limits
from aoizora.stage2.compile_limits import CompileLimit, LimitWatch, process_cpu_seconds


class _Host:
    """A clock and one process's CPU seconds, both moved by hand."""

    def __init__(self) -> None:
        self.now, self.cpu = 0.0, 10.0

    def clock(self) -> float:
        return self.now

    def run(self, wall: float, cpu: float) -> None:
        self.now += wall
        self.cpu += cpu


@pytest.fixture
def host(monkeypatch):
    h = _Host()
    monkeypatch.setattr(compile_limits, "process_cpu_seconds", lambda pid: h.cpu)
    return h


def test_a_compile_slowed_by_a_busy_host_runs_past_its_limit_on_the_clock(host):
    watch = LimitWatch(123, CompileLimit(cpu_s=100), clock=host.clock)
    for _ in range(30):  # 300 s on the clock at a tenth of a core: 30 CPU seconds
        host.run(10, 1)
        assert watch.check() is None
    host.run(1000, 80)
    assert "100 s of CPU time" in watch.check() and not watch.wall_limit_expired()


def test_a_compile_that_answers_between_two_checks_is_held_to_its_cpu_limit(host):
    """Over its limit, whether or not a check fell while it ran: the poll's phase decides nothing."""
    watch = LimitWatch(123, CompileLimit(cpu_s=0.5), clock=host.clock)
    host.run(0.8, 0.6)  # answered before the first check, past its half CPU second
    assert "of CPU time" in watch.finished_over_cpu_limit()
    within = LimitWatch(123, CompileLimit(cpu_s=5), clock=host.clock)
    host.run(0.8, 0.6)
    assert within.finished_over_cpu_limit() is None
    assert LimitWatch(None, CompileLimit(cpu_s=0.5), clock=host.clock).finished_over_cpu_limit() is None


def test_a_compile_that_uses_no_cpu_for_its_whole_limit_is_stopped_as_hung(host):
    watch = LimitWatch(123, CompileLimit(cpu_s=60), clock=host.clock)
    host.run(30, 5)
    assert watch.check() is None
    host.run(59, 0.2)
    assert watch.check() is None
    host.run(1, 0.2)
    assert "used no CPU time for 60 s" in watch.check()


def test_the_budget_stops_a_compile_on_the_clock_and_says_it_did(host):
    watch = LimitWatch(123, CompileLimit(cpu_s=900, wall_s=30), clock=host.clock)
    assert watch.wait_seconds(1.0) == 1.0
    host.run(29, 29)
    assert watch.check() is None and 0 < watch.wait_seconds(5.0) <= 1.0
    host.run(1, 1)
    assert "within 30 s" in watch.check() and watch.wall_limit_expired()


def test_where_cpu_time_cannot_be_read_the_tighter_limit_applies_to_the_clock(monkeypatch):
    monkeypatch.setattr(compile_limits, "process_cpu_seconds", lambda pid: None)
    now = [0.0]
    own = LimitWatch(None, CompileLimit(cpu_s=20, wall_s=50), clock=lambda: now[0])
    budget = LimitWatch(None, CompileLimit(cpu_s=900, wall_s=50), clock=lambda: now[0])
    assert own.wait_seconds(1.0) == 20 and budget.wait_seconds(1.0) == 50
    now[0] = 20
    assert own.check() is not None and not own.wall_limit_expired()  # the compile's own limit
    assert budget.check() is None
    now[0] = 50
    assert budget.check() is not None and budget.wall_limit_expired()  # the budget's


def test_no_limit_waits_without_end(host):
    assert LimitWatch(123, CompileLimit(), clock=host.clock).wait_seconds(1.0) is None


def test_a_limit_is_read_from_seconds_or_none():
    assert CompileLimit.of(900) == CompileLimit(cpu_s=900.0)
    assert CompileLimit.of(None) == CompileLimit()
    limit = CompileLimit(cpu_s=1, wall_s=0)
    assert CompileLimit.of(limit) is limit and limit.spent and not CompileLimit(wall_s=0.5).spent


def test_a_process_cpu_seconds_count_its_work():
    before = process_cpu_seconds(os.getpid())
    if before is None:
        pytest.skip("this host has no /proc")
    t0 = time.process_time()
    while time.process_time() - t0 < 0.3:
        pass
    assert process_cpu_seconds(os.getpid()) - before >= 0.25
    assert process_cpu_seconds(2**22 + 12345) is None  # no such process
