"""TPU7x slices: names, two cores per chip joined by die-to-die links, per-device hardware share."""

import json
import math

import pytest

from aoizora.errors import TopologyError
from aoizora.toolchain import compile_only_devices
from aoizora.topology import get_topology, hardware_profile, parse_topology_name


@pytest.mark.parametrize(
    "name, chips, ici_links, wrap",
    [
        ("tpu7x:2x2x1", 4, 8, (False, False, False)),
        ("tpu7x:2x2x2", 8, 24, (False, False, False)),
        ("tpu7x:2x2x4", 16, 56, (False, False, False)),
        ("tpu7x:4x4x4", 64, 384, (True, True, True)),
    ],
)
def test_tpu7x_slices_have_two_cores_per_chip_and_a_d2d_link_each_way(name, chips, ici_links, wrap):
    topo = get_topology(name)
    assert (topo.num_chips, topo.num_devices, topo.cores_per_chip) == (chips, 2 * chips, 2)
    assert topo.wrap == wrap
    ici = [l for l in topo.links if l.kind == "ici"]
    d2d = [l for l in topo.links if l.kind == "d2d"]
    assert len(ici) == ici_links and len(d2d) == 2 * chips
    assert [l.index for l in topo.links] == list(range(len(topo.links)))
    assert all(l.src == l.dst and {l.src_core, l.dst_core} == {0, 1} for l in d2d)
    assert all(l.bandwidth_Bps == pytest.approx(6 * l2.bandwidth_Bps) for l in d2d for l2 in ici[:1])
    assert all(l.dim == 3 and l.direction == (1 if l.dst_core == 1 else -1) for l in d2d)


def test_devices_and_cores_come_from_libtpu():
    topo = get_topology("tpu7x:2x2x1")
    for dev in compile_only_devices("tpu7x:2x2x1"):
        assert dev.device_kind == "TPU7x"
        pos = topo.positions[dev.id]
        assert pos.chip == tuple(dev.coords) and pos.core == dev.core_on_chip
    assert topo.chips[0].device_ids == (0, 1) and topo.chips[1].coords == (1, 0, 0)


def test_route_between_the_cores_of_a_chip_is_the_d2d_link():
    topo = get_topology("tpu7x:2x2x1")
    a, b = topo.chip_by_coords[(1, 1, 0)].device_ids
    (fwd,), (back,) = topo.device_route(a, b), topo.device_route(b, a)
    assert topo.links[fwd].kind == topo.links[back].kind == "d2d"
    assert (topo.links[fwd].src_core, topo.links[fwd].dst_core) == (0, 1) and fwd != back
    assert topo.device_route(a, a) == ()


def test_core_ici_switch_decides_whether_cross_chip_traffic_crosses_d2d():
    direct = get_topology("tpu7x:2x2x1")
    via = get_topology("tpu7x:2x2x1", "via-core0")
    src = direct.chip_by_coords[(0, 0, 0)].device_ids[1]  # core 1 of chip (0,0,0)
    dst = direct.chip_by_coords[(1, 0, 0)].device_ids[1]
    assert [direct.links[l].kind for l in direct.device_route(src, dst)] == ["ici"]
    kinds = [(via.links[l].kind, via.links[l].src_core, via.links[l].dst_core) for l in via.device_route(src, dst)]
    assert kinds == [("d2d", 1, 0), ("ici", None, None), ("d2d", 0, 1)]
    core0 = direct.chip_by_coords[(0, 0, 0)].device_ids[0]
    assert via.device_route(core0, direct.chip_by_coords[(1, 0, 0)].device_ids[0]) == direct.device_route(src, dst)
    assert direct.cores_are_interchangeable and not via.cores_are_interchangeable
    assert via.route_key != direct.route_key
    with pytest.raises(TopologyError, match="core-to-ICI"):
        get_topology("tpu7x:2x2x1", "sideways")


def test_v4_keeps_its_free_on_chip_route_and_link_set():
    topo = get_topology("v4:2x2x2")
    assert all(l.kind == "ici" for l in topo.links) and not topo.has_d2d
    a, b = topo.chips[0].device_ids
    assert topo.device_route(a, b) == ()


@pytest.mark.parametrize(
    "name, canonical",
    [("tpu7x:2x2x1", "tpu7x:2x2x1"), ("v7x:2x2x2", "tpu7x:2x2x2"), ("TPU7x:2x2x4", "tpu7x:2x2x4"),
     ("tpu7x-8", "tpu7x:2x2x1"), ("tpu7x-128", "tpu7x:4x4x4")],
)
def test_accepted_names(name, canonical):
    generation, shape = parse_topology_name(name)
    assert f"{generation}:{'x'.join(map(str, shape))}" == canonical


@pytest.mark.parametrize(
    "name, fragment",
    [("tpu7x:2x2", "3-D"), ("tpu7x-1000", "accelerator type"), ("tpu7x:1x4x1", "libtpu does not accept"),
     ("tpu7x:3x2x1", "libtpu does not accept"), ("tpu8:2x2x1", "unknown TPU generation")],
)
def test_refused_names(name, fragment):
    with pytest.raises(TopologyError, match=fragment):
        get_topology(name)


def test_one_chip_and_a_pair_are_planned_as_one_hosts_chips():
    """libtpu refuses 1x1x1 and 2x1x1 with its default 2x2x1 chips per host; inside that block they
    are the chips a process of one host is given, and aoizora describes them so."""
    for name, chips in (("tpu7x:1x1x1", 1), ("tpu7x:2x1x1", 2)):
        topo = get_topology(name)
        assert topo.num_chips == chips and topo.cores_per_chip == 2


def test_device_gets_its_core_share_of_per_chip_quantities():
    topo = get_topology("tpu7x:2x2x1")
    chip, dev = topo.chip_hardware, topo.hardware
    assert chip.peak_bf16_flops == pytest.approx(2.307e15) and chip.hbm_bytes == 192 * 2**30
    assert dev.peak_bf16_flops == pytest.approx(chip.peak_bf16_flops / 2)
    assert dev.hbm_bandwidth_Bps == pytest.approx(chip.hbm_bandwidth_Bps / 2)
    assert dev.hbm_bytes == 96 * 2**30
    # libtpu's limit is per device already: 94.75 GiB of the device's 96
    assert dev.hbm_usable_bytes == chip.hbm_usable_bytes == int(94.75 * 2**30) < dev.hbm_bytes
    assert dev.link_bandwidth_Bps == chip.link_bandwidth_Bps and dev.d2d_bandwidth_Bps == chip.d2d_bandwidth_Bps
    # v4 without megacore: one device per TensorCore, half a chip; v5p (megacore): the whole chip
    v4 = get_topology("v4:2x2x2")
    assert v4.hardware.peak_bf16_flops == pytest.approx(hardware_profile("v4").peak_bf16_flops / 2)
    assert v4.hardware.hbm_usable_bytes < v4.hardware.hbm_bytes == hardware_profile("v4").hbm_bytes // 2
    assert get_topology("v5p:2x2x2").hardware == hardware_profile("v5p")


def test_every_tpu7x_hardware_field_cites_a_source():
    hw = hardware_profile("tpu7x")
    cited = {"peak_bf16_flops", "hbm", "hbm_usable_bytes", "link_bandwidth_Bps", "d2d_bandwidth_Bps", "clock_hz",
             "hop_latency_s", "ici_ports_per_chip", "wraparound", "accelerator_types"}
    assert cited <= set(hw.sources)
    assert all(hw.sources[k] and "/work" not in hw.sources[k] for k in cited)


def test_json_description_is_strict_and_names_link_kinds():
    topo = get_topology("tpu7x:2x2x2")
    data = json.loads(json.dumps(topo.to_json(), allow_nan=False))
    kinds = [l["kind"] for l in data["links"]]
    assert kinds.count("d2d") == 16 and kinds.count("ici") == 24
    assert all(set(l) >= {"src_core", "dst_core"} for l in data["links"] if l["kind"] == "d2d")
    assert data["hardware"]["devices_per_chip"] == 1 and data["device_hardware"]["devices_per_chip"] == 2
    assert math.isclose(data["device_hardware"]["peak_bf16_flops"] * 2, data["hardware"]["peak_bf16_flops"])


@pytest.mark.parametrize("name", ["v4:2x2x2", "v5p:2x2x2"])
def test_per_device_peak_matches_libtpus_own_matmul_estimate(name):
    """libtpu's cycle estimate of a big matmul on one device runs near the device's share of the peak
    (~90%): a v4 device is one TensorCore, half a chip; a v5p device (megacore) is the whole chip."""
    import re

    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    topo = get_topology(name)
    n = 8192
    a = jax.ShapeDtypeStruct((n, n), jnp.bfloat16, sharding=SingleDeviceSharding(topo.devices[0]))
    text = jax.jit(lambda x, y: x @ y).lower(a, a).compile().as_text()
    cycles = max(int(c) for c in re.findall(r'"estimated_cycles":"(\d+)"', text))
    achieved = 2 * n**3 / (cycles / topo.hardware.clock_hz)
    assert 0.7 * topo.hardware.peak_bf16_flops < achieved <= topo.hardware.peak_bf16_flops


@pytest.mark.slow
def test_cli_topology_json_for_tpu7x_and_its_switch():
    import subprocess
    import sys

    def run(*args):
        return subprocess.run([sys.executable, "-c", "from aoizora.cli import main; main()", "topology", *args],
                              capture_output=True, text=True, timeout=300)

    out = run("tpu7x-8", "--json", "--core-ici", "via-core0")
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["name"] == "tpu7x:2x2x1" and data["core_ici"] == "via-core0" and data["cores_per_chip"] == 2
    assert sum(l["kind"] == "d2d" for l in data["links"]) == 8
    bad = run("v7x:1x4x1")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "libtpu does not accept" in bad.stderr
