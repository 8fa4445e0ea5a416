"""`aoizora export --to maxdiffusion` against MaxDiffusion's own definitions (recorded facts)."""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from aoizora.errors import ExportError
from aoizora.export import export_plan, read_command, write_maxdiffusion_export
from aoizora.export.maxdiffusion import ATTENTION_NAMES, MODEL_CONFIGS, VARIANTS, facts
from aoizora.export.maxdiffusion_command import _typed
from aoizora.export.run_with_plan import LaunchError, generate_wan_argv, plan_device_array, planned_create_device_mesh
from aoizora.models.registry import model_config, video_shape
from aoizora.models.wan.kernels.custom_tiles import custom_kernel_tile
from aoizora.models.wan.kernels.experts import TODAYS_WAN_EXPERTS
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy, check_strategy
from aoizora.plan import Plan, load_plan
from aoizora.topology import get_topology

ROOT = Path(__file__).parents[2]
PLANS = sorted((ROOT / "docs" / "data" / "plans").rglob("*.json"))
TPU7X_PLAN = ROOT / "docs/data/plans/tpu7x-2x2x1_wan2.1-t2v-14b_720p_81f_top11.json"


def plan_with(base: Path, strategy: Strategy, *, model: str | None = None, order_seed: int = 0) -> Plan:
    """A copy of a real plan with another strategy, its devices in a shuffled order (a placement
    the export must carry over device by device)."""
    doc = copy.deepcopy(json.loads(base.read_text()))
    doc["mesh"] = {"axis_names": list(strategy.mesh_axes), "axis_sizes": list(strategy.mesh_shape)}
    desc = {"key": strategy.key(), "mesh": strategy.axis_sizes, "attention": strategy.attention,
            "weights": strategy.weights, "kernel": strategy.kernel}
    if strategy.ulysses_chunks != 1:
        desc["ulysses_chunks"] = strategy.ulysses_chunks
    if strategy.splash_blocks is not None:
        desc["splash_blocks"] = vars(strategy.splash_blocks)
    if strategy.kernel_profile != "jax-splash":
        desc["kernel_profile"] = strategy.kernel_profile
    if strategy.ring_layout != "sequence_major":
        desc["ring_layout"] = strategy.ring_layout
    doc["strategy"] = desc
    coords = np.asarray(doc["placement"]["device_coords"]).reshape(-1, 4)
    coords = coords[np.random.default_rng(order_seed).permutation(len(coords))]
    doc["placement"]["device_coords"] = coords.reshape(*strategy.mesh_shape, 4).tolist()
    doc.pop("baselines")  # placed for the original strategy's mesh
    doc["workload"]["kernel"] = strategy.kernel
    if model is not None:
        doc["workload"]["name"] = model
    doc["request"]["workload"] = doc["workload"]  # the request restates the workload
    return Plan(doc)


STRATEGIES = [
    Strategy(data=2, context=4, attention="allgather", weights="gathered",
             splash_blocks=SplashBlocks(3024, 2048, 1024)),
    Strategy(data=2, context=4, attention="ulysses", weights="replicated", ulysses_chunks=2,
             splash_blocks=SplashBlocks(3072, 2048, 1024)),
    Strategy(fsdp=2, context=4, attention="ring", weights="gathered", splash_blocks=SplashBlocks(2816, 2048, 1024)),
    Strategy(data=2, context=2, tensor=2, attention="allgather", weights="gathered+tensor"),
    Strategy(data=2, context=2, tensor=2, attention="allgather", weights="tensor",
             splash_blocks=SplashBlocks(2944, 2048, 1024)),
    Strategy(context=8, attention="ulysses_ring", context_ulysses=4, weights="gathered", ulysses_chunks=2,
             splash_blocks=SplashBlocks(9472, 1024, 1024)),
    Strategy(data=2, fsdp=2, context=2, attention="ring", weights="gathered"),
    Strategy(data=2, context=4, attention="ulysses", weights="gathered", kernel_profile="maxdiffusion-custom",
             splash_blocks=SplashBlocks(4864, 1024, 1024)),
    Strategy(data=2, context=4, attention="ulysses_ring", context_ulysses=2, weights="gathered",
             kernel_profile="maxdiffusion-custom-fixed-m", splash_blocks=SplashBlocks(6400, 2048, 2048)),
    Strategy(data=2, context=4, attention="allgather", weights="gathered", kernel_profile="tokamax-splash",
             splash_blocks=SplashBlocks(2048, 2048, 1024)),
]


def _as_run(strategy: Strategy, run, plan: Plan) -> Strategy:
    """The strategy the exported command runs: MaxDiffusion's kernel for it (JAX's splash has no
    ring attention there), which the export names as a difference; a custom kernel at its own tile
    (`custom_tiles`), with its own keys."""
    profile = VARIANTS[dict(run.overrides)["attention"]][1]
    if profile != strategy.kernel_profile:
        assert any("tokamax" in d for d in run.differences)
    blocks = strategy.splash_blocks
    if profile.startswith("maxdiffusion-custom"):
        written = json.loads(dict(run.overrides)["flash_block_sizes"])
        tile = custom_kernel_tile(strategy, plan.data["workload"]["shapes"]["tokens"],
                                  get_topology(run.slice["name"]).generation)
        assert tile is not None and written["block_kv_compute_in"] == tile.block_kv_compute_in
        assert written.get("vmem_limit_bytes") == tile.vmem_limit_bytes and written["heads_per_tile"] == 1
        if tile.blocks != blocks:
            assert any(f"its own tile {tile.blocks.describe()}" in d for d in run.differences)
        blocks = tile.blocks
    return Strategy(**{**vars(strategy), "kernel_profile": profile, "splash_blocks": blocks})


def _round_trip(plan: Plan) -> tuple[Strategy, list]:
    run = export_plan(plan)
    cmd = read_command(run.generate_wan_line())
    return cmd.strategy(len(np.asarray(plan.device_coords).reshape(-1, plan.device_coords.shape[-1]))), run


def test_facts_name_their_source_commit_and_configs():
    f = facts()
    assert f["repository"] == "github.com/AI-Hypercomputer/maxdiffusion" and len(f["commit"]) == 40
    assert set(MODEL_CONFIGS.values()) <= set(f["configs"])
    assert set(ATTENTION_NAMES.values()) | set(VARIANTS) <= set(f["attentions"]["registered"])
    # the names aoizora reads back as tokamax's kernels are those MaxDiffusion runs on tokamax
    tokamax = {n for n, (_, p) in VARIANTS.items() if p == "tokamax-splash"}
    assert tokamax <= set(f["flash_block_sizes"]["tokamax_attentions"])
    assert f["context_split"]["outer_first"] == ["ring", "ulysses"]
    # the launcher's replacement takes effect only where MaxDiffusion looks the function up at call time
    assert f["mesh_call_sites"] and all(site["looked_up_at_call"] for site in f["mesh_call_sites"])


def test_every_kernel_and_variant_a_space_plans_has_a_maxdiffusion_name():
    from aoizora.models.wan.transformer.kernel_profiles import KERNEL_PROFILES

    planned = {(name, v) for name, p in KERNEL_PROFILES.items() for v in p.variants}
    assert planned == set(ATTENTION_NAMES)


@pytest.mark.parametrize("strategy", STRATEGIES, ids=Strategy.key)
def test_every_key_and_value_the_export_writes_exists_with_its_type(strategy):
    run = export_plan(plan_with(TPU7X_PLAN, strategy))
    types = facts()["configs"][run.config]["types"]
    for key, value in run.overrides:
        assert key in types, key
        typed = _typed(key, value, types[key])  # raises unless pyconfig would parse it as that type
        assert type(typed).__name__ == types[key], (key, value)
    attention = dict(run.overrides)["attention"]
    assert attention in facts()["attentions"]["registered"]
    if strategy.two_d_context:
        assert attention in facts()["attentions"]["ulysses_ring"]


@pytest.mark.parametrize("strategy", STRATEGIES, ids=Strategy.key)
def test_exported_command_parses_back_to_the_plans_strategy(strategy):
    plan = plan_with(TPU7X_PLAN, strategy)
    back, run = _round_trip(plan)
    assert back == _as_run(strategy, run, plan)


@pytest.mark.parametrize("attention,uly", [("ring", 1), ("ulysses_ring", 2)])
def test_a_heads_major_ring_exports_as_maxdiffusions_ring_and_says_so(attention, uly):
    strategy = Strategy(data=2, context=4, attention=attention, context_ulysses=uly, weights="gathered",
                        splash_blocks=SplashBlocks(2816, 2048, 1024), ring_layout="heads_major")
    plan = plan_with(TPU7X_PLAN, strategy)
    back, run = _round_trip(plan)
    assert back == _as_run(dataclasses.replace(strategy, ring_layout="sequence_major"), run, plan)
    assert [d for d in run.differences if d.startswith("strategy.ring_layout")] == [
        "strategy.ring_layout: the plan's ring rotates K/V in the heads_major layout; MaxDiffusion has no setting "
        "for it: its ring kernels rotate them in their own kernel's layout"]


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.name)
def test_committed_plans_round_trip(path):
    plan = load_plan(path)
    back, run = _round_trip(plan)
    planned = Strategy.from_description(plan.strategy)
    # the one setting MaxDiffusion lacks is named, not silently dropped
    if planned.weight_tile is not None:
        assert any(d.startswith("strategy.weight_tile") for d in run.differences)
    assert any(d.startswith("strategy.ring_layout") for d in run.differences) == (
        planned.ring_layout == "heads_major" and planned.context > 1)
    # the scoped-VMEM limit chosen with the tile travels as a libtpu flag; MaxDiffusion's ring has its own layout
    assert back == _as_run(Strategy(**{**vars(planned), "weight_tile": None, "scoped_vmem_kib": None,
                                       "ring_layout": "sequence_major"}), run, plan)
    if planned.scoped_vmem_kib is not None:
        assert f"--xla_tpu_scoped_vmem_limit_kib={planned.scoped_vmem_kib}" in run.libtpu_args.split()


def _maxdiffusion_internal_mesh(device_array: np.ndarray, ulysses: int) -> np.ndarray:
    """MaxDiffusion's 2D context mesh from its public one, as the recorded facts say it splits
    `context` (`_create_internal_ulysses_ring_mesh`): context's index becomes (outer, inner)."""
    outer_first = facts()["context_split"]["outer_first"]
    axes = facts()["configs"][MODEL_CONFIGS["wan2.1-t2v-14b"]]["values"]["mesh_axes"]
    c = axes.index("context")
    ring = device_array.shape[c] // ulysses
    sizes = {"ring": ring, "ulysses": ulysses}
    split = device_array.reshape(device_array.shape[:c] + tuple(sizes[a] for a in outer_first)
                                 + device_array.shape[c + 1:])
    if outer_first == ["ulysses", "ring"]:
        split = np.swapaxes(split, c, c + 1)
    return split  # (data, fsdp, ring, ulysses, tensor)


def _fake_devices(plan: Plan) -> list:
    topo = get_topology(plan.topology_name)
    kind = plan.data["topology"]["device_kinds"][0]
    devices = [SimpleNamespace(id=i, coords=tuple(d.coords), core_on_chip=getattr(d, "core_on_chip", 0),
                               device_kind=kind) for i, d in enumerate(topo.devices)]
    return list(reversed(devices))  # the runtime's order is not the plan's


@pytest.mark.parametrize("ulysses", [2, 4])
def test_context_ulysses_lands_on_the_planned_devices_inside_maxdiffusion(tmp_path, ulysses):
    strategy = Strategy(context=8, attention="ulysses_ring", context_ulysses=ulysses, weights="gathered")
    plan = plan_with(TPU7X_PLAN, strategy, order_seed=3)
    run = write_maxdiffusion_export(plan, tmp_path)
    spec = json.loads((tmp_path / "maxdiffusion_plan.json").read_text())
    array = plan_device_array(_fake_devices(plan), spec)
    mesh_fn = planned_create_device_mesh(spec, array)
    config = SimpleNamespace(**{k: int(v) for k, v in run.overrides if k.startswith("ici_")})
    public = mesh_fn(config)
    internal = _maxdiffusion_internal_mesh(public, ulysses)
    planned = plan.device_coords  # (data, fsdp, context_ring, context_ulysses, tensor, coords)
    for idx in np.ndindex(*strategy.mesh_shape):
        d = internal[idx]
        assert list(d.coords) + [d.core_on_chip] == list(planned[idx])


def test_launcher_replacement_has_create_device_mesh_signature(tmp_path):
    plan = load_plan(TPU7X_PLAN)
    write_maxdiffusion_export(plan, tmp_path)
    spec = json.loads((tmp_path / "maxdiffusion_plan.json").read_text())
    fn = planned_create_device_mesh(spec, plan_device_array(_fake_devices(plan), spec))
    params = [(p.name, "<required>" if p.default is inspect.Parameter.empty else p.default)
              for p in inspect.signature(fn).parameters.values()]
    recorded = [(p["name"], p["default"]) for p in facts()["create_device_mesh"]["parameters"]]
    assert params == recorded
    assert facts()["generate_wan_main"]["parameters"] == ["argv"]


def test_launcher_refuses_another_mesh_and_planned_overrides(tmp_path):
    plan = load_plan(TPU7X_PLAN)
    write_maxdiffusion_export(plan, tmp_path)
    spec = json.loads((tmp_path / "maxdiffusion_plan.json").read_text())
    fn = planned_create_device_mesh(spec, plan_device_array(_fake_devices(plan), spec))
    with pytest.raises(LaunchError, match="ici_"):
        fn(SimpleNamespace(ici_data_parallelism=1, ici_fsdp_parallelism=1, ici_context_parallelism=8,
                           ici_tensor_parallelism=1))
    with pytest.raises(LaunchError, match="set by the plan"):
        generate_wan_argv(spec, ["attention=flash"])
    assert generate_wan_argv(spec, ["prompt=a cat"])[-1] == "prompt=a cat"
    other = [SimpleNamespace(id=i, coords=(i, 0, 0), core_on_chip=0, device_kind="TPU v6 lite") for i in range(8)]
    with pytest.raises(LaunchError, match="TPU7x"):
        plan_device_array(other, spec)


def test_export_writes_nothing_for_what_maxdiffusion_cannot_express(tmp_path):
    with pytest.raises(ExportError, match=r"^workload.name: .*wan2.2-ti2v-5b"):
        write_maxdiffusion_export(plan_with(TPU7X_PLAN, STRATEGIES[0], model="wan2.2-ti2v-5b"), tmp_path / "a")
    xla = Strategy(data=2, context=4, attention="allgather", weights="gathered", kernel="xla")
    with pytest.raises(ExportError, match=r"^strategy.kernel"):
        write_maxdiffusion_export(plan_with(TPU7X_PLAN, xla), tmp_path / "b")
    custom_flash = Strategy(data=2, context=4, attention="allgather", weights="gathered",
                            kernel_profile="maxdiffusion-custom")
    with pytest.raises(ExportError, match=r"^strategy.kernel_profile: .*no maxdiffusion-custom kernel"):
        write_maxdiffusion_export(plan_with(TPU7X_PLAN, custom_flash), tmp_path / "c")
    assert not any((tmp_path / d).exists() for d in "abc")


def test_weight_modes_maxdiffusion_rules_do_not_produce_get_their_own_rules():
    default = export_plan(plan_with(TPU7X_PLAN, STRATEGIES[0]))  # gathered over context: MaxDiffusion's rule
    assert "logical_axis_rules" not in dict(default.overrides)
    replicated = export_plan(plan_with(TPU7X_PLAN, STRATEGIES[1]))
    rules = dict(replicated.overrides)["logical_axis_rules"]
    assert "embed" not in rules and '"mlp"' not in rules


@pytest.mark.parametrize("row", TODAYS_WAN_EXPERTS, ids=lambda r: r.name)
def test_expert_commands_read_back_to_the_expert_strategies(row):
    cmd = read_command(row.command)
    devices, _ = row.meshes[0]
    assert cmd.strategy(devices) == Strategy(**{**vars(row.strategy(devices)), "kernel_profile": row.kernel_profile})
    assert cmd.attention_name == row.maxdiffusion_attention
    config = model_config(cmd.model)
    assert not check_strategy(cmd.strategy(devices), config, video_shape(config, "1280x720", 81), 2, devices)


@pytest.mark.parametrize("text, fragment", [
    ("python generate_wan.py", "one Wan config"),
    ("src/maxdiffusion/configs/base_flux_dev.yml attention=flash", "reads the Wan configs"),
    ("base_wan_14b.yml no_such_key=1", "no_such_key: not a key"),
    ("base_wan_14b.yml ici_data_parallelism=two", "not a int"),
    ("base_wan_14b.yml attention=cudnn_flash_te", "cannot read"),
    ("base_wan_14b.yml 'unclosed", "cannot split"),
])
def test_bad_maxdiffusion_commands_say_what_is_wrong(text, fragment):
    with pytest.raises(ExportError, match=fragment):
        read_command(text).strategy(8)


def test_export_files_take_the_umask_and_leave_no_staging(tmp_path):
    import os

    old = os.umask(0o022)
    try:
        write_maxdiffusion_export(load_plan(TPU7X_PLAN), tmp_path)
    finally:
        os.umask(old)
    modes = {p.name: p.stat().st_mode & 0o777 for p in tmp_path.iterdir()}
    assert modes == {"run_with_plan.py": 0o644, "plan_devices.py": 0o644, "maxdiffusion_plan.json": 0o644,
                     "command.sh": 0o755}
