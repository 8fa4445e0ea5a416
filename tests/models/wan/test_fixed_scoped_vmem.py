"""A scoped-VMEM limit the user's compiler flags fix (`--libtpu-args`, `LIBTPU_INIT_ARGS`) is the
limit the plan is made under: the space searches every tile at it (`WanSpace.under_flags`), says
so in its workload (the plan and Stage 1 caches' key), and compiles nothing at another."""

from __future__ import annotations

import pytest

from aoizora.errors import StrategyError
from aoizora.models.registry import wan_space
from aoizora.models.wan.space import tiles as space_tiles
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.toolchain import SCOPED_VMEM_FLAG, CompilerFlags

DEMO = Strategy(fsdp=2, context=4, attention="allgather")  # the demo's strategy on v5e:2x4


def _space(**kw):
    return wan_space("wan2.1-t2v-14b", "720p", 81, generation="v5e", **kw)


def test_flags_without_the_limit_leave_the_space_as_it_is():
    space = _space()
    assert space.under_flags(CompilerFlags.parse("--xla_tpu_enable_async_all_to_all=true")) is space
    assert "scoped_vmem_kib" not in space.workload()


def test_the_fixed_limit_is_every_strategys_and_in_the_workload():
    space = _space()
    fixed = space.under_flags(CompilerFlags.parse(f"--{SCOPED_VMEM_FLAG}=32768"))
    assert fixed is not space and space.scoped_vmem_kib is None  # the given space is not changed
    assert fixed.workload()["scoped_vmem_kib"] == 32768 and fixed.workload() != space.workload()
    free = space_tiles.with_blocks(space, DEMO)
    at_fixed = space_tiles.with_blocks(fixed, DEMO)
    assert free.scoped_vmem_kib == 65536  # the free search raises the demo's limit to 64 MiB
    assert at_fixed.scoped_vmem_kib == 32768
    assert fixed.compile_flags(at_fixed) == f"--{SCOPED_VMEM_FLAG}=32768"
    # Stage 2 compiles each strategy at the limit the flags fix, as it is; a free search's
    # raised limit is not compiled (`compiled_form`)
    assert fixed.compiled_form(at_fixed) is at_fixed and space.compiled_form(free).scoped_vmem_kib is None
    assert fixed.under_flags(CompilerFlags.parse(f"--{SCOPED_VMEM_FLAG}=32768")) is fixed


def test_a_space_given_a_fixed_limit_keeps_it():
    space = _space(scoped_vmem_kib=65536)
    assert space_tiles.with_blocks(space, DEMO).scoped_vmem_kib == 65536
    assert space.under_flags(CompilerFlags.parse("")) is space  # flags without the limit leave it
    assert space.under_flags(CompilerFlags.parse(f"--{SCOPED_VMEM_FLAG}=32768")).scoped_vmem_kib == 32768


@pytest.mark.parametrize("value", ["0", "-5", "lots"])
def test_a_limit_that_is_not_a_number_of_kib_is_refused(value):
    flags = CompilerFlags(((SCOPED_VMEM_FLAG, value),))
    with pytest.raises(StrategyError, match="positive number of KiB"):
        _space().under_flags(flags)
    with pytest.raises(StrategyError, match="positive number of KiB"):
        _space(scoped_vmem_kib=0)


class _Ranked(Exception):
    """Stops a plan at Stage 1, with the space it was given."""


def test_plan_space_ranks_under_the_limit_the_flags_fix(monkeypatch):
    from aoizora.plan import planner

    def capture(space, *args, **kwargs):
        raise _Ranked(space)

    monkeypatch.setattr(planner, "run_stage1", capture)
    space = wan_space("wan2.1-t2v-1.3b", "480p", 5, generation="v5e")
    with pytest.raises(_Ranked) as ranked:
        planner.plan_space(space, "v5e:2x2", libtpu_args=f"--{SCOPED_VMEM_FLAG}=32768", use_cache=False,
                           include_experts=False, progress=False)
    (planned,) = ranked.value.args
    assert planned.scoped_vmem_kib == 32768 and space.scoped_vmem_kib is None
