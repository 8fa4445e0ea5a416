"""`aoizora.plan_wan`: a named Wan model planned on a slice named as `plan_function` takes it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import aoizora
from aoizora.api import wan_request, wan_request_space
from aoizora.errors import ArgumentError, ArgumentTypeError, ShapeError, TopologyError
from aoizora.models.registry import wan_space
from aoizora.plan import planner
from aoizora.topology import get_topology


def test_plan_wan_plans_the_space_the_cli_plans(monkeypatch):
    seen = {}

    def recorded(space, topology, **options):
        seen.update(space=space, topology=topology, options=options)
        return "planned"

    monkeypatch.setattr(planner, "plan_space", recorded)
    assert aoizora.plan_wan("wan2.2-t2v-a14b", "v6e:2x4", "480p", 21, top_k=3, verify_top=0,
                            expert_residency="swap") == "planned"
    topo = get_topology("v6e:2x4")
    expected = wan_space("wan2.2-t2v-a14b", "480p", 21, generation=topo.generation, expert_residency="swap")
    assert seen["topology"].name == "v6e:2x4"
    assert seen["space"].workload() == expected.workload()
    assert seen["options"] == {"top_k": 3, "verify_top": 0}


def test_plan_wan_takes_a_topology_object(monkeypatch):
    monkeypatch.setattr(planner, "plan_space", lambda space, topology, **options: topology)
    topo = get_topology("v5e:2x2")
    assert aoizora.plan_wan("wan2.1-t2v-1.3b", topo, "480p", 5) is topo


@pytest.mark.parametrize("args, error, fragment", [
    (("wan9-t2v", "v5e:2x4", "480p", 21), ShapeError, "unknown model"),
    (("wan2.1-t2v-1.3b", "v5e:3x3", "480p", 21), TopologyError, "v5e:3x3"),
    (("wan2.1-t2v-1.3b", "v5e:2x4", "480p", 20), ShapeError, "4n+1"),
])
def test_plan_wan_refuses_bad_input_before_planning(args, error, fragment, monkeypatch):
    monkeypatch.setattr(planner, "plan_space", lambda *a, **k: pytest.fail("planned"))
    with pytest.raises(error, match=fragment.replace("+", r"\+")):
        aoizora.plan_wan(*args)


def _recorded(monkeypatch) -> dict:
    seen: dict = {}

    def recorded(space, topology, **options):
        seen.update(space=space, topology=topology, options=options)
        return "planned"

    monkeypatch.setattr(planner, "plan_space", recorded)
    return seen


def test_plan_wan_takes_the_kernel_as_the_cli_does(monkeypatch):
    seen = _recorded(monkeypatch)
    aoizora.plan_wan("wan2.1-t2v-1.3b", "v5e:2x2", "480p", 5, kernel="tokamax-splash")
    topo = get_topology("v5e:2x2")
    request = wan_request("wan2.1-t2v-1.3b", "480p", 5, kernel="tokamax-splash", from_maxdiffusion=None, topology=topo)
    assert seen["space"].workload() == wan_request_space(request, topo).workload()
    assert seen["space"].workload() != wan_space("wan2.1-t2v-1.3b", "480p", 5, generation=topo.generation).workload()
    with pytest.raises(ArgumentError, match="kernel must be one of"):
        aoizora.plan_wan("wan2.1-t2v-1.3b", "v5e:2x2", "480p", 5, kernel="flash")


def test_plan_wan_plans_a_users_maxdiffusion_command_as_the_cli_does(monkeypatch):
    from aoizora.cli.planning import _plan_request

    commands = json.loads((Path(__file__).parents[1] / "export" / "data" / "maxdiffusion_published_commands.json")
                          .read_text())["commands"]
    fast = next(c for c in commands if c["id"] == "fast-inference-wan22-fixed-m")["command"]

    seen = _recorded(monkeypatch)
    aoizora.plan_wan(None, "tpu7x:2x2x1", from_maxdiffusion=fast)
    topo = get_topology("tpu7x:2x2x1")
    cli_space = wan_request_space(_plan_request(None, None, None, fast, None, topo), topo)
    assert seen["space"].workload()["user_deployment"]["source"] == "the MaxDiffusion command given with " \
        "from_maxdiffusion"
    mine, theirs = seen["space"].workload(), cli_space.workload()
    for workload in (mine, theirs):
        workload["user_deployment"].pop("source")
    assert mine == theirs
    with pytest.raises(ArgumentError, match="frames 49 disagrees with the MaxDiffusion command's 81; drop frames"):
        aoizora.plan_wan(None, "tpu7x:2x2x1", frames=49, from_maxdiffusion=fast)
    with pytest.raises(ArgumentTypeError, match="model must be a model name"):
        aoizora.plan_wan(None, "tpu7x:2x2x1")
