"""MaxDiffusion's own Wan 2.1 step, built abstractly through its classes and pyconfig for a small
model (1.3B's dimensions, two layers, 480p/21 frames) on v5e:2x2 with Ulysses attention, compiled by
libtpu through Stage 2's compile and costed by Q2 and the simulator. Runs where MaxDiffusion can be
imported (installed, or `MAXDIFFUSION_DIR` naming a checkout with its requirements in this Python;
CONTRIBUTING.md says how); skipped, with the reason, otherwise."""

from __future__ import annotations

import pytest

from aoizora.cost import CostModel
from aoizora.errors import MaxDiffusionUnavailable
from aoizora.models import registry
from aoizora.models.maxdiffusion import program
from aoizora.sim import simulate
from aoizora.stage2.compiling import compile_strategy, shared_compile_placement
from aoizora.toolchain import CompilerFlags
from aoizora.topology import get_topology


def _unavailable() -> str | None:
    try:
        program.maxdiffusion_source()
    except MaxDiffusionUnavailable as exc:
        return str(exc)
    return None


REASON = _unavailable()
pytestmark = [pytest.mark.slow, pytest.mark.skipif(REASON is not None, reason=f"MaxDiffusion unavailable: {REASON}")]


def test_maxdiffusions_step_compiles_and_is_costed(monkeypatch):
    topo = get_topology("v5e:2x2")
    space = registry.wan_space("wan2.1-t2v-1.3b", "480p", 21, generation=topo.generation, program="maxdiffusion")
    space.config = space.config.replace(num_layers=2)
    strategy = next(c.strategy for c in space.candidates(4)
                    if c.legal and c.strategy.context == 4 and c.strategy.attention == "ulysses")
    costed = []

    def counted(strategy, op):
        cost = program.kernel_cost(strategy, op)
        costed.append(cost)
        return cost

    monkeypatch.setattr(space, "compiled_kernel_cost", counted)
    placement = shared_compile_placement(space, topo, strategy)
    compiled = compile_strategy(space, strategy, strategy.key(), topo, placement, 1800,
                                flags=CompilerFlags.parse(space.compile_flags(strategy)))
    prog = compiled.program
    assert "transformer_forward_pass_full_cfg" in prog.module_name  # MaxDiffusion's step, not aoizora's
    kinds = {c.kind for c in prog.collectives}
    assert "all-to-all" in kinds  # Ulysses' exchanges
    assert any(c is not None and c.flops for c in costed)  # its splash calls costed from their own shapes
    q2 = CostModel(topo).evaluate(prog, placement)
    sim = simulate(prog, topo, placement).step_seconds
    assert q2.step_seconds > 0 and q2.compute_seconds > 0
    assert abs(sim - q2.step_seconds) <= 0.1 * q2.step_seconds


def test_wan22s_step_holds_the_resident_experts_weights():
    """Wan 2.2 A14B: one expert's step of MaxDiffusion's, lowered (not compiled) with the other
    expert's parameters as one more argument, leaf for leaf the running expert's (kept though unused)."""
    import dataclasses

    import jax

    topo = get_topology("v5e:2x2")
    space = registry.wan_space("wan2.2-t2v-a14b", "480p", 5, generation=topo.generation, program="maxdiffusion")
    space.config = space.config.replace(num_layers=2)
    pipeline = space.pipeline
    space.pipeline = dataclasses.replace(pipeline, transformer=space.config,
                                         transformer_2=pipeline.transformer_2.replace(num_layers=2))
    strategy = next(c.strategy for c in space.candidates(4) if c.legal and c.strategy.context == 4)
    mesh = shared_compile_placement(space, topo, strategy).jax_mesh(topo)
    lowered = space.compile_inputs(strategy, mesh).lower()
    assert "transformer_forward_pass_full_cfg" in lowered.as_text()
    (args, _kwargs) = lowered.args_info
    state, (resident,) = args[1], args[6]
    def leaves(tree):
        return [(jax.tree_util.keystr(path), a.shape, a.dtype)
                for path, a in jax.tree_util.tree_flatten_with_path(tree)[0]]

    assert len(leaves(state)) > 10 and leaves(resident) == leaves(state)
    main = lowered.as_text().split("func.func public @main(", 1)[1].split(") -> ", 1)[0]
    assert main.count("%arg") >= 2 * len(leaves(state))  # kept in the program, though unused
