"""The plan cache never answers with a degraded plan: one that lost a candidate to a timeout or an
error is neither stored nor, when an entry holds one, returned."""

import pytest

from aoizora.plan import Plan, cache, plan_function
from aoizora.stage2 import CompileTimeout
from aoizora.topology import get_topology
from tests.plan.plan_doc import plan_doc
from tests.plan.test_plan import ARGS, STRATEGIES, mlp

REQUEST = {"workload": plan_doc()["workload"], "topology": "v5e:2x2"}  # the plan's own: a plan restates its request


def _plan(**edits) -> Plan:
    doc = {**plan_doc(), "request": REQUEST, **edits}
    return Plan(doc)


DEGRADED = [
    {"alternatives": [{"strategy": "tensor", "placement": None, "dropped": "compile did not finish within 3 s"}]},
    {"alternatives": [{"strategy": "tensor", "placement": None,
                       "dropped": "compile failed: IsADirectoryError: [Errno 21] Is a directory"}]},
    {"baselines": {"experts": [{"strategy": "e", "dropped": "compile did not finish within 3 s"}]}},
    {"notes": ["recompile of data / ring failed (compile did not finish within 3 s); kept the shared compile"]},
    {"stage1": {"counts": {}, "entries": [{"key": "s", "verdict": "lowering-failed", "reasons": ["E"], "rank": None}]}},
]


@pytest.mark.parametrize("edits", DEGRADED)
def test_a_degraded_plan_is_not_stored(tmp_path, monkeypatch, edits):
    monkeypatch.setenv("AOIZORA_CACHE_DIR", str(tmp_path))
    plan = _plan(**edits)
    assert cache.degraded(plan.data)
    assert cache.store(REQUEST, plan) is None
    assert cache.lookup(REQUEST) is None and not list(tmp_path.iterdir())


@pytest.mark.parametrize("edits", DEGRADED)
def test_a_cached_degraded_plan_is_discarded(tmp_path, monkeypatch, caplog, edits):
    """An entry written before degraded plans were refused (checksum and key right) is not answered."""
    from aoizora.store import ChecksummedStore

    monkeypatch.setenv("AOIZORA_CACHE_DIR", str(tmp_path))
    plan = _plan(**edits)
    ChecksummedStore(tmp_path, field="plan").store(cache.cache_key(REQUEST), plan.data)
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        assert cache.lookup(REQUEST) is None
    assert "degraded plan" in caplog.text and not list(tmp_path.glob("*.json"))


def test_a_plan_that_lost_a_strategy_to_memory_is_cached(tmp_path, monkeypatch):
    """The compiler's refusal for memory is the request's own answer: it does not degrade a plan."""
    monkeypatch.setenv("AOIZORA_CACHE_DIR", str(tmp_path))
    plan = _plan(alternatives=[{"strategy": "t", "placement": None,
                                "dropped": "out of HBM at compile: RESOURCE_EXHAUSTED: 17G of 16G"}])
    assert cache.degraded(plan.data) is None
    assert cache.store(REQUEST, plan) is not None
    assert cache.lookup(REQUEST).data == plan.data


def test_a_plan_whose_compile_timed_out_does_not_answer_the_next_request(tmp_path, monkeypatch):
    """A strategy's compile times out (as under `--compile-timeout 3` on a busy host): the plan lacks
    it and is not cached, so the same request made again plans with it."""
    import aoizora.stage2.compiling as search

    monkeypatch.setenv("AOIZORA_CACHE_DIR", str(tmp_path))
    real = search._compile_miss

    def slow_for_tensor(space, strategy, topology, placement, *args, **kwargs):
        if placement.mesh.axis_names == ("tensor",):
            raise CompileTimeout("compile did not finish within 3 s")
        return real(space, strategy, topology, placement, *args, **kwargs)

    topo = get_topology("v5e:2x2")
    strategies = STRATEGIES[:2]
    with monkeypatch.context() as m:
        m.setattr(search, "_compile_miss", slow_for_tensor)
        first = plan_function(mlp, ARGS, strategies, topo, top_k=2, verify_top=0, progress=False)
    dropped = {a["strategy"]: a.get("dropped") for a in first.plan.data["alternatives"]}
    assert dropped["tensor"] == "compile did not finish within 3 s"
    again = plan_function(mlp, ARGS, strategies, topo, top_k=2, verify_top=0, progress=False)
    assert not again.from_cache
    assert not any(a.get("dropped") for a in again.plan.data["alternatives"])
    hit = plan_function(mlp, ARGS, strategies, topo, top_k=2, verify_top=0, progress=False)
    assert hit.from_cache and hit.plan.data == again.plan.data  # a whole plan is cached
