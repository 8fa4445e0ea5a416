"""The committed plans Stage 2 made on MaxDiffusion's own program (`aoizora plan --program
maxdiffusion`, docs/data/plans/maxdiffusion-program/), re-read without MaxDiffusion: each records
the program and MaxDiffusion's commit, its chosen strategy was compiled, and its export configures
MaxDiffusion exactly as the program that was compiled and costed was configured."""

from __future__ import annotations

from pathlib import Path

import pytest

from aoizora.export import export_plan
from aoizora.models import registry
from aoizora.models.maxdiffusion import program
from aoizora.models.maxdiffusion.overrides import facts
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.plan import load_plan

ROOT = Path(__file__).parents[3]
PLANS = sorted((ROOT / "docs/data/plans/maxdiffusion-program").glob("*.json"))


def test_there_are_committed_plans_on_maxdiffusions_program():
    for slice_ in ("v6e-2x4", "tpu7x-2x2x1"):
        assert any(p.name.startswith(f"{slice_}_wan2.1-t2v-14b_720p_81f") for p in PLANS), slice_


@pytest.mark.parametrize("path", PLANS, ids=lambda p: p.name)
def test_the_plan_records_the_program_and_exports_what_was_compiled(path, monkeypatch, tmp_path):
    plan = load_plan(path)
    record = plan.data["workload"]["program"]
    assert record["name"] == "maxdiffusion" and record["repository"] == facts()["repository"]
    assert record["facts_commit"] == facts()["commit"]
    assert record.get("adjustments", []) == program.adjustments(plan.data["topology"]["generation"])
    assert plan.data["strategy"]["key"] in plan.data["stage2"]["compiled_strategies"]
    monkeypatch.setattr(program, "maxdiffusion_source", lambda: program.MaxDiffusionSource(tmp_path, None))
    shapes = plan.data["workload"]["shapes"]
    space = registry.wan_space(plan.data["workload"]["name"], f"{shapes['width']}x{shapes['height']}",
                               shapes["frames"], generation=plan.data["topology"]["generation"],
                               program="maxdiffusion")
    strategy = Strategy.from_description(plan.strategy, kernel=plan.strategy.get("kernel", "auto"))
    config, compiled_with = program.step_overrides(space, strategy)
    run = export_plan(plan)
    exported = dict(run.overrides)
    assert config == run.config
    assert {k: v for k, v in compiled_with if k in exported} == {k: exported[k] for k, _ in compiled_with
                                                                  if k in exported}
    assert {k for k in exported if k.startswith("ici_")} <= dict(compiled_with).keys()
