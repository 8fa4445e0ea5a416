"""Stage 2 compiles each candidate once, at the limit the plan's compiler flags set (libtpu's
default when they set none): a tile that needs a raised scoped-VMEM limit is costed by the splash
model, and the plan records the limit it needs (`StrategySpace.compiled_form`)."""

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


def _plan(libtpu_args: str = ""):
    space = wan_space("wan2.1-t2v-1.3b", "480p", 5, generation="v5e", vae=None)
    return space, planner.plan_space(space, "v5e:2x2", top_k=3, verify_top=2, use_cache=False, progress=False,
                                     include_experts=False, libtpu_args=libtpu_args)


def _limit(flags: CompilerFlags | None) -> str | None:
    return dict(flags.items).get(SCOPED_VMEM_FLAG) if flags is not None else None


def test_each_candidate_is_compiled_once_at_the_default_limit(compiles):
    space, result = _plan()
    kept = {o.key: o.strategy for o in result.outcomes}
    raised = [k for k, st in kept.items() if st.scoped_vmem_kib is not None]
    assert raised, "the tile search raised some candidate's limit (else this test checks nothing)"
    counts = Counter(space.key_of(st) for st, _ in compiles)
    assert set(counts) == {space.key_of(space.compiled_form(st)) for st in kept.values()}
    assert all(n == 1 for n in counts.values()), counts
    assert all(_limit(flags) is None for _, flags in compiles)
    chosen = space.from_description(result.plan.strategy)
    recorded = _limit(CompilerFlags.parse(result.plan.data["compiler"]["libtpu_args"]))
    assert recorded == (None if chosen.scoped_vmem_kib is None else str(chosen.scoped_vmem_kib))


def test_under_a_limit_the_flags_fix_every_compile_runs_at_it(compiles):
    _, result = _plan(f"--{SCOPED_VMEM_FLAG}=32768")
    assert len(compiles) == len(result.outcomes)
    assert all(_limit(flags) == "32768" for _, flags in compiles)
