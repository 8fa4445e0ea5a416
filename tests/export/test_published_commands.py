"""Every Wan command MaxDiffusion publishes, and the tpu-recipes commands aoizora compares against,
read back field by field (`aoizora plan --from-maxdiffusion`): tile, kernel, flags, mesh, attention,
model, size, frames, steps, and the keys aoizora does not model."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from aoizora.errors import ExportError
from aoizora.export import read_command
from aoizora.export.maxdiffusion import facts
from aoizora.models.wan.kernels.experts import FAST_V7_LIBTPU_ARGS, TODAYS_WAN_EXPERTS, TPU_RECIPES
from aoizora.models.wan.transformer.strategy import SplashBlocks
from aoizora.toolchain import CompilerFlags

DATA = json.loads((Path(__file__).with_name("data") / "maxdiffusion_published_commands.json").read_text())
COMMANDS = DATA["commands"]


def test_the_published_commands_are_read_at_the_recorded_commit():
    assert {c["source"]["commit"] for c in COMMANDS} == {facts()["commit"]}
    paths = {c["source"]["path"] for c in COMMANDS}
    assert {"README.md", "end_to_end/tpu/run_wan_fast_inference.sh",
            "src/maxdiffusion/configs/base_wan_27b.yml"} <= paths


def _check(cmd, want: dict, devices: int) -> None:
    st = cmd.strategy(devices)
    assert cmd.model == want["model"]
    assert cmd.attention_name == want["attention"]
    assert st.kernel_profile == want["kernel_profile"]
    if "variant" in want:
        assert st.attention == want["variant"]
    if "ulysses" in want:
        assert st.context_ulysses == want["ulysses"]
    if "chunks" in want:
        assert st.ulysses_chunks == want["chunks"]
    if "blocks" in want:
        b = st.splash_blocks
        assert [b.block_q, b.block_kv, b.block_kv_compute] == want["blocks"]
    if "kernel_options" in want:
        assert cmd.kernel_options() == want["kernel_options"]
    if "flags" in want:
        assert cmd.libtpu_args == CompilerFlags.parse(" ".join(want["flags"]))
    assert cmd.xla_flags == CompilerFlags.parse(" ".join(want["xla_flags"]))
    if "mesh" in want:
        assert {a: getattr(st, a) for a in ("data", "fsdp", "context", "tensor")} == want["mesh"]
    if "size" in want:
        assert list(cmd.video()[:2]) == want["size"] and cmd.video()[2] == want["frames"]
    if "steps" in want:
        assert cmd.steps() == want["steps"]
    if "videos" in want:
        assert cmd.videos(devices) == want["videos"]
    assert [u.split("=", 1)[0] for u in cmd.unmodelled()] == want["unmodelled"]
    assert cmd.skipped_passes() == want["skipped"]
    assert [k for k, _ in cmd.environment] == want.get("environment", [])
    notes = " ".join(cmd.notes())
    for name in want.get("environment", []):
        assert name in notes
    for key in want["unmodelled"]:
        assert key in notes
    if want["skipped"]:
        assert "skips transformer passes" in notes and "per-step comparison is still fair" in notes
    if want["xla_flags"]:
        assert "XLA_FLAGS" in notes


@pytest.mark.parametrize("entry", COMMANDS, ids=lambda c: c["id"])
def test_published_command_reads_as_written(entry):
    if "refused" in entry:
        with pytest.raises(ExportError, match=entry["refused"].replace(".", r"\.")):
            read_command(entry["command"]).videos(entry["devices"])
        return
    _check(read_command(entry["command"]), entry["expect"], entry["devices"])


def test_the_fast_recipe_reads_back_with_its_own_tile_flags_and_kernel():
    entry = next(c for c in COMMANDS if c["id"] == "fast-inference-wan22-fixed-m")
    cmd = read_command(entry["command"])
    st = cmd.strategy(8)
    assert st.splash_blocks == SplashBlocks(6400, 2048, 2048)
    assert st.kernel_profile == "maxdiffusion-custom-fixed-m"
    assert cmd.libtpu_args == CompilerFlags.parse(" ".join(FAST_V7_LIBTPU_ARGS))
    assert dict(cmd.libtpu_args.items)["xla_tpu_scoped_vmem_limit_kib"] == "65536"
    assert cmd.kernel_options()["vmem_limit_bytes"] == 67108864


@pytest.mark.parametrize("row", TODAYS_WAN_EXPERTS, ids=lambda r: r.name)
def test_expert_row_commands_read_with_their_flags(row):
    """The tpu-recipes rows pass their flags as XLA_FLAGS, MaxDiffusion's own as LIBTPU_INIT_ARGS:
    read as each source runs them."""
    recipe = row.source.startswith(TPU_RECIPES)
    env = "XLA_FLAGS" if recipe else "LIBTPU_INIT_ARGS"
    cmd = read_command(f"{env}={shlex.quote(' '.join(row.libtpu_args))} {row.command}")
    devices, (data, context) = row.meshes[0]
    st = cmd.strategy(devices)
    assert cmd.libtpu_args == CompilerFlags.parse(" ".join(row.libtpu_args))
    assert cmd.xla_flags == (cmd.libtpu_args if recipe else CompilerFlags())
    assert (st.data, st.context, st.attention) == (data, context, row.attention)
    assert st.context_ulysses == row.context_ulysses
    assert st.splash_blocks == row.splash_blocks and st.kernel_profile == row.kernel_profile
    if recipe:  # the recipes' commands carry the kernel's keys (the rows of MaxDiffusion's script give them apart)
        assert cmd.kernel_options() == dict(row.kernel_options)
    w, h, frames = cmd.video()
    assert (h, frames) == (720, 81)


def test_conflicting_xla_flags_and_libtpu_args_are_refused():
    with pytest.raises(ExportError, match="--xla_tpu_enable_async_all_to_all"):
        read_command("LIBTPU_INIT_ARGS=--xla_tpu_enable_async_all_to_all=true "
                     "XLA_FLAGS=--xla_tpu_enable_async_all_to_all=false base_wan_14b.yml")
    same = read_command("LIBTPU_INIT_ARGS=--xla_a=1 XLA_FLAGS='--xla_a=1 --xla_b=2' base_wan_14b.yml")
    assert str(same.libtpu_args) == "--xla_a=1 --xla_b=2"
    with pytest.raises(ExportError, match="^XLA_FLAGS: malformed"):
        read_command("XLA_FLAGS=notaflag base_wan_14b.yml")
