"""Link heatmaps: D2D links drawn inside their chip, dashed; z links as stubs; colour = busy time."""

import numpy as np
from matplotlib.text import Annotation

from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.report.heatmap import link_heatmaps
from aoizora.topology import get_topology


def _arrows(fig):
    return [a for ax in fig.axes for a in ax.get_children() if isinstance(a, Annotation) and a.arrow_patch is not None]


def test_tpu7x_panels_draw_every_link_once_per_z_and_d2d_dashed():
    topo = get_topology("tpu7x:2x2x2")
    p = enumerate_placements(topo, MeshSpec.parse("u=2,r=8")).placements[0]
    load = np.zeros(len(topo.links))
    load[[l.index for l in topo.links if l.kind == "d2d"]] = 1e6
    fig = link_heatmaps(topo, [("p", load, p.coords(topo))])
    arrows = _arrows(fig)
    assert len(arrows) == len(topo.links)  # ICI x/y arrows, z stubs, D2D arrows: each link once
    dashed = [a for a in arrows if a.arrow_patch.get_linestyle() not in ("-", "solid")]
    assert len(dashed) == sum(1 for l in topo.links if l.kind == "d2d")
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "+z" in texts and "-z" in texts


def test_colour_is_busy_time_so_equal_bytes_on_d2d_look_cooler_than_on_ici():
    topo = get_topology("tpu7x:2x2x1")
    p = enumerate_placements(topo, MeshSpec.parse("u=2,r=4")).placements[0]
    load = np.full(len(topo.links), 1e6)
    arrows = _arrows(link_heatmaps(topo, [("p", load, p.coords(topo))]))
    d2d = {a.arrow_patch.get_edgecolor()[:3] for a in arrows if a.arrow_patch.get_linestyle() not in ("-", "solid")}
    ici = {a.arrow_patch.get_edgecolor()[:3] for a in arrows if a.arrow_patch.get_linestyle() in ("-", "solid")}
    assert len(d2d) == 1 and len(ici) == 1 and d2d != ici
