"""The package import graph reads top-down as the pipeline and has no cycle.

Every `aoizora` import executed at run time (those under `if TYPE_CHECKING:` only name types) is
an edge between top-level modules or subpackages; each edge must point to a lower layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import aoizora

# lowest first: a module may import only from layers before its own
LAYERS: list[set[str]] = [
    {"errors", "interrupts", "stderr_filter", "progress", "store"},
    {"defaults", "toolchain", "plan_video", "slice_costs"},
    {"topology"},
    {"hlo", "placement"},
    {"workload"},
    {"models", "workloads"},
    {"stage1", "cost", "sim"},
    {"stage2"},
    {"plan"},
    {"report", "runtime", "export", "measure"},  # measure: timing on the chip present (`aoizora measure`)
    {"api"},  # the Python API's Wan entry point (reads MaxDiffusion commands)
    {"compare"},  # `aoizora compare`: plans a Wan video on several slices (through `api`) and prices them
    {"evaluation"},  # `aoizora bench` and `aoizora validate`: the harness and the validation the CLI runs
    {"cli"},
]
ROOT = Path(aoizora.__file__).parent


def _unit(path: Path) -> str:
    """The top-level module or subpackage a file belongs to (`__init__` of the package: the root)."""
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py") if rel.parts != ("__init__.py",) else "<root>"


def _runtime_nodes(tree: ast.AST) -> list[ast.AST]:
    """The nodes of a module that run (those not under `if TYPE_CHECKING:`)."""
    typing_only = {id(n) for node in ast.walk(tree)
                   if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for n in ast.walk(node)}
    return [node for node in ast.walk(tree) if id(node) not in typing_only]


def _runtime_imports(tree: ast.AST) -> set[str]:
    """The `aoizora.X` units a module imports when it runs (not under `if TYPE_CHECKING:`)."""
    names: set[str] = set()
    for node in _runtime_nodes(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            modules = [node.module]
        elif isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        else:
            continue
        names |= {m.split(".")[1] for m in modules if m.startswith("aoizora.")}
        if isinstance(node, ast.ImportFrom) and node.module == "aoizora":
            names |= {a.name for a in node.names}
    return names


def import_edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for path in ROOT.rglob("*.py"):
        unit = _unit(path)
        edges.setdefault(unit, set()).update(_runtime_imports(ast.parse(path.read_text())) - {unit})
    return edges


def _layer(unit: str) -> int:
    return next(i for i, layer in enumerate(LAYERS) if unit in layer)


def test_every_unit_has_a_layer():
    units = {u for u in import_edges() if u != "<root>"}
    assert units == set().union(*LAYERS), "a new top-level module or subpackage needs its place in LAYERS"


def test_imports_point_down_the_pipeline():
    upward = sorted(f"{src} -> {dst}" for src, dsts in import_edges().items() if src != "<root>"
                    for dst in dsts if _layer(dst) >= _layer(src))
    assert not upward, "imports that do not point to a lower layer"


def test_the_import_graph_has_no_cycle():
    edges = import_edges()
    state: dict[str, int] = {}

    def visit(u: str, path: list[str]) -> None:
        state[u] = 1
        for v in sorted(edges.get(u, ())):
            assert state.get(v) != 1, f"import cycle: {' -> '.join(path + [u, v])}"
            if v not in state:
                visit(v, path + [u])
        state[u] = 2

    for unit in sorted(edges):
        if unit not in state:
            visit(unit, [])


def test_the_walker_reads_runtime_imports_only():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from aoizora.plan import Plan\n"
                     "from aoizora.stage2.search import run_stage2\nimport aoizora.cli\n")
    assert _runtime_imports(tree) == {"stage2", "cli"}


def _names_from_other_units() -> list[tuple[str, str, str]]:
    """(importing file, `aoizora.X...` module, name) of every name a module imports at run time from
    another top-level module or subpackage."""
    found = []
    for path in ROOT.rglob("*.py"):
        unit = _unit(path)
        for node in _runtime_nodes(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("aoizora."):
                if node.module.split(".")[1] != unit:
                    found += [(str(path.relative_to(ROOT)), node.module, a.name) for a in node.names]
    return found


def _private(module: str, name: str) -> bool:
    return name.startswith("_") or any(p.startswith("_") and p != "__init__" for p in module.split("."))


def _exported(package: Path) -> set[str] | None:
    """The names in a subpackage's `__all__`, None when its `__init__` declares none."""
    tree = ast.parse((package / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def _private_imports() -> list[str]:
    return sorted(f"{f}: from {m} import {n}" for f, m, n in _names_from_other_units() if _private(m, n))


def _unexported_imports() -> list[str]:
    """Names taken from another subpackage that its `__all__` does not list (subpackages without
    one are left out)."""
    missing = []
    for f, module, name in _names_from_other_units():
        parts = module.split(".")[1:]
        package = ROOT / parts[0]
        if len(parts) > 1 and (package / parts[1] / "__init__.py").exists() \
                and [p.name for p in package.glob("*.py")] == ["__init__.py"]:
            # a package that only groups subpackages (`evaluation`): the surface is its subpackage's
            package, parts = package / parts[1], parts[1:]
        exported = _exported(package) if package.is_dir() else None
        submodule = len(parts) == 1 and (package / f"{name}.py").exists()  # `from aoizora.X import module`
        if exported is not None and name not in exported and not submodule:
            missing.append(f"{f}: from {module} import {name}")
    return sorted(missing)


def test_no_private_name_crosses_a_subpackage():
    assert not _private_imports(), "private names imported from another subpackage"


def test_what_another_subpackage_imports_is_in_its_public_surface():
    """A name one subpackage takes from another is in that one's `__all__`. (`models`, `report` and
    `runtime` declare none: their modules are their interface, and their `__init__` imports nothing,
    so that the CLI starts without loading jax.)"""
    assert not _unexported_imports(), "names another subpackage uses that its __init__ does not export"


def test_the_surface_checks_see_a_violation(tmp_path, monkeypatch):
    """The two checks above fail on a module that takes a private name, or an unexported one, from
    another subpackage."""
    package = tmp_path / "aoizora"
    (package / "cost").mkdir(parents=True)
    (package / "hlo").mkdir()
    (package / "hlo" / "__init__.py").write_text('__all__ = ["Program", "ring_phases"]\n')
    (package / "cost" / "__init__.py").write_text("")
    (package / "cost" / "model.py").write_text("from aoizora.hlo.builder import _Builder\n"
                                                "from aoizora.hlo.traffic import all_to_all_chunk, ring_phases\n"
                                                "from aoizora.cost.links import _private_but_same_package\n")
    monkeypatch.setitem(globals(), "ROOT", package)
    assert _private_imports() == ["cost/model.py: from aoizora.hlo.builder import _Builder"]
    assert _unexported_imports() == ["cost/model.py: from aoizora.hlo.builder import _Builder",
                                     "cost/model.py: from aoizora.hlo.traffic import all_to_all_chunk"]
