"""The HTML report of a committed plan reads like the documents: named mesh axes, sentences, no
Python reprs."""

import re
from pathlib import Path

import numpy as np
import pytest

from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.plan.plan import load_plan
from aoizora.report.heatmap import link_heatmaps
from aoizora.report.html import mesh_summary, stage1_summary, write_report
from aoizora.topology import get_topology

PLAN = (Path(__file__).resolve().parents[2] / "docs" / "data" / "plans" / "tile-search"
        / "v5e-2x4_wan2.1-t2v-14b_720p_81f_top3.json")


def test_mesh_is_named_as_the_strategy_names_it():
    assert (mesh_summary(["data", "fsdp", "context", "tensor"], [1, 2, 4, 1])
            == "fsdp=2,context=4 (axes of size 1: data, tensor)")
    assert mesh_summary(["data"], [1]) == "one device (axes of size 1: data)"


def test_stage1_counts_read_as_a_sentence():
    line = stage1_summary({"enumerated": 460, "rejected": 361, "lowering_failed": 0, "out_of_memory": 37,
                           "ranked": 62, "kept": 3})
    assert line == ("Stage 1: of 460 strategies, 361 illegal on this slice, 0 failed to lower, 37 do not fit in HBM, "
                    "62 ranked by Q1; its first 3 went to Stage 2.")


def test_chips_are_labelled_by_coordinates_and_the_named_mesh_position_placed_there():
    topo = get_topology("v5e:2x4")
    names = ["data", "fsdp", "context", "tensor"]
    placement = enumerate_placements(topo, MeshSpec.parse("data=1,fsdp=2,context=4,tensor=1")).placements[-1]
    coords = placement.coords(topo)
    fig = link_heatmaps(topo, [("p", np.zeros(len(topo.links)), coords)], names)
    ax = fig.axes[0]
    assert "(fsdp, context)" in ax.get_title()
    texts = {(round(t.get_position()[0], 2), round(t.get_position()[1], 2)): t.get_text() for t in ax.texts}
    assert {f"x={x}" for x in range(2)} | {f"y={y}" for y in range(4)} <= set(texts.values())
    for idx in np.ndindex(*coords.shape[:-1]):
        x, y = (int(v) for v in coords[idx][:2])
        assert texts[(x, y)] == f"({idx[1]},{idx[2]})"


def test_report_of_a_committed_plan(tmp_path):
    plan = load_plan(PLAN)
    page = write_report(plan, tmp_path / "report").read_text()
    summary = re.search(r"<td>mesh</td><td>([^<]*)</td>", page).group(1)
    assert summary.split(" (")[0] == plan.strategy["key"].split(" | ")[0]
    assert "Stage 1: of 460 strategies" in page
    assert not re.search(r"\{'\w+': ", page), "a Python dict is printed in the report"


@pytest.mark.parametrize("names", [["a"], ["a", "b", "c", "d", "e"]])
def test_axis_names_must_match_the_mesh(names):
    topo = get_topology("v5e:2x4")
    coords = enumerate_placements(topo, MeshSpec.parse("data=2,context=4")).placements[0].coords(topo)
    with pytest.raises(ValueError, match="axis names for a mesh of 2 axes"):
        link_heatmaps(topo, [("p", np.zeros(len(topo.links)), coords)], names)
