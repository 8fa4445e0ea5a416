"""Stage 2 compiles each candidate once, at the limit the plan's compiler flags set (libtpu's
default when they set none): a tile that needs a raised scoped-VMEM limit is costed by the splash
model, and the plan records the limit it needs (`StrategySpace.compiled_form`). The leading pair's
raised limit, alone, is checked by one compile at it (`aoizora.stage2.limit_check`)."""

from __future__ import annotations

from collections import Counter

import pytest

from aoizora.models.registry import wan_space
from aoizora.plan import planner
from aoizora.stage2 import compiling
from aoizora.stage2.compile_workers import ChildResult
from aoizora.toolchain import SCOPED_VMEM_FLAG, CompilerFlags

#: a program with no work on the slice's devices: what the stand-in compiler returns (the test
#: counts compiles, not costs)
EMPTY = "HloModule empty, num_partitions={n}\n\nENTRY main {{\n  ROOT c = f32[] constant(0)\n}}\n"


@pytest.fixture
def compiles(monkeypatch):
    """Every compile Stage 2 asks for, as (strategy compiled, flags), answered by a stand-in."""
    asked: list[tuple[object, CompilerFlags | None]] = []

    def stand_in(space, strategy, topology, placement, lowered, text, timeout_s, flags, executor):
        asked.append((strategy, flags))
        ids = tuple(int(d.id) for d in placement.jax_mesh(topology).devices.flat)
        return ChildResult(EMPTY.format(n=len(ids)), ids, 1, 0.0)

    monkeypatch.setattr(compiling, "_compile_miss", stand_in)
    return asked


@pytest.fixture(autouse=True)
def few_candidates(monkeypatch):
    """The space's first four legal strategies: what the test checks does not depend on how many."""
    from aoizora.models.wan.space.space import WanSpace

    every = WanSpace.candidates
    monkeypatch.setattr(WanSpace, "candidates", lambda self, n: [c for c in every(self, n) if c.legal][:4])


def _plan(libtpu_args: str = "", cache_dir=None, check_limits: bool = True):
    from aoizora.stage2.compile_cache import CompileCache

    space = wan_space("wan2.1-t2v-1.3b", "480p", 5, generation="v5e", vae=None)
    return space, planner.plan_space(space, "v5e:2x2", top_k=3, verify_top=2, use_cache=False, progress=False,
                                     include_experts=False, libtpu_args=libtpu_args, check_limits=check_limits,
                                     compile_cache=CompileCache(cache_dir) if cache_dir is not None else None)


def _limit(flags: CompilerFlags | None) -> str | None:
    return dict(flags.items).get(SCOPED_VMEM_FLAG) if flags is not None else None


def test_each_candidate_is_compiled_once_at_the_default_limit_and_the_leader_once_at_its_raised_limit(
        compiles, tmp_path):
    space, result = _plan(cache_dir=tmp_path)
    kept = {e.key for e in result.stage1.kept}
    candidates = {o.key: o.strategy for o in result.outcomes if o.key in kept}
    raised = [k for k, st in candidates.items() if st.scoped_vmem_kib is not None]
    assert raised, "the tile search raised some candidate's limit (else this test checks nothing)"
    at_default = Counter(space.key_of(st) for st, flags in compiles if _limit(flags) is None)
    assert set(at_default) == {space.key_of(space.compiled_form(st)) for st in candidates.values()}
    assert all(n == 1 for n in at_default.values()), at_default
    # the check: the leader (every program here costs alike, so the first raised candidate) compiled
    # as it runs, at its own limit, once; its default-limit form read back from the compile cache
    at_raised = [(st, _limit(flags)) for st, flags in compiles if _limit(flags) is not None]
    assert len(at_raised) == 1 and at_raised[0][1] == str(at_raised[0][0].scoped_vmem_kib)
    assert space.key_of(at_raised[0][0]) in raised
    notes = [n for n in result.plan.data["notes"] if "raised scoped-VMEM limit checked" in n]
    assert len(notes) == 1 and space.key_of(at_raised[0][0]) in notes[0]
    chosen = space.from_description(result.plan.strategy)
    recorded = _limit(CompilerFlags.parse(result.plan.data["compiler"]["libtpu_args"]))
    assert recorded == (None if chosen.scoped_vmem_kib is None else str(chosen.scoped_vmem_kib))


def test_under_a_limit_the_flags_fix_every_compile_runs_at_it(compiles):
    _, result = _plan(f"--{SCOPED_VMEM_FLAG}=32768")
    assert len(compiles) == len(result.outcomes)
    assert all(_limit(flags) == "32768" for _, flags in compiles)


#: a program with one matmul per device: the stand-in compiler's answer where the test makes a
#: limit's program slower
HEAVY = ("HloModule heavy, num_partitions={n}\n\nENTRY main {{\n  a = bf16[8192,8192] parameter(0)\n"
         "  ROOT d = bf16[8192,8192] dot(a, a), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}\n}}\n")


@pytest.mark.parametrize("slow_at", ["raised", "default"])
def test_the_leaders_raised_limit_is_kept_only_where_its_compile_costs_less(monkeypatch, tmp_path, slow_at):
    """The chip measured the raised limit making the rest of a program slower in some cells and
    faster in others; the check keeps the limit by what the compile at it gives."""

    def stand_in(space, strategy, topology, placement, lowered, text, timeout_s, flags, executor):
        ids = tuple(int(d.id) for d in placement.jax_mesh(topology).devices.flat)
        raised = _limit(flags) is not None
        hlo = HEAVY if raised == (slow_at == "raised") else EMPTY
        return ChildResult(hlo.format(n=len(ids)), ids, 1, 0.0)

    monkeypatch.setattr(compiling, "_compile_miss", stand_in)
    space, result = _plan(cache_dir=tmp_path)
    chosen = space.from_description(result.plan.strategy)
    note = next(n for n in result.plan.data["notes"] if "raised scoped-VMEM limit checked" in n)
    if slow_at == "raised":
        assert chosen.scoped_vmem_kib is None and "not kept" in note
        assert space.key_of(chosen) in note
        assert SCOPED_VMEM_FLAG not in result.plan.data["compiler"]["libtpu_args"]
    else:
        assert chosen.scoped_vmem_kib is not None and note.endswith("; kept")


def test_a_raised_limit_the_compiler_refuses_leaves_the_default_limits_form(monkeypatch, tmp_path):
    """The compiler refusing the leader at its raised limit (its working set past the scoped VMEM)
    drops that program for memory, and the form at the default limit is planned."""

    def stand_in(space, strategy, topology, placement, lowered, text, timeout_s, flags, executor):
        if _limit(flags) is not None:
            raise RuntimeError("RESOURCE_EXHAUSTED: CompileTimeScopedVmemOom: scoped vmem limit exceeded")
        ids = tuple(int(d.id) for d in placement.jax_mesh(topology).devices.flat)
        return ChildResult(EMPTY.format(n=len(ids)), ids, 1, 0.0)

    monkeypatch.setattr(compiling, "_compile_miss", stand_in)
    space, result = _plan(cache_dir=tmp_path)
    chosen = space.from_description(result.plan.strategy)
    assert chosen.scoped_vmem_kib is None
    refused = [o for o in result.outcomes if o.dropped]
    assert refused and all(o.dropped.startswith("out of scoped VMEM") for o in refused)
    assert any("compile at the raised scoped-VMEM limit failed" in n for n in result.plan.data["notes"])
    from aoizora.plan.cache import degraded

    assert degraded(result.plan.data) is None  # a refusal for memory is the request's, not the host's


def test_without_the_limit_check_every_compile_is_at_the_default_limit(compiles, tmp_path):
    """`check_limits=False` (`--no-limit-check`): the plan from the default-limit compiles alone, and
    its request says so (the plan cache keeps the two apart)."""
    _, result = _plan(cache_dir=tmp_path, check_limits=False)
    assert compiles and all(_limit(flags) is None for _, flags in compiles)
    assert not any("raised scoped-VMEM limit" in n for n in result.plan.data["notes"])
    assert result.plan.data["request"]["options"]["check_limits"] is False
