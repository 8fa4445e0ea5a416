import json
import time
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import PartitionSpec as P

from aoizora.errors import PlanFormatError, PlanMismatchError
from aoizora.placement import MeshSpec
from aoizora.plan import FunctionStrategy, Plan, load_plan, plan_function
from aoizora.topology import get_topology


def mlp(x, w1, w2):
    return jax.nn.gelu(x @ w1) @ w2


ARGS = (
    jax.ShapeDtypeStruct((2048, 1024), jnp.bfloat16),
    jax.ShapeDtypeStruct((1024, 4096), jnp.bfloat16),
    jax.ShapeDtypeStruct((4096, 1024), jnp.bfloat16),
)
STRATEGIES = [
    FunctionStrategy("data", MeshSpec(("data",), (4,)), (P("data", None), P(), P())),
    FunctionStrategy("tensor", MeshSpec(("tensor",), (4,)), (P(), P(None, "tensor"), P("tensor", None))),
    FunctionStrategy("data+tensor", MeshSpec(("data", "tensor"), (2, 2)),
                     (P("data", None), P(None, "tensor"), P("tensor", None))),
    FunctionStrategy("too-big", MeshSpec(("data",), (8,)), (P("data", None), P(), P())),
]


@pytest.fixture(scope="module")
def planned(tmp_path_factory):
    cache = tmp_path_factory.mktemp("cache")
    mp = pytest.MonkeyPatch()
    mp.setenv("AOIZORA_CACHE_DIR", str(cache))
    topo = get_topology("v5e:2x2")
    t0 = time.perf_counter()
    result = plan_function(mlp, ARGS, STRATEGIES, topo, top_k=3, verify_top=1, progress=False)
    first = time.perf_counter() - t0
    yield SimpleNamespace(result=result, topo=topo, cache=cache, first_seconds=first, mp=mp)
    mp.undo()


@pytest.mark.slow
def test_plan_function_plans_a_non_wan_program(planned):
    plan = planned.result.plan
    assert not planned.result.from_cache
    assert plan.strategy["key"] in {"data", "tensor", "data+tensor"}
    counts = plan.data["stage1"]["counts"]
    assert counts["enumerated"] == 4 and counts["rejected"] == 1  # the 8-device mesh
    assert plan.data["baselines"]["same_strategy_jax_default"]["speedup_of_plan"] >= 1.0
    assert {a["strategy"] for a in plan.data["alternatives"]} <= {"data", "tensor", "data+tensor"}
    assert plan.predicted_step_seconds > 0
    assert set(plan.data["timings"]) >= {"stage1", "compile", "score", "verify", "total"}


@pytest.mark.slow
def test_plan_round_trip(planned, tmp_path):
    path = planned.result.plan.save(tmp_path / "plan.json")
    again = load_plan(path)
    assert again.data == json.loads(json.dumps(planned.result.plan.data))
    mesh = again.mesh(planned.topo.devices)
    assert mesh.axis_names == again.axis_names and mesh.devices.shape == again.axis_sizes
    coords = [tuple(d.coords[:2]) for d in mesh.devices.ravel()]
    assert coords == [tuple(c) for c in again.device_coords.reshape(-1, 2).tolist()]


@pytest.mark.slow
def test_cache_hit_is_fast_and_corruption_is_recomputed(planned):
    topo = planned.topo
    t0 = time.perf_counter()
    hit = plan_function(mlp, ARGS, STRATEGIES, topo, top_k=3, verify_top=1, progress=False)
    assert hit.from_cache and time.perf_counter() - t0 < 1.0
    assert hit.plan.data == planned.result.plan.data
    (entry,) = list(planned.cache.glob("*.json"))
    entry.write_text(entry.read_text()[:200])  # truncated: corrupt
    again = plan_function(mlp, ARGS, STRATEGIES, topo, top_k=3, verify_top=1, progress=False)
    assert not again.from_cache
    hit = plan_function(mlp, ARGS, STRATEGIES, topo, top_k=3, verify_top=1, progress=False)
    assert hit.from_cache and hit.plan.strategy == again.plan.strategy  # rewritten, valid
    bypass = plan_function(mlp, ARGS, STRATEGIES, topo, top_k=1, verify_top=0, progress=False, use_cache=False)
    assert not bypass.from_cache


@pytest.mark.slow
@pytest.mark.parametrize(
    "mutate, fragment",
    [
        (lambda d: d.pop("mesh"), "'mesh' is a required property"),
        (lambda d: d.update(schema_version=99), "schema_version 99"),
        (lambda d: d["topology"].update(shape=[2]), "topology/shape"),
        (lambda d: d["placement"].update(device_coords=[[0, 0]] * 4), "device_coords"),
    ],
)
def test_invalid_plans_are_refused(planned, tmp_path, mutate, fragment):
    data = json.loads(json.dumps(planned.result.plan.data))
    mutate(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(PlanFormatError, match=fragment):
        load_plan(path)


def test_not_json_is_refused(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text("{ not json")
    with pytest.raises(PlanFormatError, match="not valid JSON"):
        load_plan(path)
    with pytest.raises(PlanFormatError, match="cannot read"):
        load_plan(tmp_path / "missing.json")


def _fake(coords, kind="TPU v5 lite", core=0):
    return SimpleNamespace(coords=list(coords) + [0], core_on_chip=core, device_kind=kind,
                           id=hash(tuple(coords)) % 1000)


@pytest.mark.slow
def test_mesh_matches_devices_by_coordinates_in_any_order(planned):
    plan: Plan = planned.result.plan
    devices = list(planned.topo.devices)[::-1]  # runtime order differs from libtpu's
    mesh = plan.mesh(devices)
    got = [tuple(d.coords[:2]) for d in mesh.devices.ravel()]
    assert got == [tuple(c) for c in plan.device_coords.reshape(-1, 2).tolist()]


@pytest.mark.slow
@pytest.mark.parametrize(
    "devices, fragment",
    [
        ([_fake((x, y), kind="TPU v4") for x in range(2) for y in range(2)], "devices are TPU v4"),
        ([_fake((x, 0)) for x in range(2)], "4 devices"),
        ([_fake((0, y)) for y in range(4)], "devices form 1x4"),
        ([SimpleNamespace(device_kind="TPU v5 lite", id=i) for i in range(4)], "no TPU coordinates"),
    ],
)
def test_mesh_refuses_mismatching_devices(planned, devices, fragment):
    with pytest.raises(PlanMismatchError, match=fragment):
        planned.result.plan.mesh(devices)


@pytest.mark.slow
def test_one_compile_serves_structured_placements():
    """Evidence behind "one compile per strategy": device order does not change the program."""
    from aoizora.hlo.builder import program_from_compiled
    from aoizora.placement import enumerate_placements
    from aoizora.workloads.transformer import TransformerConfig, lower

    topo = get_topology("v5e:2x4")
    spec = MeshSpec.parse("sp=2,tp=4")
    cfg = TransformerConfig(layers=2, dim=512, heads=8, head_dim=64, mlp=2048, seq=1024)
    rules = {"seq": "sp", "heads": "tp", "mlp": "tp"}
    signatures = set()
    for p in enumerate_placements(topo, spec).placements[:4]:
        prog = program_from_compiled(lower(cfg, p.jax_mesh(topo), rules).compile())
        signatures.add(tuple((c.kind, c.groups, json.dumps(c.algorithm.to_json() if c.algorithm else None))
                             for c in prog.collectives))
    assert len(signatures) == 1


@pytest.mark.slow
def test_compile_cache_serves_repeated_compiles_and_discards_corrupt_entries(planned):
    compiled_dir = planned.cache / "compiled"
    entries = sorted(compiled_dir.glob("*.json.gz"))
    assert entries, "the first plan stored its compiles"
    # Another Top-K misses the plan cache but every program it compiles was compiled before.
    again = plan_function(mlp, ARGS, STRATEGIES, planned.topo, top_k=2, verify_top=1, progress=False)
    assert not again.from_cache
    assert all(o.compiled is not None and o.compiled.from_cache for o in again.outcomes)
    assert any("compile cache" in n for n in again.plan.data["notes"])
    assert again.plan.data["timings"]["compile"] == 0.0
    first = {a["strategy"]: a.get("step_seconds") for a in planned.result.plan.data["alternatives"]}
    for a in again.plan.data["alternatives"]:
        if a["strategy"] in first and first[a["strategy"]] is not None:
            assert a["step_seconds"] == pytest.approx(first[a["strategy"]], rel=1e-12)
    for entry in entries:
        entry.write_bytes(b"not gzip")  # corrupt: discarded, recompiled, rewritten
    third = plan_function(mlp, ARGS, STRATEGIES, planned.topo, top_k=2, verify_top=0, progress=False)
    assert all(not o.compiled.from_cache for o in third.outcomes if o.compiled is not None)
    from aoizora.stage2.compile_cache import CompileCache

    cache = CompileCache(compiled_dir)
    readable = [e for e in entries if e.exists() and cache.get(e.name[: -len(".json.gz")]) is not None]
    assert len(readable) >= len([o for o in third.outcomes if o.compiled is not None])


@pytest.mark.slow
def test_a_strategy_the_compiler_refuses_gives_its_place_to_the_next(planned, monkeypatch):
    """Stage 1's memory estimate is approximate: when the compiler refuses a Top-K strategy for
    HBM, Stage 2 compiles the next one in Stage 1's ranking instead of scoring fewer."""
    import aoizora.stage2.compiling as stage2

    real = stage2.compile_strategy
    refused: list[str] = []

    def refusing(space, strategy, key, *args, **kw):
        if not refused or key == refused[0]:
            refused[:] = [key]
            raise RuntimeError("RESOURCE_EXHAUSTED: Ran out of memory on HBM (test)")
        return real(space, strategy, key, *args, **kw)

    monkeypatch.setattr(stage2, "compile_strategy", refusing)
    result = plan_function(mlp, ARGS, STRATEGIES, planned.topo, top_k=1, verify_top=0, progress=False)
    rows = {a["strategy"]: a for a in result.plan.data["alternatives"]}
    ranked = [e["key"] for e in sorted((e for e in result.plan.data["stage1"]["entries"] if e["rank"]),
                                       key=lambda e: e["rank"])]
    assert refused == [ranked[0]] and rows[ranked[0]]["dropped"].startswith("out of HBM")
    assert result.plan.strategy["key"] == ranked[1]  # the next strategy was compiled and chosen
    assert any("in its place" in n for n in result.plan.data["notes"])


def test_plan_is_reported_against_every_expert_deployment():
    """A generation with two documented deployments: both join Stage 2 and both are baselines."""
    from aoizora.plan import plan_space
    from aoizora.plan.function_space import FunctionSpace
    from aoizora.workload import ExpertDeployment

    class TwoExperts(FunctionSpace):
        def expert_deployments(self, topology):
            by_name = {s.name: s for s in self.strategies}
            return [ExpertDeployment("by-data", by_name["data"], ("--xla_enable_async_all_reduce=true",),
                                     "repo path @ commit", "x s"),
                    ExpertDeployment("by-tensor", by_name["tensor"], (), "repo other @ commit", "y s")]

    space = TwoExperts(mlp, ARGS, STRATEGIES[:3])
    plan = plan_space(space, get_topology("v5e:2x2"), top_k=1, verify_top=0, use_cache=False,
                      progress=False).plan
    experts = plan.data["baselines"]["experts"]
    assert [e["name"] for e in experts] == ["by-data", "by-tensor"]
    # a deployment with flags of its own is another program than the strategy without them
    assert [e["strategy"] for e in experts] == ["data | by-data flags", "tensor"]
    assert experts[0]["libtpu_args"] == ["--xla_enable_async_all_reduce=true"]
    assert experts[1]["source"] == "repo other @ commit"
    assert all(e["placement"] == "jax-default" and e["speedup_of_plan"] >= 1.0 for e in experts)
    assert plan.data["baselines"]["expert"] == experts[0]
    assert {a["strategy"] for a in plan.data["alternatives"]} >= {"data | by-data flags", "tensor"}
    won_with = "--xla_enable_async_all_reduce=true" if plan.strategy["key"] == "data | by-data flags" else ""
    assert plan.data["compiler"]["libtpu_args"] == won_with  # the flags of the chosen program

    alone = plan_space(space, get_topology("v5e:2x2"), top_k=1, verify_top=0, use_cache=False, progress=False,
                       include_experts=False).plan
    assert "experts" not in alone.data["baselines"] and "expert" not in alone.data["baselines"]
    first = next(e["key"] for e in alone.data["stage1"]["entries"] if e["rank"] == 1)
    assert [a["strategy"] for a in alone.data["alternatives"]] == [first]  # Stage 1's Top-1 alone


def _entry_of(cache_dir, plan):
    from aoizora.plan.cache import cache_key

    return cache_dir / f"{cache_key(plan.data['request'])}.json"


@pytest.mark.slow
@pytest.mark.parametrize(
    "corrupt",
    [
        lambda e: e.update(plan={**e["plan"], "notes": ["edited"]}),  # valid plan, checksum disagrees
        lambda e: e["plan"]["prediction"].update(step_seconds=1e-9),  # an edited number
        lambda e: e.update(key="0" * 32),  # an entry copied under another key
    ],
)
def test_plan_cache_entries_that_do_not_match_their_checksum_are_recomputed(planned, caplog, corrupt):
    topo = planned.topo
    first = plan_function(mlp, ARGS, STRATEGIES, topo, top_k=3, verify_top=1, progress=False)
    entry = _entry_of(planned.cache, first.plan)
    doc = json.loads(entry.read_text())
    corrupt(doc)
    entry.write_text(json.dumps(doc))
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        again = plan_function(mlp, ARGS, STRATEGIES, topo, top_k=3, verify_top=1, progress=False)
    assert not again.from_cache and again.plan.predicted_step_seconds == first.plan.predicted_step_seconds
    assert any("discarded plan-cache entry" in r.getMessage() for r in caplog.records)


@pytest.mark.slow
def test_plan_cache_entry_that_is_not_utf8_is_recomputed(planned):
    topo = planned.topo
    first = plan_function(mlp, ARGS, STRATEGIES, topo, top_k=3, verify_top=1, progress=False)
    entry = _entry_of(planned.cache, first.plan)
    entry.write_bytes(b"\xff\xfe" + entry.read_bytes())
    again = plan_function(mlp, ARGS, STRATEGIES, topo, top_k=3, verify_top=1, progress=False)
    assert not again.from_cache


@pytest.mark.slow
def test_compile_cache_entry_with_unparseable_hlo_is_discarded_and_recompiled(planned, caplog):
    """An entry that reads back cleanly (checksum and key right) but whose HLO does not parse must
    not drop its strategy: it is deleted, logged, and the program compiled again."""
    from aoizora.stage2.compile_cache import CompileCache

    compiled_dir = planned.cache / "compiled"
    cache = CompileCache(compiled_dir)
    for path in compiled_dir.glob("*.json.gz"):
        key = path.name[: -len(".json.gz")]
        record = cache.get(key)
        if record is not None and record.hlo_text is not None:
            cache.put(key, type(record)("HloModule broken\n\nENTRY %e {", record.device_ids, record.memory_bytes,
                                        record.compile_seconds, label=record.label))
    with caplog.at_level("WARNING", logger="aoizora.cache"):
        result = plan_function(mlp, ARGS, STRATEGIES, planned.topo, top_k=3, verify_top=1, progress=False,
                               use_cache=False, compile_cache=cache)
    assert not any(str(a.get("dropped", "")).startswith("compile failed") for a in result.plan.data["alternatives"])
    assert result.plan.strategy == planned.result.plan.strategy
    assert result.plan.predicted_step_seconds == pytest.approx(planned.result.plan.predicted_step_seconds, rel=1e-12)
    assert any("discarded compile-cache entry" in r.getMessage() for r in caplog.records)
    compiled = set(result.stage2.compiled)  # a strategy Q1 pruned was not compiled: its entry is not read
    for path in compiled_dir.glob("*.json.gz"):  # rewritten with the real program
        record = cache.get(path.name[: -len(".json.gz")])
        if record is not None and record.label.split(" / ")[0] in compiled:
            assert record.hlo_text is None or "broken" not in record.hlo_text
