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
    {"errors", "stderr_filter"},
    {"defaults", "toolchain"},
    {"topology"},
    {"hlo", "placement"},
    {"workload"},
    {"models", "workloads"},
    {"stage1", "cost", "sim"},
    {"stage2", "validation"},
    {"plan"},
    {"report", "runtime"},
    {"bench"},
    {"cli"},
]
ROOT = Path(aoizora.__file__).parent


def _unit(path: Path) -> str:
    """The top-level module or subpackage a file belongs to (`__init__` of the package: the root)."""
    rel = path.relative_to(ROOT)
    return rel.parts[0].removesuffix(".py") if rel.parts != ("__init__.py",) else "<root>"


def _runtime_imports(tree: ast.AST) -> set[str]:
    """The `aoizora.X` units a module imports when it runs (not under `if TYPE_CHECKING:`)."""
    typing_only = {id(n) for node in ast.walk(tree) if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                   for n in ast.walk(node)}
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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
