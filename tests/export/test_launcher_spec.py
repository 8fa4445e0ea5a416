"""The exported launcher trusts only a spec that is whole: checksum, fields, devices, overrides."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from aoizora.export import write_maxdiffusion_export
from aoizora.export.run_with_plan import LaunchError, generate_wan_argv, load_spec, plan_device_array, spec_checksum
from aoizora.placement.slice_devices import DeviceMismatch, arrange_devices
from aoizora.plan import load_plan
from aoizora.topology import get_topology

ROOT = Path(__file__).parents[2]
TPU7X_PLAN = ROOT / "docs/data/plans/tpu7x-2x2x1_wan2.1-t2v-14b_720p_81f_top11.json"
V5E_PLAN = ROOT / "docs/data/plans/v5e-2x4_wan2.1-t2v-14b_720p_81f_top3.json"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export")
    write_maxdiffusion_export(load_plan(TPU7X_PLAN), out)
    return out


def _spec(exported: Path) -> dict:
    return json.loads((exported / "maxdiffusion_plan.json").read_text())


def _leaves(coords: list) -> list[list]:
    return [coords] if not isinstance(coords[0], list) else [leaf for c in coords for leaf in _leaves(c)]


def _written(tmp_path: Path, spec) -> Path:
    path = tmp_path / "maxdiffusion_plan.json"
    path.write_text(json.dumps(spec))
    return path


def test_the_spec_carries_the_checksum_of_its_content(exported):
    spec = _spec(exported)
    assert len(spec["checksum"]) == 64 and spec["checksum"] == spec_checksum(spec)
    assert load_spec(exported / "maxdiffusion_plan.json") == spec


@pytest.mark.parametrize("edit", [
    lambda s: s["ici_parallelism"].update(ici_data_parallelism=8),
    lambda s: s["argv"].append("attention=flash"),
    lambda s: s.update(libtpu_init_args=""),
    lambda s: s["device_coords"].reverse(),
], ids=["mesh", "argv", "flags", "device-order"])
def test_a_spec_changed_after_the_export_is_refused(exported, tmp_path, edit):
    spec = _spec(exported)
    edit(spec)
    with pytest.raises(LaunchError, match="does not match its checksum"):
        load_spec(_written(tmp_path, spec))


@pytest.mark.parametrize("spec, fragment", [
    ([], "is not a JSON object (list)"),
    ("plan", "is not a JSON object (str)"),
    ({"argv": []}, "lacks plan_keys"),
])
def test_a_spec_that_is_not_whole_is_one_line(tmp_path, spec, fragment):
    with pytest.raises(LaunchError, match=fragment.replace("(", r"\(").replace(")", r"\)")) as info:
        load_spec(_written(tmp_path, spec))
    assert "\n" not in str(info.value)


def test_a_spec_without_its_plan_keys_is_refused(exported, tmp_path):
    spec = _spec(exported)
    del spec["plan_keys"]
    with pytest.raises(LaunchError, match="lacks plan_keys"):
        load_spec(_written(tmp_path, spec))


def test_duplicate_device_coordinates_are_refused(exported, tmp_path):
    spec = _spec(exported)
    leaves = _leaves(spec["device_coords"])
    leaves[1][:] = leaves[0]  # a second mesh position on the first device; checksum recomputed
    spec["checksum"] = spec_checksum(spec)
    with pytest.raises(LaunchError, match="two mesh positions on the device at"):
        load_spec(_written(tmp_path, spec))


def test_device_matching_refuses_a_device_twice():
    topo = get_topology("v5e:2x2")
    devices = [SimpleNamespace(id=i, coords=tuple(d.coords), core_on_chip=0, device_kind="TPU v5 lite")
               for i, d in enumerate(topo.devices)]
    coords = [[0, 0, 0], [0, 0, 0], [1, 0, 0], [1, 1, 0]]
    with pytest.raises(DeviceMismatch, match="two mesh positions on the device at"):
        arrange_devices(devices, slice_name="v5e:2x2", device_kinds=["TPU v5 lite"], shape=[2, 2, 1],
                        cores_per_chip=1, device_coords=coords)
    twins = [*devices[:3], SimpleNamespace(id=3, coords=(0, 0, 0), core_on_chip=0, device_kind="TPU v5 lite")]
    with pytest.raises(DeviceMismatch, match="share TPU coordinates"):
        arrange_devices(twins, slice_name="v5e:2x2", device_kinds=["TPU v5 lite"], shape=[2, 2, 1],
                        cores_per_chip=1, device_coords=[[0, 0, 0], [0, 1, 0], [1, 0, 0], [1, 1, 0]])


def test_malformed_slice_in_a_forged_spec_is_one_line(exported):
    spec = _spec(exported)
    del spec["slice"]["shape"]
    with pytest.raises(LaunchError, match="malformed"):
        plan_device_array([], spec)


@pytest.mark.parametrize("override, refused", [
    ("dcn_data_parallelism=2", True), ("dcn_context_parallelism=4", True), ("dcn_data_parallelism=1", False),
    ("dcn_context_parallelism=-1", False), ("ulysses_shards=4", True), ("ulysses_shards=two", True),
])
def test_overrides_that_contradict_the_plans_mesh_or_attention_are_refused(tmp_path, override, refused):
    write_maxdiffusion_export(load_plan(V5E_PLAN), tmp_path)  # no 2D context: ulysses_shards left to the config
    spec = load_spec(tmp_path / "maxdiffusion_plan.json")
    if refused:
        with pytest.raises(LaunchError, match="contradicts the plan"):
            generate_wan_argv(spec, [override])
    else:
        assert generate_wan_argv(spec, [override])[-1] == override


def test_a_2d_context_plan_sets_ulysses_shards_itself(exported):
    spec = load_spec(exported / "maxdiffusion_plan.json")
    assert "ulysses_shards" in spec["plan_keys"]
    with pytest.raises(LaunchError, match="set by the plan"):
        generate_wan_argv(spec, ["ulysses_shards=1"])


@pytest.mark.slow
@pytest.mark.parametrize("content, fragment", [("[]", "not a JSON object"), ('{"argv": []}', "lacks plan_keys")])
def test_the_launcher_says_one_line_for_a_spec_that_is_not_whole(exported, tmp_path, content, fragment):
    for name in ("run_with_plan.py", "plan_devices.py"):
        (tmp_path / name).write_bytes((exported / name).read_bytes())
    (tmp_path / "maxdiffusion_plan.json").write_text(content)
    r = subprocess.run([sys.executable, str(tmp_path / "run_with_plan.py"), "--check"], capture_output=True,
                       text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and fragment in r.stderr, r.stderr
