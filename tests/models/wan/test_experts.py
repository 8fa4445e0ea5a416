"""The expert Wan deployments: sourced data, per generation, legal strategies."""

import re
from types import SimpleNamespace

from aoizora.models.wan.kernels.experts import (
    MAXDIFFUSION,
    MAXDIFFUSION_COMMIT,
    TODAYS_WAN_EXPERTS,
    TPU_RECIPES,
    WAN_EXPERTS,
    experts_for,
    newest_documented,
)
from aoizora.models.wan.space.space import WanSpace
from aoizora.models.wan.transformer.config import PRESETS, VideoShape
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy
from aoizora.toolchain import CompilerFlags
from aoizora.topology import get_topology

VIDEO = VideoShape(81, 720, 1280)


def test_every_row_is_sourced_and_legal_on_eight_devices():
    assert len(MAXDIFFUSION_COMMIT) == 40
    for e in WAN_EXPERTS:
        assert MAXDIFFUSION in e.source and MAXDIFFUSION_COMMIT in e.source, e.name
        assert e.libtpu_args and all(a.startswith("--xla") for a in e.libtpu_args)
        assert e.splash_blocks is not None and not e.splash_blocks.reasons()


def test_v5e_and_v6e_run_the_readme_command():
    space = WanSpace(PRESETS["t2v-14b"], VIDEO)
    for name, devices, expert, blocks in (("v6e:2x2", 4, "maxdiffusion-readme", SplashBlocks(3024, 2048, 1024)),
                                          ("v5e:2x4", 8, "maxdiffusion-readme-default-blocks",
                                           SplashBlocks(512, 512, 512))):
        (dep,) = space.expert_deployments(get_topology(name))
        assert dep.name == expert
        assert dep.strategy == Strategy(data=2, context=devices // 2, attention="allgather", weights="gathered",
                                        splash_blocks=blocks)
        assert "--xla_tpu_overlap_compute_collective_tc=true" in dep.libtpu_args and len(dep.libtpu_args) == 5
    assert space.expert_strategy(8) == space.expert_deployments(get_topology("v5e:2x4"))[0].strategy


def test_tpu7x_has_the_2d_context_and_the_flash_deployment():
    space = WanSpace(PRESETS["t2v-14b"], VIDEO)
    tpu7x_8 = SimpleNamespace(generation="tpu7x", num_devices=8)  # 4 chips × 2 TensorCores
    two_d, flash = space.expert_deployments(tpu7x_8)
    blocks = SplashBlocks(block_q=2048, block_kv=2048, block_kv_compute=1024)
    assert two_d.name == "maxdiffusion-2d-context" and "208.0" in two_d.documented
    assert two_d.strategy == Strategy(data=2, context=4, context_ulysses=2, attention="ulysses_ring",
                                      weights="gathered", splash_blocks=blocks)
    assert two_d.strategy.key().startswith("data=2,context_ring=2,context_ulysses=2 ")
    assert flash.name == "maxdiffusion-flash" and "231.3" in flash.documented
    assert flash.strategy == Strategy(data=2, context=4, attention="allgather", weights="gathered",
                                      splash_blocks=blocks)
    assert "--xla_tpu_enable_async_all_to_all=true" in two_d.libtpu_args
    # on 16 devices the Ulysses pair stays on a chip's two cores, the ring grows
    (big, _) = space.expert_deployments(SimpleNamespace(generation="tpu7x", num_devices=16))
    assert (big.strategy.context_ulysses, big.strategy.context_ring) == (2, 4)


def test_generations_without_a_row_fall_back_to_the_readme_and_illegal_ones_are_dropped():
    assert [e.name for e in experts_for("v5p")] == ["maxdiffusion-readme-default-blocks"]
    # 3 devices: no CFG split; the README's context=3 is legal, 2D context is not (U=2 does not divide 3)
    space = WanSpace(PRESETS["t2v-1.3b"], VideoShape(5, 480, 832))
    deps = space.expert_deployments(SimpleNamespace(generation="tpu7x", num_devices=3))
    assert [d.name for d in deps] == ["maxdiffusion-flash"] and deps[0].strategy.data == 1


def test_todays_rows_are_sourced_dated_and_carry_kernel_tiles_and_vmem():
    for e in TODAYS_WAN_EXPERTS:
        assert ((MAXDIFFUSION in e.source or TPU_RECIPES in e.source)
                and re.search(r"\b[0-9a-f]{40}\b", e.source)), e.name
        assert re.fullmatch(r"2026-\d\d-\d\d", e.date) and e.date > "2026-04-25", e.name
        assert e.kernel_profile.startswith("maxdiffusion-custom") and not e.splash_blocks.reasons()
        assert CompilerFlags.parse(" ".join(e.libtpu_args)), e.name
        assert e.meshes and all(d * c == n for n, (d, c) in e.meshes)
    by_name = {e.name: e for e in TODAYS_WAN_EXPERTS}
    assert by_name["maxdiffusion-fast-v7-fixed-m"].scoped_vmem_limit_kib == 65536
    assert by_name["tpu-recipes-trillium-wan22"].scoped_vmem_limit_kib == 32768
    assert by_name["tpu-recipes-ironwood-wan22"].scoped_vmem_limit_kib is None
    assert by_name["maxdiffusion-27b-cp8"].strategy(8) == Strategy(
        context=8, attention="ulysses_ring", context_ulysses=4, weights="gathered",
        splash_blocks=SplashBlocks(9472, 1024, 1024))


def test_the_newest_documented_row_per_generation_is_todays():
    assert newest_documented("tpu7x").date == max(e.date for e in TODAYS_WAN_EXPERTS if "tpu7x" in e.generations)
    assert newest_documented("v6e").name == "tpu-recipes-trillium-wan22"
    assert newest_documented("v5e") is None
    # today's rows run kernels aoizora does not cost yet: never Stage 2 candidates
    assert not set(experts_for("tpu7x")) & set(TODAYS_WAN_EXPERTS)
