"""Compiler flags are part of a plan: parsed, checked by libtpu, passed to every compile, keyed, recorded."""

import jax
import jax.numpy as jnp
import pytest
from click.testing import CliRunner
from jax.sharding import PartitionSpec as P

from aoizora.cli import cli
from aoizora.errors import CompilerFlagError
from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.plan import FunctionStrategy, plan_function
from aoizora.plan.function_space import FunctionSpace
from aoizora.stage2.compile_cache import CompileCache
from aoizora.stage2.compiling import compile_strategy
from aoizora.toolchain import CompilerFlags, check_compiler_flags
from aoizora.topology import get_topology

ASYNC_ALL_REDUCE = "--xla_enable_async_all_reduce=true"
# MaxDiffusion's Wan flags (AI-Hypercomputer/maxdiffusion README.md): together they send the program
# through libtpu's async collective pass (no single one of them does for this program)
ASYNC_COLLECTIVE_FUSION = (
    "--xla_tpu_enable_async_collective_fusion=true --xla_tpu_enable_async_collective_fusion_fuse_all_reduce=true "
    "--xla_tpu_enable_async_collective_fusion_multiple_steps=true --xla_tpu_overlap_compute_collective_tc=true "
    "--xla_enable_async_all_reduce=true"
)


def test_flags_parse_as_libtpu_init_args_writes_them():
    flags = CompilerFlags.parse("  --b=false --a --b=true ")
    assert flags.compiler_options() == {"a": "true", "b": "true"}  # bare flag is true; the last value wins
    assert str(flags) == "--a=true --b=true"
    assert CompilerFlags.parse(str(flags)) == flags
    assert (flags.merged(CompilerFlags.parse("--a=false --c=1")).compiler_options()
            == {"a": "false", "b": "true", "c": "1"})
    assert not CompilerFlags.parse(None) and not CompilerFlags.parse("")
    for bad in ("xla_flag=true", "--=x", "-x=1", "--9lives"):
        with pytest.raises(CompilerFlagError, match="LIBTPU_INIT_ARGS"):
            CompilerFlags.parse(bad)


def test_libtpu_checks_flag_names_and_values():
    check_compiler_flags(CompilerFlags.parse(ASYNC_ALL_REDUCE), "v5e:2x2")
    with pytest.raises(CompilerFlagError, match="xla_tpu_no_such_flag"):
        check_compiler_flags(CompilerFlags.parse("--xla_tpu_no_such_flag=true"), "v5e:2x2")
    with pytest.raises(CompilerFlagError, match="banana"):
        check_compiler_flags(CompilerFlags.parse("--xla_enable_async_all_reduce=banana"), "v5e:2x2")


def _reduce(x, w):
    return jnp.tanh(x @ w) @ w.T


ARGS = (jax.ShapeDtypeStruct((4096, 8192), jnp.bfloat16), jax.ShapeDtypeStruct((8192, 8192), jnp.bfloat16))
# the first contraction is sharded over `y`: its product is summed by an all-reduce that the second
# product can overlap once the all-reduce is asynchronous
REDUCING = FunctionStrategy("x+y", MeshSpec(("x", "y"), (2, 4)), (P("x", "y"), P("y", None)))


@pytest.mark.slow
def test_flags_reach_the_compiler_and_the_compile_cache_key(tmp_path):
    topo = get_topology("v5e:2x4")
    space = FunctionSpace(_reduce, ARGS, [REDUCING])
    placement = enumerate_placements(topo, REDUCING.mesh).placements[0]
    cache = CompileCache(tmp_path)
    plain = compile_strategy(space, REDUCING, "x+y", topo, placement, 600.0, cache)
    flagged = compile_strategy(space, REDUCING, "x+y", topo, placement, 600.0, cache,
                               CompilerFlags.parse(ASYNC_COLLECTIVE_FUSION))
    assert not flagged.from_cache  # another key: the flags are part of what was compiled
    assert len(list(tmp_path.iterdir())) == 2
    records = [cache.get(p.name.removesuffix(".json.gz")) for p in tmp_path.iterdir()]
    # only the flagged compile went through libtpu's async collective pass (which tags what it saw)
    assert sorted('async_collective_name="all-reduce-start"' in r.hlo_text for r in records) == [False, True]
    assert len(plain.program.collectives) == len(flagged.program.collectives) >= 1


@pytest.mark.slow
def test_the_plan_records_its_flags_and_replans_when_they_change(tmp_path, monkeypatch):
    monkeypatch.setenv("AOIZORA_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("LIBTPU_INIT_ARGS", raising=False)
    topo = get_topology("v5e:2x4")
    base = plan_function(_reduce, ARGS, [REDUCING], topo, top_k=1, verify_top=0, progress=False)
    flagged = plan_function(_reduce, ARGS, [REDUCING], topo, top_k=1, verify_top=0, progress=False,
                            libtpu_args=ASYNC_ALL_REDUCE)
    assert not flagged.from_cache
    assert base.plan.compiler_options() == {}
    assert flagged.plan.compiler_options() == {"xla_enable_async_all_reduce": "true"}
    again = plan_function(_reduce, ARGS, [REDUCING], topo, top_k=1, verify_top=0, progress=False,
                          libtpu_args=ASYNC_ALL_REDUCE)
    assert again.from_cache and again.plan.compiler_options() == flagged.plan.compiler_options()


@pytest.mark.slow
def test_environment_flags_are_recorded_with_the_given_ones(tmp_path, monkeypatch):
    monkeypatch.setenv("AOIZORA_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LIBTPU_INIT_ARGS", "--xla_enable_async_all_gather=true")
    topo = get_topology("v5e:2x4")
    result = plan_function(_reduce, ARGS, [REDUCING], topo, top_k=1, verify_top=0, progress=False,
                           libtpu_args=ASYNC_ALL_REDUCE)
    assert result.plan.compiler_options() == {"xla_enable_async_all_gather": "true",
                                              "xla_enable_async_all_reduce": "true"}


def test_plan_refuses_bad_flags_in_one_line_before_stage1(tmp_path):
    res = CliRunner().invoke(cli, ["plan", "--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2",
                                   "--resolution", "480p", "--frames", "5",
                                   "--libtpu-args", "--xla_tpu_no_such_flag=true",
                                   "--out", str(tmp_path / "plan.json")])
    assert res.exit_code == 2
    lines = res.output.strip().splitlines()
    assert len(lines) == 1 and "xla_tpu_no_such_flag" in lines[0] and "--libtpu-args" in lines[0]
    assert not (tmp_path / "plan.json").exists()
