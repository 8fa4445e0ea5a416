"""Q2 on TPU7x: the die-to-die link between a chip's two cores is costed at its own bandwidth."""

import numpy as np
import pytest

from aoizora.cost import CostModel
from aoizora.hlo.program import CollectiveKind
from aoizora.hlo.synthetic import ProgramBuilder
from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.sim import simulate
from aoizora.topology import get_topology

MB = 2**20


def _all_to_all_over_u(payload: int):
    """One all-to-all over `u` of mesh u=2,r=4 (logical ids row-major: u is the major axis)."""
    b = ProgramBuilder(8)
    b.collective(CollectiveKind.ALL_TO_ALL, [(r, 4 + r) for r in range(4)], payload)
    return b.build()


def _u_on_cores(topo, placement) -> bool:
    return all(topo.positions[int(a)].chip == topo.positions[int(b)].chip for a, b in placement.device_ids.T)


def test_all_to_all_on_the_cores_of_a_chip_runs_at_d2d_speed():
    topo = get_topology("tpu7x:2x2x1")
    hw = topo.chip_hardware
    space = enumerate_placements(topo, MeshSpec.parse("u=2,r=4"))
    prog = _all_to_all_over_u(64 * MB)
    cm = CostModel(topo)
    chunk = 32 * MB  # each device keeps half and sends half to its partner
    on_cores = [p for p in space.placements if _u_on_cores(topo, p)]
    across = [p for p in space.placements if not _u_on_cores(topo, p)]
    assert on_cores and across
    for p in on_cores:
        res = cm.evaluate(prog, p)
        assert res.step_seconds == pytest.approx(
            hw.collective_launch_s + chunk / hw.d2d_bandwidth_Bps + hw.hop_latency_s, rel=1e-9)
        (est,) = res.collectives
        assert topo.links[est.bottleneck_link].kind == "d2d"
    best_across = min(cm.evaluate(prog, p).step_seconds for p in across)
    # across chips both cores of a chip send over the same ICI link: 2 chunks at ICI speed
    assert best_across >= 2 * chunk / hw.link_bandwidth_Bps
    assert best_across > 10 * cm.evaluate(prog, on_cores[0]).step_seconds


def test_q2_and_the_simulator_agree_on_d2d_and_ici_placements():
    topo = get_topology("tpu7x:2x2x1")
    prog = _all_to_all_over_u(16 * MB)
    cm = CostModel(topo)
    for p in enumerate_placements(topo, MeshSpec.parse("u=2,r=4")).placements:
        q2, sim = cm.evaluate(prog, p), simulate(prog, topo, p)
        assert q2.step_seconds == pytest.approx(sim.step_seconds, rel=1e-6)
        np.testing.assert_allclose(q2.link_bytes, sim.link_bytes, rtol=1e-9)


def test_via_core0_sends_cross_chip_traffic_of_core1_over_d2d():
    mesh = MeshSpec.parse("u=2,r=4")
    prog = _all_to_all_over_u(16 * MB)
    loads = {}
    for core_ici in ("direct", "via-core0"):
        topo = get_topology("tpu7x:2x2x1", core_ici)
        p = enumerate_placements(topo, mesh).by_name("u=x r=core.y")
        res = CostModel(topo).evaluate(prog, p)
        d2d = [l.index for l in topo.links if l.kind == "d2d"]
        loads[core_ici] = float(res.link_bytes[d2d].sum())
    assert loads["direct"] == 0.0 and loads["via-core0"] > 0.0


def test_ring_order_prefers_d2d_hops():
    """A 4-device ring over two chips: the best order takes both D2D links, not a second ICI crossing."""
    from aoizora.cost.links import incidence
    from aoizora.cost.traffic import RingOrderer

    topo = get_topology("tpu7x:2x2x1")
    inc = incidence(topo)
    positions = np.array([(*topo.positions[d].chip, topo.positions[d].core) for d in sorted(topo.positions)])
    a0, a1 = topo.chip_by_coords[(0, 0, 0)].device_ids
    b0, b1 = topo.chip_by_coords[(1, 0, 0)].device_ids
    group = tuple(inc.row[d] for d in (a0, b0, a1, b1))  # listed order crosses ICI four times
    ring = RingOrderer(inc, positions).best(group, bidirectional=False)
    kinds = [topo.links[l].kind for k in range(4)
             for l in topo.device_route(sorted(topo.positions)[ring[k]], sorted(topo.positions)[ring[(k + 1) % 4]])]
    assert kinds.count("d2d") == 2 and kinds.count("ici") == 2


def test_compiled_all_to_all_over_the_cores_is_much_cheaper_than_across_chips():
    """libtpu's own all-to-all for tpu7x:2x2x1, u=2,r=4, 16 MiB per device: u on the cores vs across chips."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    from aoizora.hlo.builder import program_from_compiled
    from aoizora.placement import jax_default_placement

    topo = get_topology("tpu7x:2x2x1")
    mesh_spec = MeshSpec.parse("u=2,r=4")
    mesh = jax_default_placement(topo, mesh_spec).jax_mesh(topo)
    spec = P(("u", "r"), None)
    x = jax.ShapeDtypeStruct((8 * 2048, 4096), jnp.bfloat16, sharding=NamedSharding(mesh, spec))
    step = jax.shard_map(lambda t: jax.lax.all_to_all(t, "u", 0, 0, tiled=True), mesh=mesh, in_specs=spec,
                         out_specs=spec)
    prog = program_from_compiled(jax.jit(step).lower(x).compile())
    (coll,) = prog.collectives
    assert coll.kind == CollectiveKind.ALL_TO_ALL and coll.operand_bytes == 16 * MB
    cm = CostModel(topo)
    space = enumerate_placements(topo, mesh_spec)
    cores = min(cm.evaluate(prog, p).step_seconds for p in space.placements if _u_on_cores(topo, p))
    chips = min(cm.evaluate(prog, p).step_seconds for p in space.placements if not _u_on_cores(topo, p))
    assert chips > 8 * cores  # 6x the link speed, and two cores share each ICI link
    for p in space.placements:
        assert cm.evaluate(prog, p).step_seconds == pytest.approx(simulate(prog, topo, p).step_seconds, rel=1e-6)
