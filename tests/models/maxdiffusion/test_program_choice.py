"""`--program maxdiffusion` without MaxDiffusion: refused in one line that says how to install it;
and its plumbing (the request, the space, the plan's record, the overrides, the mesh, the kernel
cost), none of which needs MaxDiffusion."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from click.testing import CliRunner

from aoizora.api import plan_wan, wan_request
from aoizora.cli import cli
from aoizora.errors import ArgumentError, MaxDiffusionUnavailable
from aoizora.export import export_plan
from aoizora.hlo.program import OpaqueOp
from aoizora.hlo.shapes import Shape
from aoizora.models import registry
from aoizora.models.maxdiffusion import program
from aoizora.models.maxdiffusion.overrides import facts
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.plan import load_plan
from aoizora.topology import get_topology

ROOT = Path(__file__).parents[3]
PLAN = ROOT / "docs/data/plans/v6e-2x4_wan2.1-t2v-14b_720p_81f.json"


@pytest.fixture
def no_maxdiffusion(monkeypatch):
    """This Python as if MaxDiffusion were not installed and no checkout were named."""
    monkeypatch.delenv(program.CHECKOUT_VARIABLE, raising=False)
    monkeypatch.setattr(program, "MODULES", ("maxdiffusion_not_installed_here",))


@pytest.fixture
def fake_maxdiffusion(monkeypatch, tmp_path):
    """MaxDiffusion as if importable from a checkout at a known commit (nothing of it is run)."""
    monkeypatch.setattr(program, "maxdiffusion_source",
                        lambda: program.MaxDiffusionSource(tmp_path, "0123456789abcdef0123456789abcdef01234567"))


def test_the_library_refuses_with_a_typed_error_that_says_how_to_install(no_maxdiffusion):
    with pytest.raises(MaxDiffusionUnavailable) as info:
        registry.wan_space("wan2.1-t2v-1.3b", "480p", 5, generation="v5e", program="maxdiffusion")
    message = str(info.value)
    assert "\n" not in message
    assert program.CHECKOUT_VARIABLE in message and "CONTRIBUTING.md" in message and facts()["commit"][:8] in message


def test_a_directory_that_is_not_a_checkout_is_refused(monkeypatch, tmp_path):
    monkeypatch.setenv(program.CHECKOUT_VARIABLE, str(tmp_path))
    with pytest.raises(MaxDiffusionUnavailable, match="is not a MaxDiffusion checkout"):
        program.maxdiffusion_source()


def test_the_cli_refuses_in_one_line_with_a_non_zero_exit(no_maxdiffusion):
    result = CliRunner().invoke(cli, ["plan", "--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--resolution",
                                      "480p", "--frames", "5", "--program", "maxdiffusion"], catch_exceptions=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code != 0 and len(lines) == 1, result.output
    assert "MaxDiffusion" in lines[0] and program.CHECKOUT_VARIABLE in lines[0]


def test_an_unknown_program_or_a_model_without_maxdiffusions_step_is_refused(fake_maxdiffusion):
    with pytest.raises(ArgumentError, match="program must be one of"):
        plan_wan("wan2.1-t2v-1.3b", "v5e:2x2", "480p", 5, program="jax")
    with pytest.raises(ArgumentError, match="text-to-video step .*not 'wan2.1-i2v-14b'"):
        registry.wan_space("wan2.1-i2v-14b", "480p", 5, generation="v5e", program="maxdiffusion")
    with pytest.raises(ArgumentError, match="text-to-video step .*not 'wan2.2-ti2v-5b'"):
        registry.wan_space("wan2.2-ti2v-5b", "480p", 5, generation="v5e", program="maxdiffusion")


def test_wan22_a14b_runs_maxdiffusions_step_with_both_experts_resident(fake_maxdiffusion):
    space = registry.wan_space("wan2.2-t2v-a14b", "720p", 81, generation="tpu7x", program="maxdiffusion")
    assert space.program == "maxdiffusion" and len(program._resident_experts(space)) == 1
    config, _ = program.step_overrides(space, next(c.strategy for c in space.candidates(8) if c.legal))
    assert config.endswith("base_wan_27b.yml")
    # MaxDiffusion has no expert swap: a plan of its program with one expert resident is refused
    with pytest.raises(ArgumentError, match="keeps both experts in HBM"):
        registry.wan_space("wan2.2-t2v-a14b", "720p", 81, generation="tpu7x", program="maxdiffusion",
                           expert_residency="swap")


def test_the_request_carries_the_program_to_the_space_and_the_plan_records_it(fake_maxdiffusion):
    topo = get_topology("v5e:2x2")
    request = wan_request("wan2.1-t2v-1.3b", "480p", 5, kernel=None, from_maxdiffusion=None, topology=topo,
                          program="maxdiffusion")
    assert request["program"] == "maxdiffusion"
    from aoizora.api import wan_request_space

    space = wan_request_space(request, topo)
    record = space.workload()["program"]
    assert record["name"] == "maxdiffusion" and record["commit"].startswith("0123456789ab")
    assert record["facts_commit"] == facts()["commit"] and record["repository"] == facts()["repository"]
    strategy = next(c.strategy for c in space.candidates(4) if c.legal)
    assert isinstance(space.compile_inputs(strategy, None), program.MaxDiffusionStep)


def test_the_default_program_is_aoizoras_and_its_plans_are_as_before():
    space = registry.wan_space("wan2.1-t2v-1.3b", "480p", 5, generation="v5e")
    assert space.program == "aoizora" and space.program_source is None and "program" not in space.workload()


def test_the_program_is_configured_with_the_overrides_the_export_writes(fake_maxdiffusion):
    plan = load_plan(PLAN)
    run = export_plan(plan)
    space = registry.wan_space("wan2.1-t2v-14b", "720p", 81, generation="v6e", program="maxdiffusion")
    strategy = Strategy.from_description(plan.strategy, kernel=plan.strategy.get("kernel", "auto"))
    config, overrides = program.step_overrides(space, strategy)
    assert config == run.config
    mine, exported = dict(overrides), dict(run.overrides)
    shared = set(mine) & set(exported)
    assert {k for k in exported if k.startswith("ici_")} | {"attention", "flash_block_sizes"} <= shared
    assert {k: mine[k] for k in shared} == {k: exported[k] for k in shared}
    assert mine["skip_jax_distributed_system"] == "true"


def test_maxdiffusions_mesh_merges_2d_context_ring_outer_with_every_device_kept():
    strategy = Strategy(data=1, fsdp=1, context=4, tensor=2, attention="ulysses_ring", context_ulysses=2)
    devices = np.arange(8).reshape(strategy.mesh_shape)
    mesh = SimpleNamespace(axis_names=strategy.mesh_axes, devices=devices,
                           shape=dict(zip(strategy.mesh_axes, strategy.mesh_shape, strict=True)))
    arranged = program.maxdiffusion_devices(strategy, mesh)
    assert arranged.shape == (1, 1, 4, 2)
    assert facts()["context_split"]["outer_first"] == ["ring", "ulysses"]
    # context index = ring * ulysses_size + ulysses
    for r in range(2):
        for u in range(2):
            assert arranged[0, 0, r * 2 + u].tolist() == devices[0, 0, r, u].tolist()


def _splash(name: str, q: tuple[int, ...], k: tuple[int, ...], blocks: dict[str, int] | None) -> OpaqueOp:
    attributes = None
    if blocks is not None:
        attributes = 'kernel_metadata={"xprof_metadata":"' + json.dumps(blocks).replace('"', '\\"') + '"}'
    return OpaqueOp(name=f"{name}.2", target="tpu_custom_call",
                    operand_shapes=(Shape("s8", (1, 8, 16)), Shape("bf16", q), Shape("bf16", k), Shape("bf16", k)),
                    result_shape=Shape("bf16", q), backend_config=None, kernel_name=name,
                    frontend_attributes=attributes)


def test_a_splash_call_of_maxdiffusions_program_is_costed_from_its_own_shapes_and_blocks():
    strategy = Strategy(data=1, fsdp=1, context=4, tensor=1, attention="ulysses")
    op = _splash("splash_mha_fwd_segmented_no_residuals", (6, 32768, 128), (6, 32768, 128),
                 {"block_q": 4096, "block_kv": 2048, "block_kv_compute": 2048})
    cost = program.kernel_cost(strategy, op)
    assert cost is not None and cost.flops == 4.0 * 6 * 32768 * 32768 * 128
    wider = program.kernel_cost(strategy, _splash("splash_mha_fwd_segmented_no_residuals", (6, 32768, 128),
                                                  (6, 32768, 128), {"block_q": 1024, "block_kv": 2048}))
    assert wider is not None and wider.hbm_bytes is not None and cost.hbm_bytes is not None
    assert wider.hbm_bytes > cost.hbm_bytes  # K/V streamed once per Q block: smaller blocks, more bytes
    cross = program.kernel_cost(strategy, _splash("splash_mha_fwd_segmented_no_residuals", (6, 32768, 128),
                                                  (6, 512, 128), None))
    assert cross is not None and cross.flops == 4.0 * 6 * 32768 * 512 * 128
    other = OpaqueOp(name="custom-call.3", target="tpu_custom_call", operand_shapes=(Shape("f32", (8, 128)),),
                     result_shape=Shape("f32", (8, 128)), backend_config=None, kernel_name="rms_norm")
    assert program.kernel_cost(strategy, other) is None


def test_maxdiffusions_own_kernel_is_costed_by_the_profile_where_attention_calls_it():
    """Its custom splash kernels compile as `vmap()`'d Pallas calls with no kernel name: found by the
    call's place in the step (inside an attention), costed by the strategy's kernel profile."""
    strategy = Strategy(data=2, context=4, attention="ulysses_ring", context_ulysses=2,
                        kernel_profile="maxdiffusion-custom")
    q = Shape("bf16", (20, 37888, 128))
    path = "jit(transformer_forward_pass_full_cfg)/WanModel/while/body/apply_attention/shard_map/vmap()/pallas_call"
    op = OpaqueOp(name="vmap__.2", target="tpu_custom_call", operand_shapes=(Shape("f32", (2, 20)), q, q, q),
                  result_shape=q, backend_config=None, kernel_name="vmap()", op_name=path)
    cost = program.kernel_cost(strategy, op)
    assert cost is not None and cost.flops == 4.0 * 20 * 37888 * 37888 * 128
    elsewhere = OpaqueOp(name="vmap__.3", target="tpu_custom_call", operand_shapes=(q, q, q), result_shape=q,
                         backend_config=None, kernel_name="vmap()", op_name="jit(step)/WanModel/ffn/pallas_call")
    assert program.kernel_cost(strategy, elsewhere) is None


def test_a_commit_whose_step_computes_its_rotary_table_records_no_adjustment(tmp_path):
    earlier = program.MaxDiffusionSource(tmp_path, "4e694cebe7ab75a633ee818819f59b842a128cce", takes_rotary_table=False)
    assert "adjustments" not in earlier.to_json("tpu7x")
    later = program.MaxDiffusionSource(tmp_path, facts()["commit"])
    assert later.to_json("tpu7x")["adjustments"] == program.adjustments("tpu7x") != []
    assert "adjustments" not in later.to_json("v6e")
