"""Is compute fused into collective fusions costed as compute? (Q2 and the simulator.)

Compiles Wan 2.1 1.3B, 480p, 5 frames on v5e:2x4 with the same mesh and attention twice: weights
gathered per layer (libtpu fuses the all-gathers with the dots that consume them, in async
collective fusions) and weights replicated (the same dots, no weight all-gathers). The dots are
the same, so the compute each model counts should agree within a few percent.

    PYTHONPATH=src python benchmarks/fusion_compute_check.py
"""

from __future__ import annotations

from aoizora.cost.model import CostModel
from aoizora.models.wan.config import WAN_T2V_1_3B, VideoShape
from aoizora.models.wan.strategy import Strategy
from aoizora.placement.jax_default import jax_default_placement
from aoizora.stage2.compile_cache import default_compile_cache
from aoizora.stage2.compiling import compile_strategy
from aoizora.sim import simulate
from aoizora.models.wan.space import WanSpace
from aoizora.topology import get_topology


def main() -> None:
    topology = get_topology("v5e:2x4")
    space = WanSpace(WAN_T2V_1_3B, VideoShape(frames=5, height=480, width=832), model_name="wan2.1-t2v-1.3b")
    cache = default_compile_cache()
    rows = []
    for weights in ("gathered", "replicated"):
        strategy = Strategy(data=2, context=4, attention="allgather", weights=weights)
        placement = jax_default_placement(topology, space.mesh_spec(strategy))
        compiled = compile_strategy(space, strategy, space.key_of(strategy), topology, placement, None, cache)
        program = compiled.program
        q2 = CostModel(topology).evaluate(program, placement)
        sim = simulate(program, topology, placement)
        kinds: dict[str, int] = {}
        for c in program.collectives:
            kinds[c.kind.value] = kinds.get(c.kind.value, 0) + c.multiplicity
        rows.append((weights, q2.compute_seconds, sim.compute_seconds, q2.step_seconds, sim.step_seconds, kinds))
    print(f"{'weights':<11} {'Q2 compute ms':>14} {'sim compute ms':>15} {'Q2 step ms':>11} {'sim step ms':>12}  collectives")
    for w, qc, sc, qs, ss, kinds in rows:
        print(f"{w:<11} {qc * 1e3:14.2f} {sc * 1e3:15.2f} {qs * 1e3:11.2f} {ss * 1e3:12.2f}  {kinds}")
    g, r = rows
    print(f"compute, gathered / replicated: Q2 {g[1] / r[1]:.4f}, sim {g[2] / r[2]:.4f}")


if __name__ == "__main__":
    main()
