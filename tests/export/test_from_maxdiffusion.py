"""`aoizora plan --from-maxdiffusion` keeps what the command says: the plan request (model, size,
frames, steps, flags, the strategy with its tile) and the notes the plan and the output carry."""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest

from aoizora.cli.planning import _plan_request, _user_deployment_line
from aoizora.export.maxdiffusion import facts
from aoizora.models.registry import wan_space
from aoizora.topology import get_topology

DATA = json.loads((Path(__file__).with_name("data") / "maxdiffusion_published_commands.json").read_text())
FAST = next(c for c in DATA["commands"] if c["id"] == "fast-inference-wan22-fixed-m")["command"]
MAGCACHE = next(c for c in DATA["commands"] if c["id"] == "readme-magcache-t2v")["command"]


@pytest.fixture(scope="module")
def fast_space():
    topo = get_topology("tpu7x:2x2x1")
    request = _plan_request(None, None, None, FAST, None, topo)
    return request, wan_space(request.pop("model"), request.pop("resolution"), request.pop("frames"),
                              generation=topo.generation, **dict(request))


def test_fast_recipe_request_keeps_its_tile_steps_and_flags(fast_space):
    request, space = fast_space
    mine = request["user_deployment"]
    assert mine.strategy.splash_blocks.describe() == "6400/2048/2048"
    assert mine.strategy.kernel_profile == "maxdiffusion-custom-fixed-m"
    assert "--xla_tpu_enable_sparse_core_collective_offload_3d_all_gather=true" in mine.libtpu_args
    assert space.scheduler.num_steps == 40
    assert (space.video.width, space.video.height, space.video.frames) == (1280, 720, 81)
    notes = " ".join(mine.notes)
    for key in ("aot_cache_dir", "use_base2_exp", "guidance_scale_low", "flash_block_sizes.block_q_dkv"):
        assert key in notes


def test_plan_records_the_written_tile_and_what_was_compiled(fast_space):
    _, space = fast_space
    recorded = space.workload()["user_deployment"]
    assert "blocks=6400/2048/2048" in recorded["strategy"]
    tile_note = next(n for n in recorded["notes"] if n.startswith("tile 6400/2048/2048"))
    compiled = space._as_compiled(space.user_deployment).strategy.splash_blocks.describe()
    assert compiled != "6400/2048/2048" and f"here at {compiled}" in tile_note
    assert any(n.startswith("not modelled") for n in recorded["notes"])
    # the deployment compared is compiled at the fitted blocks and carries the same notes
    row = space._as_compiled(space.user_deployment)
    assert list(row.notes) == recorded["notes"]


def test_steps_default_to_the_configs_and_follow_the_command():
    topo = get_topology("v5e:2x2")
    base = "base_wan_1_3b.yml ici_data_parallelism=2 ici_context_parallelism=2 per_device_batch_size=0.25"
    config_steps = facts()["configs"]["src/maxdiffusion/configs/base_wan_1_3b.yml"]["values"]["num_inference_steps"]
    assert _plan_request(None, None, None, base, None, topo)["steps"] == config_steps != 50  # not the model's 50
    request = _plan_request(None, None, None, base + " num_inference_steps=30", None, topo)
    space = wan_space(request.pop("model"), request.pop("resolution"), request.pop("frames"),
                      generation=topo.generation, **dict(request))
    assert space.scheduler.num_steps == 30 and space.workload()["scheduler"]["steps"] == 30


def test_skipping_caches_are_named_in_the_notes():
    request = _plan_request(None, None, None, MAGCACHE, None, get_topology("tpu7x:2x2x1"))
    notes = request["user_deployment"].notes
    assert any("use_magcache=True: your run skips transformer passes" in n for n in notes)
    assert any("magcache_thresh=0.04" in n and "magcache_K=2" in n for n in notes)


def test_verdict_line_names_the_written_tile_and_prints_the_notes(capsys, fast_space):
    _, space = fast_space
    row = space._as_compiled(space.user_deployment)
    plan = {"workload": space.workload(),
            "baselines": {"experts": [{**row.to_json(), "strategy": "compiled-key", "step_seconds": 2.5,
                                       "speedup_of_plan": 1.25}]}}
    _user_deployment_line(plan)
    out = capsys.readouterr().out.splitlines()
    assert "blocks=6400/2048/2048" in out[0] and "2500.00 ms/step; the plan is 1.250x faster" in out[0]
    assert out[1].startswith("    note: tile 6400/2048/2048 (maxdiffusion-custom-fixed-m) is not compiled as written")
    assert any(line.startswith("    note: not modelled") and "use_experimental_scheduler" in line for line in out)


def test_disagreeing_options_are_still_refused():
    with pytest.raises(click.UsageError, match="--frames 49 disagrees"):
        _plan_request(None, None, 49, FAST, None, get_topology("tpu7x:2x2x1"))


def test_a_tile_with_published_steps_names_them():
    """The plain kernel at the fixed-m kernel's tile: the profile cannot tell the tiles apart, the
    note gives the published steps that can."""
    plain = next(c for c in DATA["commands"] if c["id"] == "fast-inference-wan22-plain")["command"]
    at_6400 = plain.replace('"block_q":9472,"block_kv":1024,"block_kv_compute":1024',
                            '"block_q":6400,"block_kv":2048,"block_kv_compute":2048')
    assert at_6400 != plain
    topo = get_topology("tpu7x:2x2x1")
    request = _plan_request(None, None, None, at_6400, None, topo)
    space = wan_space(request.pop("model"), request.pop("resolution"), request.pop("frames"),
                      generation=topo.generation, **dict(request))
    note = space.workload()["user_deployment"]["notes"][0]
    assert note.startswith("tile 6400/2048/2048 (maxdiffusion-custom)")
    assert "9472/1024/1024 2.733 s/step" in note and "6400/2048/2048 3.14 s/step" in note
