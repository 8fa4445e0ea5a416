"""Cross-checks of a plan file's redundant fields: every field that restates another must agree with it.

A plan states several facts more than once (the slice by name and by shape, the mesh in `mesh` and in
`strategy`, the scoped-VMEM limit in the strategy and in the compiler flags, the link loads once per
link of the slice, ...). A hand-edited or corrupted plan whose copies disagree would run, export or
be explained as something it was not planned as; `check_consistency` refuses it, naming the field.
"""

from __future__ import annotations

import math
import unicodedata
from typing import Any

from aoizora.errors import CompilerFlagError, PlanFormatError, clipped
from aoizora.placement import MeshSpec, same_mesh
from aoizora.plan.replicas import check_replicas
from aoizora.toolchain import CompilerFlags
from aoizora.topology.hardware import hardware_profile
from aoizora.workload import plan_reader


def _fail(source: str, field: str, what: str, fix: str) -> PlanFormatError:
    return PlanFormatError(f"{source} field {field} {what}; {fix}")


def first_control_character(text: str) -> str | None:
    """The first control character of `text` (a newline, a tab, an escape, a Unicode format, line or
    paragraph separator), None if it has none."""
    for ch in text:
        if ch < " " or ch == "\x7f" or (ch > "\x7f" and unicodedata.category(ch) in ("Cc", "Cf", "Zl", "Zp", "Cs")):
            return ch
    return None


def plain_strings(value: Any) -> Any:
    """`value` (a JSON document) with each control character of its strings made a space: what the
    planner writes, so that a compiler's message (which may hold tabs or line breaks) never makes
    a plan that `check_plain_strings` refuses."""
    if isinstance(value, str):
        if first_control_character(value) is None:
            return value
        return "".join(" " if first_control_character(ch) else ch for ch in value)
    if isinstance(value, dict):
        return {plain_strings(k): plain_strings(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain_strings(v) for v in value]
    return value


def check_plain_strings(data: Any, source: str, fix: str, where: str = "") -> None:
    """Raise PlanFormatError naming the first field whose name or text holds a control character.

    No plan string needs one, and each is a hazard: a plan is data that the export writes into a
    shell script (a newline there would start a command) and the CLI into one-line messages.
    """
    items: Any = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in items:
        field = f"{where}[{key}]" if isinstance(key, int) else f"{where}.{key}" if where else str(key)
        if isinstance(key, str) and first_control_character(key) is not None:
            raise _fail(source, f"{where or '(top level)'}", f"has a key holding the control character "
                        f"{first_control_character(key)!r}", fix)
        if isinstance(value, str):
            ch = first_control_character(value)
            if ch is not None:
                raise _fail(source, field, f"holds the control character {ch!r}", fix)
        elif isinstance(value, (dict, list)):
            check_plain_strings(value, source, fix, field)


def check_consistency(data: dict[str, Any], source: str, fix: str) -> None:
    """Raise PlanFormatError naming the first field of `data` that disagrees with another.

    `data` has passed the schema and the slice/mesh/coordinate checks of `check_plan`.
    """
    _check_topology_restated(data, source, fix)
    flags = _check_compiler(data, source, fix)
    # what the workload's own fields restate (e.g. a Wan plan's key, its scoped-VMEM limit)
    reader = plan_reader(data["workload"]["name"])
    disagreement = reader.check_plan(data, flags) if reader is not None else None
    if disagreement is not None:
        raise _fail(source, disagreement.field, disagreement.what, fix)
    links = expected_link_count(data["topology"])
    _check_prediction(data["prediction"], links, "prediction", source, fix)
    same = data.get("baselines", {}).get("same_strategy_jax_default")
    if isinstance(same, dict):
        where = "baselines.same_strategy_jax_default"
        if "strategy" in same and same["strategy"] != data["strategy"]["key"]:
            raise _fail(source, f"{where}.strategy", f"is {clipped(same['strategy'])} but the plan's strategy is "
                        f"{clipped(data['strategy']['key'])} (the baseline is the same strategy)", fix)
        _check_prediction(same, links, where, source, fix)
    check_replicas(data, source, fix)


def expected_link_count(topo: dict[str, Any]) -> int:
    """Directed links of the slice a plan's `topology` describes: ICI links by the generation's
    wraparound rule, plus the two die-to-die links of every two-core chip that has them."""
    profile = hardware_profile(topo["generation"])
    shape = tuple(topo["shape"])
    wrap = profile.wraps(shape)
    chips = math.prod(shape)
    ici = sum((2 * n if w else 2 * (n - 1)) * (chips // n) for n, w in zip(shape, wrap, strict=True) if n > 1)
    d2d = 2 * chips if int(topo["cores_per_chip"]) == 2 and profile.d2d_bandwidth_Bps is not None else 0
    return ici + d2d


def _check_topology_restated(data: dict[str, Any], source: str, fix: str) -> None:
    topo = data["topology"]
    if "wrap" in topo:
        wrap = list(hardware_profile(topo["generation"]).wraps(tuple(topo["shape"])))
        if topo["wrap"] != wrap:
            raise _fail(source, "topology.wrap", f"is {topo['wrap']} but a {topo['name']} slice wraps {wrap}", fix)
    request = data.get("request")
    if not isinstance(request, dict):
        return
    if "topology" in request:
        from aoizora.errors import TopologyError
        from aoizora.topology.slice import parse_topology_name

        try:
            generation, shape = parse_topology_name(str(request["topology"]))
        except TopologyError:
            generation, shape = "", ()
        if (generation, list(shape)) != (topo["generation"], list(topo["shape"])):
            raise _fail(source, "request.topology",
                        f"is {clipped(request['topology'])} but the plan is for {topo['name']}", fix)
    if "workload" in request and request["workload"] != data["workload"]:
        raise _fail(source, "request.workload", "differs from the plan's workload", fix)


def _check_compiler(data: dict[str, Any], source: str, fix: str) -> CompilerFlags:
    text = data.get("compiler", {}).get("libtpu_args", "")
    try:
        flags = CompilerFlags.parse(text)
    except CompilerFlagError as exc:
        raise _fail(source, "compiler.libtpu_args", f"is not a list of compiler flags ({exc})".split(";")[0],
                    fix) from None
    if str(flags) != text:
        raise _fail(source, "compiler.libtpu_args", "is not in the form `aoizora plan` writes (each flag once, "
                    "--name=value, sorted by name)", fix)
    return flags


def _strategy_mesh(value: Any) -> tuple[list[str], list[int]] | None:
    """(names, sizes) of a strategy's `mesh` (an object of axis sizes, or `a=2,b=4` text); None if neither."""
    if isinstance(value, dict):
        if all(isinstance(v, int) and not isinstance(v, bool) for v in value.values()):
            return list(value), list(value.values())
        return None
    if isinstance(value, str):
        try:
            spec = MeshSpec.parse(value)
        except Exception:  # noqa: BLE001 - any parse failure is "not a mesh"
            return None
        return list(spec.axis_names), list(spec.axis_sizes)
    return None


def check_strategy_mesh(data: dict[str, Any], source: str, fix: str) -> None:
    """The strategy's own mesh (when it states one) is the plan's `mesh`, axis for axis."""
    strategy, names, sizes = data["strategy"], list(data["mesh"]["axis_names"]), list(data["mesh"]["axis_sizes"])
    if "mesh" not in strategy:
        return
    mesh = _strategy_mesh(strategy["mesh"])
    if mesh is None:
        raise _fail(source, "strategy.mesh", "is not a mesh (axis name to size)", fix)
    if not same_mesh(mesh[0], mesh[1], names, sizes):
        stated = ",".join(f"{n}={v}" for n, v in zip(*mesh, strict=True))
        raise _fail(source, "strategy.mesh", f"is {stated} but mesh is "
                    f"{','.join(f'{n}={v}' for n, v in zip(names, sizes, strict=True))}", fix)


def _check_prediction(section: dict[str, Any], links: int, where: str, source: str, fix: str) -> None:
    """Link loads one per link of the slice; collectives and timeline entries well formed."""
    loads = section.get("link_bytes")
    if loads is not None:
        if not isinstance(loads, list) or not all(_number(v) and v >= 0 for v in loads):
            raise _fail(source, f"{where}.link_bytes", "is not a list of non-negative byte counts", fix)
        if len(loads) != links:
            raise _fail(source, f"{where}.link_bytes",
                        f"holds {len(loads)} values but the slice has {links} links", fix)
    _check_items(source, f"{where}.collectives", section.get("collectives"), _is_collective,
                 "a collective (an object with name, kind and seconds >= 0)", fix)
    _check_items(source, f"{where}.timeline", section.get("timeline"), _is_timeline_entry,
                 "a timeline entry (an object with kind, name and 0 <= start <= end)", fix)


def _check_items(source: str, field: str, items: Any, valid: Any, what: str, fix: str) -> None:
    """A list field (when present) whose every item is `valid`; the refusal names the item."""
    if items is None:
        return
    if not isinstance(items, list):
        raise _fail(source, field, "is not a list", fix)
    for i, item in enumerate(items):
        if not valid(item):
            raise _fail(source, f"{field}[{i}]", f"is not {what}", fix)


def _named(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("name"), str) and isinstance(item.get("kind"), str)


def _is_collective(c: Any) -> bool:
    return _named(c) and _number(c.get("seconds")) and c["seconds"] >= 0


def _is_timeline_entry(e: Any) -> bool:
    return _named(e) and _number(e.get("start")) and _number(e.get("end")) and 0 <= e["start"] <= e["end"]


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)
