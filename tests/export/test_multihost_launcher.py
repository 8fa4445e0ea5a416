"""The exported launcher on an emulated multi-host slice: several processes with CPU devices and
`jax.distributed` over 127.0.0.1 (`multihost_host.py`); every process must initialise
`jax.distributed` before its first device query and build the same global mesh, in the plan's order."""

from __future__ import annotations

import copy
import json
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from aoizora.export import write_maxdiffusion_export
from aoizora.export.run_with_plan import generate_wan_argv, plan_cache_key
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy
from aoizora.plan import Plan
from aoizora.topology import get_topology

ROOT = Path(__file__).parents[2]
BASE = ROOT / "docs/data/plans/v6e-2x4_wan2.1-t2v-14b_720p_81f.json"
HOSTS = 4  # v6e:4x4 is four hosts of four chips


def _v6e_4x4_plan(seed: int = 5) -> Plan:
    """A v6e:4x4 plan (data 2 x context 8) with its devices in a shuffled order."""
    topo = get_topology("v6e:4x4")
    doc = copy.deepcopy(json.loads(BASE.read_text()))
    st = Strategy(data=2, context=8, attention="allgather", weights="gathered",
                  splash_blocks=SplashBlocks(3072, 2048, 1024))
    doc["topology"] = {**doc["topology"], "name": "v6e:4x4", "shape": [4, 4], "wrap": [False, False]}
    doc["mesh"] = {"axis_names": list(st.mesh_axes), "axis_sizes": list(st.mesh_shape)}
    doc["strategy"] = {"key": st.key(), "mesh": st.axis_sizes, "attention": st.attention,
                       "weights": st.weights, "kernel": st.kernel, "splash_blocks": vars(st.splash_blocks)}
    coords = np.array([list(d.coords)[:2] for d in topo.devices])
    coords = coords[np.random.default_rng(seed).permutation(len(coords))]
    doc["placement"]["device_coords"] = coords.reshape(*st.mesh_shape, 2).tolist()
    doc.pop("baselines")
    doc["request"]["workload"] = doc["workload"]
    doc["request"]["topology"] = "v6e:4x4"
    doc["prediction"].pop("link_bytes", None)  # loads of the 2x4 slice's links
    return Plan(doc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_every_host_builds_the_same_global_mesh_in_the_plans_order(tmp_path):
    plan = _v6e_4x4_plan()
    write_maxdiffusion_export(plan, tmp_path / "export")
    kind = plan.data["topology"]["device_kinds"][0]
    # each host holds a 2x2 block of chips
    chips = sorted((tuple(d.coords)[:2] for d in get_topology("v6e:4x4").devices),
                   key=lambda c: (c[1] // 2, c[0] // 2, c))
    table = [[{"kind": kind, "coords": list(c), "core": 0} for c in chips[h * 4:(h + 1) * 4]] for h in range(HOSTS)]
    (tmp_path / "devices.json").write_text(json.dumps(table))
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "JAX_PLATFORMS": "cpu",
           "XLA_FLAGS": "--xla_force_host_platform_device_count=4", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    port = str(_free_port())
    procs = [subprocess.Popen([sys.executable, str(Path(__file__).with_name("multihost_host.py")),
                               str(tmp_path / "export"), str(tmp_path / "devices.json"), str(i), str(HOSTS), port],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
             for i in range(HOSTS)]
    try:
        outs = [p.communicate(timeout=180) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    by_id = {}
    for h, host in enumerate(table):
        for i, desc in enumerate(host):
            by_id[h * 2048 + i] = desc["coords"]  # JAX's CPU device ids: 2048 per process
    orders = []
    for (out, err), p in zip(outs, procs, strict=True):
        assert p.returncode == 0, err[-2000:]
        lines = out.strip().splitlines()
        assert json.loads(lines[-1]) == {"initialized_before_first_query": True}
        m = re.search(r"devices in the plan's order: \[([\d, ]+)\] \(process (\d) of (\d)\)", lines[-2])
        assert m and int(m.group(3)) == HOSTS
        orders.append([int(i) for i in m.group(1).split(",")])
    assert all(o == orders[0] for o in orders) and len(set(orders[0])) == 16
    spec = json.loads((tmp_path / "export" / "maxdiffusion_plan.json").read_text())
    planned = np.asarray(spec["device_coords"]).reshape(-1, 2).tolist()
    assert [by_id[i] for i in orders[0]] == planned


def test_aot_cache_dir_is_keyed_by_the_plan(tmp_path):
    plan = _v6e_4x4_plan()
    write_maxdiffusion_export(plan, tmp_path)
    spec = json.loads((tmp_path / "maxdiffusion_plan.json").read_text())
    argv = generate_wan_argv(spec, ["aot_cache_dir=/cache/aot/", "prompt=a cat"])
    assert f"aot_cache_dir=/cache/aot/aoizora-{plan_cache_key(spec)}" in argv
    other = _v6e_4x4_plan(seed=6)
    write_maxdiffusion_export(other, tmp_path / "other")
    other_spec = json.loads((tmp_path / "other" / "maxdiffusion_plan.json").read_text())
    # the same mesh shape, another device order: another folder
    assert other_spec["ici_parallelism"] == spec["ici_parallelism"]
    assert plan_cache_key(other_spec) != plan_cache_key(spec)
    # other flags in effect: another folder; an empty value (the cache off) is left alone
    assert plan_cache_key(spec, "--xla_tpu_enable_async_all_to_all=true") != plan_cache_key(spec)
    assert generate_wan_argv(spec, ["aot_cache_dir="])[-1] == "aot_cache_dir="
