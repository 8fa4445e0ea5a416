"""`plan_wan` and `plan_space` check their arguments as the CLI checks its options, before any work."""

from __future__ import annotations

import pytest

import aoizora
from aoizora.cost import Q2Options
from aoizora.errors import AoizoraError, ArgumentError, ArgumentTypeError, TopologyError
from aoizora.models import registry
from aoizora.plan import planner
from aoizora.topology import get_topology

GOOD = ("wan2.1-t2v-1.3b", "v5e:2x2", "480p", 5)


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if planning starts: building the space, or checking the flags with libtpu."""
    def started(*args, **kwargs):
        raise AssertionError("planning started before the arguments were checked")

    monkeypatch.setattr(registry, "wan_space", started)
    monkeypatch.setattr(planner, "planning_flags", started)


@pytest.mark.parametrize("args, kwargs, error, fragment", [
    ((123, *GOOD[1:]), {}, TypeError, "model must be a model name"),
    ((GOOD[0], 4, *GOOD[2:]), {}, TypeError, "topology must be a slice name"),
    ((*GOOD[:2], 480, GOOD[3]), {}, TypeError, "resolution must be"),
    ((*GOOD[:3], True), {}, TypeError, "frames must be a whole number"),
    ((*GOOD[:3], 5.0), {}, TypeError, "frames must be a whole number"),
    ((*GOOD[:3], 0), {}, ValueError, "frames must be at least 1"),
    (GOOD, {"top_k": 0}, ValueError, "top_k must be at least 1"),
    (GOOD, {"top_k": -1}, ValueError, "top_k must be at least 1"),
    (GOOD, {"top_k": 2.0}, TypeError, "top_k must be a whole number"),
    (GOOD, {"verify_top": -1}, ValueError, "verify_top must be at least 0"),
    (GOOD, {"compile_timeout_s": -5}, ValueError, "compile_timeout_s must be a positive"),
    (GOOD, {"compile_timeout_s": float("nan")}, ValueError, "compile_timeout_s must be a positive"),
    (GOOD, {"compile_timeout_s": "900"}, TypeError, "compile_timeout_s must be a number of seconds"),
    (GOOD, {"time_budget_s": 0}, ValueError, "time_budget_s must be a positive"),
    (GOOD, {"time_budget_s": "60"}, TypeError, "time_budget_s must be a number of seconds"),
    (GOOD, {"expert_residency": "none"}, ValueError, "expert_residency must be one of 'both', 'swap'"),
    (GOOD, {"executor": "ray"}, TypeError, "executor must be a compile executor"),
    (GOOD, {"options": {"ring_order": "best"}}, TypeError, "options must be a Q2Options"),
    (GOOD, {"use_cache": "no"}, TypeError, "use_cache must be True or False"),
    (GOOD, {"libtpu_args": ["--a=1"]}, TypeError, "libtpu_args must be flags"),
    (GOOD, {"top": 3}, TypeError, "unknown keyword argument(s) top"),
    (GOOD, {"resolution_": "720p", "topk": 3}, TypeError, "resolution_, topk"),
])
def test_plan_wan_refuses_bad_arguments_by_name(no_work, args, kwargs, error, fragment):
    with pytest.raises(error) as info:
        aoizora.plan_wan(*args, **kwargs)
    assert fragment in str(info.value)
    assert isinstance(info.value, AoizoraError)  # the CLI's one line, for a caller that catches those
    assert "\n" not in str(info.value)


def test_plan_space_refuses_bad_arguments_by_name(monkeypatch):
    topo = get_topology("v5e:2x2")
    space = registry.wan_space(*GOOD[:1], "480p", 5, generation=topo.generation)
    monkeypatch.setattr(planner, "planning_flags", lambda *a, **k: pytest.fail("planning started"))
    with pytest.raises(ArgumentTypeError, match="space must be a StrategySpace"):
        planner.plan_space("wan2.1-t2v-1.3b", topo)
    with pytest.raises(ArgumentTypeError, match="topology must be a slice name"):
        planner.plan_space(space, 8)
    with pytest.raises(TopologyError, match="v5e:3x3"):
        planner.plan_space(space, "v5e:3x3")
    with pytest.raises(ArgumentError, match="top_k must be at least 1"):
        planner.plan_space(space, topo, top_k=0)
    with pytest.raises(ArgumentTypeError, match="options must be a Q2Options"):
        planner.plan_space(space, topo, options="best")
    with pytest.raises(ArgumentTypeError, match="stage1 must be a Stage1Result"):
        planner.plan_space(space, topo, stage1={})


def test_a_stage1_result_of_another_request_is_refused(monkeypatch):
    from aoizora.stage1 import Stage1Result

    topo = get_topology("v5e:2x2")
    space = registry.wan_space(*GOOD[:1], "480p", 5, generation=topo.generation)
    monkeypatch.setattr(planner, "planning_flags", lambda *a, **k: pytest.fail("planning started"))
    other_k = Stage1Result(topology=topo, entries=[], top_k=4, seconds=0.0)
    with pytest.raises(ArgumentError, match="stage1 was computed with top_k=4, not 3"):
        planner.plan_space(space, topo, top_k=3, stage1=other_k)
    other_slice = Stage1Result(topology=get_topology("v5e:2x4"), entries=[], top_k=3, seconds=0.0)
    with pytest.raises(ArgumentError, match="stage1 was computed for v5e:2x4"):
        planner.plan_space(space, topo, top_k=3, stage1=other_slice)


def test_good_arguments_pass_through(monkeypatch):
    seen = {}
    monkeypatch.setattr(planner, "plan_space", lambda space, topology, **options: seen.update(options) or "planned")
    assert aoizora.plan_wan(*GOOD, top_k=2, verify_top=0, compile_timeout_s=60, options=Q2Options(),
                            use_cache=False, expert_residency="swap") == "planned"
    assert seen["top_k"] == 2 and seen["compile_timeout_s"] == 60


def test_every_argument_that_shapes_a_plan_is_in_its_request_or_checked():
    """plan_space's keywords: each is part of the plan cache's request, or cannot change the plan
    (how it runs or reports), or is checked against the request (`stage1`)."""
    in_request = {"top_k", "options", "verify_top", "include_experts", "libtpu_args", "check_limits"}
    no_effect = {"use_cache", "progress", "console", "compile_cache", "executor"}
    checked = {"stage1"}
    # a compile timeout or a time budget can lose candidates, and a plan that lost one is never cached
    timeouts = {"compile_timeout_s", "time_budget_s"}
    assert set(planner.PLAN_SPACE_OPTIONS) == in_request | no_effect | checked | timeouts


def test_plan_space_and_plan_function_take_a_slice_by_name(monkeypatch):
    """A name is resolved with `get_topology` before any work; the plan is of that slice."""
    topo = get_topology("v5e:2x2")
    space = registry.wan_space(*GOOD[:1], "480p", 5, generation=topo.generation)

    class Stop(Exception):
        pass

    def flags(libtpu_args, topology_name):
        seen.append(topology_name)
        raise Stop

    seen: list[str] = []
    monkeypatch.setattr(planner, "planning_flags", flags)
    for call in (lambda: planner.plan_space(space, "v5e:2x2"), lambda: aoizora.plan_space(space, topo),
                 lambda: aoizora.plan_function(None, (), space, "v5e:2x2")):
        with pytest.raises(Stop):
            call()
    assert seen == ["v5e:2x2"] * 3
    with pytest.raises(ArgumentTypeError, match="topology must be a slice name"):
        aoizora.plan_function(None, (), space, 8)
