"""Replica splits, their link check, the throughput choice and the plan file's `replicas` block (no compile)."""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import dataclass

import numpy as np
import pytest

from aoizora.errors import ArgumentError, PlanFormatError, PlanMismatchError
from aoizora.plan import Plan, load_plan
from aoizora.plan.replicas import (
    Split,
    block_splits,
    contention_reason,
    raster_id,
    refused_sub_slice,
    replica_devices,
    replica_links,
    shared_links,
)
from aoizora.plan.throughput import Tried, choose, turned_reason
from aoizora.topology.slice import Topology
from tests.plan.plan_doc import plan_doc


@dataclass(frozen=True)
class FakeDevice:
    """A TPU-like device (hashable, as `jax.sharding.Mesh` needs): an id, ICI coordinates and a kind."""

    id: int
    coords: tuple[int, ...]
    device_kind: str
    core_on_chip: int = 0


def _devices(shape, kind="TPU v4"):
    cells = itertools.product(*reversed([range(n) for n in shape]))
    return tuple(FakeDevice(i, (*reversed(c), *[0] * (3 - len(shape))), kind) for i, c in enumerate(cells))


def test_block_splits_of_2x4_whole_slice_first():
    splits = block_splits((2, 4))
    assert splits[0] == Split((2, 4), (2, 4)) and splits[0].count == 1
    assert {(s.count, s.shape) for s in splits} == {(1, (2, 4)), (2, (2, 2)), (2, (1, 4)), (4, (1, 2)),
                                                      (4, (2, 1)), (8, (1, 1))}
    assert [s.count for s in splits] == sorted(s.count for s in splits)


def test_split_blocks_are_disjoint_cover_and_raster_ordered():
    split = Split((4, 4), (2, 2))
    assert split.offsets == ((0, 0), (2, 0), (0, 2), (2, 2))
    assert split.chips(1) == [(2, 0), (3, 0), (2, 1), (3, 1)]
    chips = [c for i in range(split.count) for c in split.chips(i)]
    assert len(set(chips)) == 16
    assert replica_devices(Split((2, 4), (2, 2)))[1] == {"offset": [0, 2], "chips": [[0, 2], [1, 2], [0, 3], [1, 3]],
                                                         "chip_ids": [4, 5, 6, 7]}
    assert raster_id((1, 3), (2, 4)) == 7


def test_libtpu_refuses_lines_of_four_but_takes_blocks_inside_one_host():
    assert refused_sub_slice("v5e", Split((2, 4), (2, 2))) is None
    reason = refused_sub_slice("v5e", Split((2, 4), (1, 4)))
    assert reason and "v5e:1x4 is a sub-slice libtpu will not compile as a slice" in reason
    for inside_one_host in ((1, 2), (2, 1), (1, 1)):  # compiled as one host's chips
        assert refused_sub_slice("v5e", Split((2, 4), inside_one_host)) is None
    assert refused_sub_slice("v5e", Split((2, 4), (2, 4))) is None  # the whole slice is not a sub-slice


def test_a_split_into_turned_blocks_is_planned_once():
    planned = {(1, 2): Split((2, 2), (2, 1))}
    reason = turned_reason(Split((2, 2), (1, 2)), planned, "v5e")
    assert reason and reason.startswith("the blocks of 2x v5e:2x1 turned")
    assert turned_reason(Split((2, 2), (2, 1)), planned, "v5e") is None  # the planned split itself
    assert turned_reason(Split((2, 2), (1, 1)), planned, "v5e") is None
    assert turned_reason(Split((2, 4), (1, 2)), planned, "v5e") is None  # 4 blocks, not the 2 planned


def test_blocks_of_a_slice_without_wraparound_share_no_link():
    topo = Topology("v5e:2x4", "v5e", (2, 4), _devices((2, 4), "TPU v5 lite"))
    split = Split((2, 4), (2, 2))
    assert shared_links(topo, split) == [] and contention_reason(topo, split) is None
    # each 2x2 block uses exactly its own 8 directed links
    assert len(replica_links(topo, split.chips(0))) == 8


def test_blocks_of_a_wrapped_slice_share_no_link_under_shortest_routing():
    topo = Topology("v4:4x4x4", "v4", (4, 4, 4), _devices((4, 4, 4)))
    assert all(topo.wrap)
    assert shared_links(topo, Split((4, 4, 4), (4, 4, 2))) == []


class OneWayRing(Topology):
    """Routes every wrapped axis one way round (the positive direction): a replica's traffic then
    crosses its neighbour's chips, the case the link check must catch."""

    def _steps(self, dim, a, b):
        if not self.wrap[dim]:
            return super()._steps(dim, a, b)
        return +1, (b - a) % self.shape[dim]


def test_replicas_that_share_a_link_are_refused():
    topo = OneWayRing("v4:4x4x4", "v4", (4, 4, 4), _devices((4, 4, 4)))
    split = Split((4, 4, 4), (4, 4, 2))
    (i, j, links), = shared_links(topo, split)
    assert (i, j) == (0, 1) and links
    assert "replicas 0 and 1 share" in contention_reason(topo, split)
    assert "contention not modelled" in contention_reason(topo, split)


def _tried(count, videos, vph):
    return Tried(Split((2, 4), (2, 4) if count == 1 else (2, 2)), videos, None, 1.0, vph)


def test_choice_most_videos_per_hour_ties_to_fewer_replicas_then_smaller_batch():
    assert choose([_tried(1, 1, 10.0), _tried(2, 1, 12.0)]).split.count == 2
    tie = choose([_tried(2, 1, 12.0), _tried(1, 2, 12.0), _tried(1, 1, 12.0)])
    assert (tie.split.count, tie.videos) == (1, 1)


def replicated_doc():
    """plan_doc's v5e:2x2 plan as each of two replicas of v5e:2x4."""
    doc = plan_doc()
    doc["workload"]["shapes"] = {"cfg_batch": 2}
    doc["replicas"] = {
        "objective": "throughput", "slice": "v5e:2x4", "count": 2,
        "devices": replica_devices(Split((2, 4), (2, 2))), "videos_per_replica": 1, "video_seconds": 10.0,
        "videos_per_hour": 720.0, "max_videos_per_replica": 1,
        "contention": {"checked": True, "shared_links": 0},
        "splits": [{"split": "1x v5e:2x4", "count": 1, "shape": [2, 4], "videos_per_replica": 1,
                    "videos_per_hour": 600.0},
                   {"split": "2x v5e:2x2", "count": 2, "shape": [2, 2], "videos_per_replica": 1,
                    "videos_per_hour": 720.0},
                   {"split": "4x v5e:1x2", "count": 4, "shape": [1, 2], "not_planned": "refused"}]}
    return doc


def test_replicated_plan_loads_and_round_trips(tmp_path):
    plan = Plan(replicated_doc())
    assert plan.replica_count == 2 and plan.replicas["slice"] == "v5e:2x4"
    again = load_plan(plan.save(tmp_path / "p.json"))
    assert again.data == json.loads(json.dumps(plan.data))
    assert Plan(plan_doc()).replicas is None and Plan(plan_doc()).replica_count == 1  # old plans: unchanged


@pytest.mark.parametrize("mutate, fragment", [
    (lambda r: r.update(count=3), "replicas.count"),
    (lambda r: r["devices"].pop(), "replicas.count"),
    (lambda r: r.update(slice="v6e:2x4"), "another generation"),
    (lambda r: r.update(slice="v5e:3x4"), "not a whole number"),
    (lambda r: r["devices"][1].update(chips=r["devices"][0]["chips"]), "shares a chip"),
    (lambda r: r["devices"][1]["chips"].__setitem__(0, [5, 5]), "outside"),
    (lambda r: r["devices"][1].update(chip_ids=[0, 1, 2, 3]), "replicas.devices[1]"),
    (lambda r: r["devices"][0].update(offset=[0, 1]), "replicas.devices[0]"),
    (lambda r: r.update(videos_per_replica=2), "videos_per_replica"),
    (lambda r: r.update(objective="latency"), "replicas/objective"),
    (lambda r: r.pop("contention"), "contention"),
    (lambda r: r["splits"].append({"split": "x"}), "replicas/splits"),
])
def test_replicas_block_mutations_are_refused(mutate, fragment):
    doc = replicated_doc()
    mutate(doc["replicas"])
    with pytest.raises(PlanFormatError, match=fragment.replace("[", r"\[").replace("]", r"\]")):
        Plan(copy.deepcopy(doc))


def test_sub_slice_must_match_the_blocks():
    doc = replicated_doc()
    doc["replicas"]["slice"] = "v5e:4x4"  # 4 blocks of 2x2, but 2 device sets
    with pytest.raises(PlanFormatError, match="replicas.count"):
        Plan(doc)


def test_replica_meshes_over_the_full_slice_in_any_order():
    plan = Plan(replicated_doc())
    devices = list(_devices((2, 4), "TPU v5 lite"))[::-1]
    meshes = plan.replica_meshes(devices)
    assert len(meshes) == 2
    for i, mesh in enumerate(meshes):
        assert mesh.axis_names == plan.axis_names and mesh.devices.shape == plan.axis_sizes
        want = plan.device_coords + np.array(plan.replicas["devices"][i]["offset"])
        got = np.array([[d.coords[0], d.coords[1]] for d in mesh.devices.ravel()]).reshape(want.shape)
        assert (got == want).all()
    assert not {d.id for d in meshes[0].devices.ravel()} & {d.id for d in meshes[1].devices.ravel()}
    # a replica's own process sees its 2x2 alone: the plan's own mesh
    assert plan.mesh(_devices((2, 2), "TPU v5 lite")).devices.shape == (2, 2)


@pytest.mark.parametrize("replica", [2, -1, "0", True])
def test_bad_replica_index_is_refused(replica):
    with pytest.raises(ArgumentError, match="replica"):
        Plan(replicated_doc()).mesh(_devices((2, 4), "TPU v5 lite"), replica=replica)


def test_replica_of_a_plain_plan_and_wrong_devices_are_refused():
    with pytest.raises(ArgumentError, match="no replicas"):
        Plan(plan_doc()).mesh(_devices((2, 2), "TPU v5 lite"), replica=0)
    with pytest.raises(PlanMismatchError, match="8 devices"):
        Plan(replicated_doc()).mesh(_devices((2, 2), "TPU v5 lite"), replica=0)
