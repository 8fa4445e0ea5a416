"""A plan whose redundant fields disagree is refused on load, naming the field.

The plans are committed ones (docs/data/plans), each edited in one field: the property test draws
the field and its new value; the named cases are the edits a user made by hand in the reliability
battery (another slice, a reshaped mesh, renamed axes, garbage collectives and compiler flags).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aoizora.errors import PlanFormatError
from aoizora.plan.plan import check_plan
from tests.fuzzing import FUZZ

PLANS = Path(__file__).resolve().parents[2] / "docs" / "data" / "plans"
V5E = PLANS / "v5e-2x4_wan2.1-t2v-14b_720p_81f_top3.json"
TPU7X = PLANS / "tpu7x-2x2x1_wan2.1-t2v-14b_720p_81f.json"
TILES = PLANS / "tile-search" / "v5e-2x4_wan2.1-t2v-14b_720p_81f_top3.json"
_DOCS: dict[Path, dict[str, Any]] = {}


def committed(path: Path = V5E) -> dict[str, Any]:
    if path not in _DOCS:
        _DOCS[path] = json.loads(path.read_text())
    return copy.deepcopy(_DOCS[path])


def _get(doc: Any, path: tuple) -> Any:
    for part in path:
        doc = doc[part]
    return doc


def _put(doc: Any, path: tuple, value: Any) -> None:
    _get(doc, path[:-1])[path[-1]] = value


def _edit(path: tuple, value: Any) -> Callable[[dict], None]:
    return lambda d: _put(d, path, value)


def _another_slice(d: dict) -> None:
    d["topology"].update(name="v6e:2x4", generation="v6e", device_kinds=["TPU v6 lite"])


def _reshape_mesh(d: dict) -> None:
    d["mesh"]["axis_sizes"] = [1, 4, 2, 1]


def _drop_link(d: dict) -> None:
    d["prediction"]["link_bytes"].pop()


#: (plan, edit, field the refusal names): every edit leaves the plan valid JSON of the schema.
CASES = [
    (V5E, _another_slice, "request.topology"),
    (V5E, _edit(("topology", "name"), "v5e:4x2"), "topology.shape"),
    (V5E, _edit(("topology", "wrap"), [True, False]), "topology.wrap"),
    (V5E, _reshape_mesh, "strategy.mesh"),
    (V5E, _edit(("mesh", "axis_names"), ["data", "fsdp", "ctx", "tensor"]), "strategy.mesh"),
    (V5E, _edit(("strategy", "mesh"), {"data": 2, "fsdp": 1, "context": 4, "tensor": 1}), "strategy.mesh"),
    (V5E, _edit(("strategy", "mesh"), "garbage"), "strategy.mesh"),
    (V5E, _edit(("prediction", "collectives"), [1, 2, 3]), "prediction.collectives[0]"),
    (V5E, _edit(("prediction", "collectives"), "garbage"), "prediction/collectives"),
    (V5E, _edit(("prediction", "collectives", 0, "seconds"), -1.0), "prediction.collectives[0]"),
    (V5E, _edit(("prediction", "timeline", 3, "end"), -1.0), "prediction.timeline[3]"),
    (V5E, _drop_link, "prediction.link_bytes"),
    (V5E, _edit(("compiler", "libtpu_args"), "garbage"), "compiler.libtpu_args"),
    (V5E, _edit(("compiler", "libtpu_args"), "--b=1 --a=2"), "compiler.libtpu_args"),
    (V5E, _edit(("strategy", "key"), "data=2,context=4 | weights=gathered | attn=allgather | blocks=1280/2048/1024"),
     "strategy.key"),
    (V5E, _edit(("strategy", "attention"), "ring"), "strategy.key"),
    (V5E, _edit(("strategy", "splash_blocks", "block_q"), 1001), "strategy.splash_blocks"),
    (V5E, _edit(("strategy", "video"), [21, 480, 832]), "strategy.video"),
    (V5E, _edit(("strategy", "kernel"), "xla"), "strategy.kernel"),
    (V5E, _edit(("strategy", "scoped_vmem_kib"), 32768), "strategy.scoped_vmem_kib"),
    (V5E, _edit(("baselines", "same_strategy_jax_default", "strategy"), "tensor=8"),
     "baselines.same_strategy_jax_default.strategy"),
    (V5E, _edit(("workload", "shapes", "frames"), 21), "request.workload"),
    (V5E, _edit(("placement", "device_coords", 0, 0, 0, 0), [0, 1]), "placement.device_coords"),
    (TILES, _edit(("compiler", "libtpu_args"), "--xla_tpu_scoped_vmem_limit_kib=32768"), "strategy.scoped_vmem_kib"),
    (TPU7X, _edit(("mesh", "axis_names"), ["data", "fsdp", "context", "context_ulysses", "tensor"]), "strategy.mesh"),
    (TPU7X, _edit(("strategy", "attention"), "ulysses"), "strategy.key"),
]


def test_every_committed_plan_is_consistent():
    for path in sorted(PLANS.rglob("*.json")):
        check_plan(json.loads(path.read_text()), source=path.name)


@pytest.mark.parametrize("path,edit,field", CASES, ids=[f"{p.stem[:12]}-{f}" for p, _, f in CASES])
def test_an_inconsistent_plan_is_refused_naming_the_field(path, edit, field):
    doc = committed(path)
    edit(doc)
    with pytest.raises(PlanFormatError) as exc:
        check_plan(doc)
    message = str(exc.value)
    assert field in message and "\n" not in message


# --- the property: any one redundant field of a committed plan, changed, is refused -------------

def _leaves(doc: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _leaves(v, (*path, k))]
    if isinstance(doc, list) and doc:
        return [p for i, v in enumerate(doc) for p in _leaves(v, (*path, i))]
    return [path]


def _redundant_fields(doc: dict) -> list[tuple]:
    """Every leaf that restates another field of the plan (a change to it contradicts that field)."""
    fields = [p for section in ("topology", "mesh", "strategy") for p in _leaves(doc[section], (section,))]
    fields += [p for p in _leaves(doc["placement"]["device_coords"], ("placement", "device_coords"))][:8]
    fields += [("request", "topology"), ("baselines", "same_strategy_jax_default", "strategy"),
               ("workload", "shapes", "frames"), ("workload", "shapes", "width"), ("workload", "kernel")]
    return fields


FIELDS = {path: _redundant_fields(committed(path)) for path in (V5E, TPU7X)}
_GARBAGE_FLAGS = st.sampled_from(["garbage", "-x", "--", "--a=1 --a=2", "xla_tpu_dvfs_p_state=7", "--b=1 --a=1"])


@st.composite
def _perturbed(draw) -> tuple[str, dict]:
    path = draw(st.sampled_from([V5E, TPU7X]))
    doc = committed(path)
    field = draw(st.sampled_from(FIELDS[path]))
    old = _get(doc, field)
    if isinstance(old, bool):
        new: Any = not old
    elif isinstance(old, int):
        new = draw(st.integers(-3, 20_000).filter(lambda v: v != old))
    elif field == ("compiler", "libtpu_args") or field == ("strategy", "key"):
        new = draw(_GARBAGE_FLAGS) if field[0] == "compiler" else draw(st.text(max_size=30).filter(lambda v: v != old))
    else:
        new = draw(st.text(max_size=16).filter(lambda v: v != old))
    _put(doc, field, new)
    return ".".join(map(str, field)), doc


@FUZZ
@given(_perturbed())
def test_any_redundant_field_changed_is_refused(case):
    field, doc = case
    with pytest.raises(PlanFormatError):
        check_plan(doc)


# --- a plan derived for another pair (bench --measure) restates that pair, not the chosen one --------
@pytest.mark.parametrize("vmem", [None, 32768])
def test_a_plan_for_another_pair_is_consistent(vmem):
    from aoizora.placement import MeshSpec, enumerate_placements
    from aoizora.plan import load_plan
    from aoizora.plan.planner import plan_for_pair
    from aoizora.topology import get_topology

    plan = load_plan(TILES)  # its strategy sets a scoped-VMEM limit, recorded in its compiler flags
    topo = get_topology(plan.topology_name)
    description = {k: v for k, v in plan.strategy.items() if k not in ("key", "scoped_vmem_kib")}
    description["mesh"] = {"data": 2, "fsdp": 1, "context": 4, "tensor": 1}
    if vmem is not None:
        description["scoped_vmem_kib"] = vmem
    from aoizora.models.registry import wan_space

    space = wan_space("wan2.1-t2v-14b", "720p", 81, generation=topo.generation)
    strategy = space.from_description(description)
    placement = enumerate_placements(topo, MeshSpec(("data", "fsdp", "context", "tensor"), (2, 1, 4, 1))).placements[0]
    pair = plan_for_pair(plan, space, strategy, placement, topo,
                         {"step_seconds": 1.0, "compute_seconds": 0.9, "exposed_comm_seconds": 0.1})
    assert pair.strategy["key"] == strategy.key() and "baselines" not in pair.data
    flags = dict(pair.compiler_flags.items)
    assert flags.get("xla_tpu_scoped_vmem_limit_kib") == (None if vmem is None else str(vmem))


def test_plan_strings_with_control_characters_are_refused_naming_the_field():
    from aoizora.errors import PlanFormatError
    from aoizora.plan.plan import check_plan

    for where, value in ((("notes",), ["a\tb"]), (("placement", "description"), "x\x1b[31m"),
                         (("strategy", "key"), "k\u2028touch f")):
        doc = json.loads(V5E.read_text())
        node = doc
        for part in where[:-1]:
            node = node[part]
        node[where[-1]] = value
        pattern = r"field " + r"\.".join(where) + r"(\[0\])? holds the control"
        with pytest.raises(PlanFormatError, match=pattern) as info:
            check_plan(doc)
        assert "\n" not in str(info.value)


def test_the_planner_writes_no_control_character_a_load_would_refuse():
    from aoizora.plan.consistency import check_plain_strings, plain_strings

    doc = {"alternatives": [{"dropped": "compile failed: XlaRuntimeError: RESOURCE_EXHAUSTED:\tout of\rmemory"}],
           "notes\n": ["a\nb"]}
    check_plain_strings(plain_strings(doc), "plan", "fix")
    assert plain_strings(doc)["alternatives"][0]["dropped"].endswith("RESOURCE_EXHAUSTED: out of memory")
