"""Cross-checks of a plan file's redundant fields: every field that restates another must agree with it.

A plan states several facts more than once (the slice by name and by shape, the mesh in `mesh` and in
`strategy`, the scoped-VMEM limit in the strategy and in the compiler flags, the link loads once per
link of the slice, ...). A hand-edited or corrupted plan whose copies disagree would run, export or
be explained as something it was not planned as; `check_consistency` refuses it, naming the field.
"""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Any

from aoizora.errors import CompilerFlagError, PlanFormatError
from aoizora.placement import MeshSpec
from aoizora.toolchain import CompilerFlags
from aoizora.topology.hardware import hardware_profile

#: The libtpu flag a strategy's scoped-VMEM limit is compiled with (`Strategy.scoped_vmem_kib`).
SCOPED_VMEM_FLAG = "xla_tpu_scoped_vmem_limit_kib"
_MESH_SEGMENT = re.compile(r"(single|[A-Za-z_][A-Za-z0-9_]*=[0-9]+(,[A-Za-z_][A-Za-z0-9_]*=[0-9]+)*)")


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
    names, sizes = list(data["mesh"]["axis_names"]), list(data["mesh"]["axis_sizes"])
    _check_topology_restated(data, source, fix)
    flags = _check_compiler(data, source, fix)
    _check_strategy_key(data["strategy"], names, sizes, source, fix)
    _check_scoped_vmem(data["strategy"], flags, source, fix)
    _check_wan_strategy(data, names, source, fix)
    links = expected_link_count(data["topology"])
    _check_prediction(data["prediction"], links, "prediction", source, fix)
    same = data.get("baselines", {}).get("same_strategy_jax_default")
    if isinstance(same, dict):
        where = "baselines.same_strategy_jax_default"
        if "strategy" in same and same["strategy"] != data["strategy"]["key"]:
            raise _fail(source, f"{where}.strategy", f"is {_clip(same['strategy'])} but the plan's strategy is "
                        f"{_clip(data['strategy']['key'])} (the baseline is the same strategy)", fix)
        _check_prediction(same, links, where, source, fix)


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
                        f"is {_clip(request['topology'])} but the plan is for {topo['name']}", fix)
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


def same_mesh(names_a: list[str], sizes_a: list[int], names: list[str], sizes: list[int]) -> bool:
    """Whether mesh (`names`, `sizes`) is mesh a, up to axes of size 1 left out (a plan's mesh may
    drop a strategy's unused axes): the same axes larger than 1 in the same order, and no other axis."""
    full = dict(zip(names_a, sizes_a, strict=True))
    big = [(n, s) for n, s in zip(names_a, sizes_a, strict=True) if s > 1]
    return (all(n in full and full[n] == s for n, s in zip(names, sizes, strict=True))
            and [(n, s) for n, s in zip(names, sizes, strict=True) if s > 1] == big
            and [n for n in names_a if n in names] == names)


def _check_strategy_key(strategy: dict[str, Any], names: list[str], sizes: list[int], source: str, fix: str) -> None:
    """The key's leading `axis=size,...` segment (axes larger than 1) and its `weights=`/`attn=` segments
    restate the mesh and the strategy's fields."""
    segments = strategy["key"].split(" | ")
    if _MESH_SEGMENT.fullmatch(segments[0]):
        mesh = ",".join(f"{n}={s}" for n, s in zip(names, sizes, strict=True) if s > 1) or "single"
        if segments[0] != mesh:
            raise _fail(source, "strategy.key", f"names mesh {_clip(segments[0])} but the plan's mesh is {mesh!r}", fix)
    for label, field in (("weights", "weights"), ("attn", "attention")):
        stated = next((s.split("=", 1)[1] for s in segments[1:] if s.startswith(f"{label}=")), None)
        if stated is not None and field in strategy and strategy[field] != stated:
            raise _fail(source, f"strategy.{field}",
                        f"is {_clip(strategy[field])} but strategy.key says {label}={stated[:200]}", fix)


def _check_scoped_vmem(strategy: dict[str, Any], flags: CompilerFlags, source: str, fix: str) -> None:
    if strategy.get("scoped_vmem_kib") is None:
        return
    flag = dict(flags.items).get(SCOPED_VMEM_FLAG)
    if flag != str(strategy["scoped_vmem_kib"]):
        raise _fail(source, "strategy.scoped_vmem_kib",
                    f"is {strategy['scoped_vmem_kib']} but compiler.libtpu_args sets --{SCOPED_VMEM_FLAG}={flag}", fix)


def _check_wan_strategy(data: dict[str, Any], names: list[str], source: str, fix: str) -> None:
    """A plan of a Wan model: its strategy must be a Wan strategy of this mesh and video."""
    from aoizora.models.registry import PIPELINES

    if data["workload"]["name"] not in PIPELINES:
        return
    from aoizora.errors import StrategyError
    from aoizora.models.wan.strategy import Strategy

    strategy = data["strategy"]
    try:
        parsed = Strategy.from_description(strategy)
    except StrategyError as exc:
        raise _fail(source, "strategy", f"is not a Wan strategy ({str(exc).split(';')[0]})", fix) from None
    if not same_mesh(list(parsed.mesh_axes), list(parsed.mesh_shape), names, list(data["mesh"]["axis_sizes"])):
        raise _fail(source, "mesh.axis_names", f"is {names} but a {parsed.attention} Wan strategy's mesh is "
                    f"{list(parsed.mesh_axes)}", fix)
    reasons = parsed.splash_blocks.reasons() if parsed.splash_blocks is not None else []
    if reasons:
        raise _fail(source, "strategy.splash_blocks", reasons[0], fix)
    fitted = data["workload"].get("splash_blocks")
    if (isinstance(fitted, str) and fitted.startswith("fitted to ")
            and fitted != f"fitted to {data['topology']['generation']}"):
        raise _fail(source, "workload.splash_blocks",
                    f"says {_clip(fitted)} but the plan is for {data['topology']['name']}", fix)
    shapes = data["workload"]["shapes"]
    video = [shapes.get("frames"), shapes.get("height"), shapes.get("width")]
    if "video" in strategy and strategy["video"] != video:
        raise _fail(source, "strategy.video", f"is {strategy['video']} but workload.shapes gives {video}", fix)
    if "kernel" in strategy and "kernel" in data["workload"] and strategy["kernel"] != data["workload"]["kernel"]:
        raise _fail(source, "strategy.kernel", f"is {_clip(strategy['kernel'])} but workload.kernel is "
                    f"{_clip(data['workload']['kernel'])}", fix)
    from aoizora.models.wan.experts import expert_key_suffixes

    key, given = parsed.key(), strategy["key"]
    if given != key:
        if not given.startswith(key + " | "):
            raise _fail(source, "strategy.key", f"is {_clip(given)} but the strategy it describes is {key!r}", fix)
        # an expert deployment's key names its flags after the strategy's own segments, from a closed set
        suffix = given[len(key) + 3:]
        if suffix not in expert_key_suffixes():
            raise _fail(source, "strategy.key", f"adds {_clip(suffix)} to the strategy's key {key!r}, which is not "
                        "an expert deployment's flags (`<deployment> flags`)", fix)


def _clip(value: Any, limit: int = 200) -> str:
    """`value` as Python writes it, cut to about `limit` characters (an ellipsis says so)."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


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
