"""Q1 is a bound: never above Q2's prediction, for every placement, on compiled small programs."""

import math

import pytest

from aoizora.cost.model import CostModel
from aoizora.hlo.program import OpaqueCost
from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.stage1 import best_group_bandwidth, predict, q1
from aoizora.topology import get_topology

# splash attention on the local shard: 2 heads x 1024 x 1024 x 128 (see micro.splash_case)
SPLASH = OpaqueCost(flops=4 * 2 * 1024 * 1024 * 128, hbm_bytes=4 * 2 * 1024 * 128 * 2)


def test_best_group_bandwidth():
    v5e = get_topology("v5e:2x4")
    link = v5e.hardware.link_bandwidth_Bps
    assert best_group_bandwidth(v5e, 1) == math.inf
    assert best_group_bandwidth(v5e, 2) == link  # a 2-ring is one link each way
    assert best_group_bandwidth(v5e, 4) == 2 * link  # a bidirectional ring: two links into each chip
    assert best_group_bandwidth(v5e, 8) == 2 * link
    v4 = get_topology("v4:2x2x2")  # two cores per chip: a 2-device group can stay on one chip
    assert v4.cores_per_chip == 2
    assert best_group_bandwidth(v4, 2) == math.inf
    assert best_group_bandwidth(v4, 8) == 2 * v4.hardware.link_bandwidth_Bps
    tpu7x = get_topology("tpu7x:2x2x1")  # two cores per chip joined by a die-to-die link
    assert best_group_bandwidth(tpu7x, 2) == tpu7x.hardware.d2d_bandwidth_Bps
    assert best_group_bandwidth(tpu7x, 4) == tpu7x.hardware.link_bandwidth_Bps  # two chips: one link


@pytest.mark.parametrize("name", ["drop-allgather", "shard_map-boundary"])
def test_q1_below_q2_on_tpu7x_where_a_pair_of_devices_shares_a_chip(micro, name):
    """A 2-device group may sit on one chip's two cores: Q1 charges it the die-to-die link's time,
    which Q2 charges too (with its launch and latency), on every placement."""
    topo = get_topology("tpu7x:2x2x1")
    bound, _ = _check(micro[name], topo)
    pred = predict(micro[name].module)
    pairs = [c for c in pred.comms if c.group_size == 2]
    assert pairs  # an all-gather, an all-reduce over the mesh's 2-long axis
    assert bound.comm_seconds >= sum(c.recv_bytes * c.multiplicity for c in pairs) / topo.hardware.d2d_bandwidth_Bps


def _check(case, topology, hook=None):
    pred = predict(case.module, (lambda call: hook) if hook else None)
    program = case.program if hook is None else case.program.with_opaque_cost(lambda op: hook)
    mesh = case.module.mesh
    spec = MeshSpec(tuple(a for a, _ in mesh.axes), tuple(n for _, n in mesh.axes))
    model = CostModel(topology)
    bound = q1(pred, topology)  # default: parameter gathers overlap compute, the rest adds
    strict, serial = q1(pred, topology, "full"), q1(pred, topology, "none")
    assert strict.seconds <= bound.seconds <= serial.seconds
    worst_gap = math.inf
    placements = enumerate_placements(topology, spec).placements
    assert len(placements) >= 2
    for p in placements:
        q2 = model.evaluate(program, p).step_seconds
        assert bound.seconds <= q2 * (1 + 1e-9), (case.name, p.name, bound, q2)
        worst_gap = min(worst_gap, q2 / max(bound.seconds, 1e-30))
    return bound, worst_gap


@pytest.mark.parametrize("name", ["contract-allreduce", "contract-reducescatter", "move-alltoall", "drop-allgather",
                                  "shard_map-boundary"])
def test_q1_below_q2_micro(micro, topo_2x4, name):
    bound, _ = _check(micro[name], topo_2x4)
    assert bound.comm_seconds > 0


def test_q1_below_q2_opaque_kernel(micro, topo_2x4):
    bound, _ = _check(micro["kernel-boundary"], topo_2x4, SPLASH)
    assert bound.compute_seconds >= SPLASH.flops / topo_2x4.hardware.peak_bf16_flops


def test_q1_below_q2_transformer(transformer_cases, topo_2x4):
    for case in transformer_cases.values():
        bound, gap = _check(case, topo_2x4)
        assert bound.compute_seconds > 0 and bound.comm_seconds > 0
        assert gap >= 1.0


def test_overlap_modes(micro, topo_2x4):
    pred = micro["contract-allreduce"].prediction
    full, none, pre = q1(pred, topo_2x4, "full"), q1(pred, topo_2x4, "none"), q1(pred, topo_2x4)
    assert full.seconds == max(full.compute_seconds, full.comm_seconds)
    assert none.seconds == pytest.approx(full.compute_seconds + full.comm_seconds)
    assert pre.prefetch_seconds == 0 and pre.seconds == pytest.approx(none.seconds)  # an activation all-reduce


def test_parameter_gathers_are_prefetchable(transformer_cases, topo_2x4):
    """FSDP-style weight gathers move parameters only: Q1 lets them overlap compute."""
    from small_transformer import SMALL

    from aoizora.stage1 import analyse
    from aoizora.workloads import TransformerSpace

    space = TransformerSpace(SMALL)
    cand = next(c for c in space.candidates(8) if c.key == "fsdp=2,tensor=4 | weights=fsdp | attn=dense")
    pred, res, _, _, _ = analyse(space, cand.strategy, topo_2x4)
    gathers = [c for c in pred.comms if c.kind == "all-gather" and c.axes == ("fsdp",)]
    assert gathers and all(c.prefetchable for c in gathers)
    assert res.prefetch_seconds > 0
    assert res.seconds == pytest.approx(max(res.compute_seconds, res.prefetch_seconds) + res.comm_seconds
                                        - res.prefetch_seconds)


def _gather_beside_matmul(topology, collective: str, dependent: bool):
    """shard_map: a collective on an activation and a 4096x4096x4096 matmul, independent of each
    other or (dependent) the matmul consuming the collective's result."""
    import jax
    from jax.sharding import PartitionSpec as P
    from micro import case, mesh_2x4, sds

    mesh = mesh_2x4(topology)

    def body(x, a, w):
        if collective == "all-gather":
            g = jax.lax.all_gather(x, "y", tiled=True)
        else:
            g = jax.lax.psum(x, "y")
        h = (a[: g.shape[0]] + g if dependent else a) @ w
        return g, h

    fn = jax.shard_map(body, mesh=mesh, in_specs=(P("y", None), P(), P()), out_specs=(P(), P()), check_vma=False)
    return case(f"{collective}-beside-matmul", fn, sds(mesh, (4096, 4096), P("y", None)),
                sds(mesh, (4096, 4096), P()), sds(mesh, (4096, 4096), P()))


@pytest.mark.slow
@pytest.mark.parametrize("collective", ["all-gather", "all-reduce"])
@pytest.mark.parametrize("dependent", [False, True])
def test_async_collectives_hide_behind_independent_compute(topo_2x4, collective, dependent):
    """libtpu runs all-gathers asynchronously and all-reduces synchronously: under `"async"` an
    activation all-gather hides behind compute that does not depend on it, nothing else does."""
    c = _gather_beside_matmul(topo_2x4, collective, dependent)
    pred = c.prediction
    [comm] = pred.comms
    assert comm.kind == collective and not comm.prefetchable
    sync, overlapped = q1(pred, topo_2x4, "prefetch"), q1(pred, topo_2x4, "async")
    assert sync.seconds == pytest.approx(sync.compute_seconds + sync.comm_seconds)
    if collective == "all-gather" and not dependent:
        # the gather (3 x 8 MiB received) is shorter than the matmul: fully hidden
        assert sync.comm_seconds < sync.compute_seconds
        assert overlapped.seconds == pytest.approx(overlapped.compute_seconds)
    else:
        assert overlapped.seconds == pytest.approx(sync.seconds)
    # the bound still holds on the compiled program, for every placement
    _check(c, topo_2x4)


def _ring_permute(topology):
    """shard_map: every device sends its 8 MiB block to the next one along "y" (a ring of 4)."""
    import jax
    from jax.sharding import PartitionSpec as P
    from micro import case, mesh_2x4, sds

    mesh = mesh_2x4(topology)
    ring = [(i, (i + 1) % 4) for i in range(4)]
    fn = jax.shard_map(lambda x: jax.lax.ppermute(x, "y", ring), mesh=mesh, in_specs=P("y", None),
                       out_specs=P("y", None), check_vma=False)
    return case("ring-permute", fn, sds(mesh, (4 * 1024, 4096), P("y", None)))


def test_a_permute_gets_one_link_wherever_it_is_placed(topo_2x4):
    """Each device receives its block from one source along one route: Q1 charges it one link's
    time (a ring all-gather over the same 4 devices would get two links), and stays below Q2 on
    every placement of the compiled program."""
    c = _ring_permute(topo_2x4)
    [comm] = c.prediction.comms
    assert comm.kind == "collective-permute" and comm.group_size == 4
    assert comm.recv_bytes == 1024 * 4096 * 2
    hw = topo_2x4.hardware
    one_link = comm.recv_bytes / hw.link_bandwidth_Bps + hw.hop_latency_s
    assert q1(c.prediction, topo_2x4, "none").comm_seconds == pytest.approx(one_link)
    _check(c, topo_2x4)
