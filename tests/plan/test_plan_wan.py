"""`aoizora.plan_wan`: a named Wan model planned on a slice named as `plan_function` takes it."""

from __future__ import annotations

import pytest

import aoizora
from aoizora.errors import ShapeError, TopologyError
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
