"""No import cycle between the modules of `aoizora`, type-only imports included.

`test_layers.py` checks the run-time imports between top-level units; this checks every import
between modules: those under `if TYPE_CHECKING:` and those inside functions too. An edge goes to the
module an import names: `import a.b.c` to `a.b.c`, `from a.b import c` to `a.b.c` when `c` is a
submodule and to `a.b` (its `__init__`) otherwise.
"""

from __future__ import annotations

import ast
from pathlib import Path

import aoizora

ROOT = Path(aoizora.__file__).parent
PACKAGE = "aoizora"


def _module_name(path: Path, root: Path) -> str:
    parts = [root.name, *path.relative_to(root).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path) -> dict[str, Path]:
    return {_module_name(p, root): p for p in sorted(root.rglob("*.py"))}


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of `known` an import names (relative imports resolved against `module`)."""
    if isinstance(node, ast.Import):
        return {a.name for a in node.names if a.name in known}
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        base = ".".join(parts[:len(parts) - node.level + 1] + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    found = set()
    for alias in node.names:
        submodule = f"{base}.{alias.name}"
        found.add(submodule if submodule in known else base)
    return found & known


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Every module under `root` and the modules under it that it imports, wherever the import is."""
    modules = _modules(root)
    known = set(modules)
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                targets |= _imported(node, name, path.name == "__init__.py", known)
        graph[name] = targets
    return graph


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components (iterative), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, successors = work[-1]
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = len(index)
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(graph[succ]))))
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def _cycle_in(component: list[str], graph: dict[str, set[str]]) -> list[str]:
    """One cycle through the component's first module, found by a breadth-first search back to it."""
    start, members = component[0], set(component)
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for succ in sorted(graph[node] & members):
                if succ == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if succ not in parents:
                    parents[succ] = node
                    following.append(succ)
        frontier = following
    raise AssertionError(f"no cycle in {component}")


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module, or with a self-loop."""
    return [_cycle_in(c, graph) for c in strongly_connected(graph) if len(c) > 1 or c[0] in graph[c[0]]]


def test_no_import_cycle_between_modules():
    found = cycles(import_graph())
    assert not found, "import cycles (one per strongly connected component):\n" + "\n".join(
        " -> ".join(c) for c in found)


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """Type-only, function-local, relative and package imports are all edges; the check finds the cycle."""
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "sub" / "__init__.py").write_text("from .b import B\n")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.sub import B\n")
    (package / "sub" / "b.py").write_text("def f():\n    from .. import a\n")
    (package / "sub" / "c.py").write_text("import pkg.a\nfrom . import b\nfrom .b import B\n")
    graph = import_graph(package)
    assert graph == {"pkg": set(), "pkg.a": {"pkg.sub"}, "pkg.sub": {"pkg.sub.b"}, "pkg.sub.b": {"pkg.a"},
                     "pkg.sub.c": {"pkg.a", "pkg.sub.b"}}
    assert cycles(graph) == [["pkg.a", "pkg.sub", "pkg.sub.b", "pkg.a"]]
    assert cycles({"x": {"x"}, "y": set()}) == [["x", "x"]]


#: the sub-packages of `aoizora.models.wan`, lowest first: a module may import only from its own
#: sub-package or those before it (type-only and function-local imports count); the package's own
#: `__init__`, which re-exports them, is above them all
WAN = "aoizora.models.wan"
WAN_SUBPACKAGES = ["transformer", "kernels", "text_encoder", "vae", "video", "space"]


def _wan_rank(module: str) -> int:
    """The place of a module of `aoizora.models.wan` in `WAN_SUBPACKAGES` (the package itself: above all)."""
    if module == WAN:
        return len(WAN_SUBPACKAGES)
    return WAN_SUBPACKAGES.index(module.removeprefix(WAN + ".").split(".")[0])


def wan_upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """The imports between modules of `aoizora.models.wan` that point to a later sub-package."""
    inside = {m for m in graph if m == WAN or m.startswith(WAN + ".")}
    return sorted(f"{src} -> {dst}" for src in inside if src != WAN for dst in graph[src] & inside
                  if _wan_rank(dst) > _wan_rank(src))


def test_every_wan_module_is_in_a_listed_subpackage():
    modules = {m for m in import_graph() if m.startswith(WAN + ".")}
    stray = sorted(m for m in modules if m.removeprefix(WAN + ".").split(".")[0] not in WAN_SUBPACKAGES)
    assert not stray, f"a module of {WAN} outside the sub-packages of WAN_SUBPACKAGES: {stray}"
    assert {m.removeprefix(WAN + ".").split(".")[0] for m in modules} == set(WAN_SUBPACKAGES)


def test_the_wan_subpackages_import_one_way():
    upward = wan_upward_imports(import_graph())
    assert not upward, f"imports from a later sub-package of {WAN} (order: {WAN_SUBPACKAGES}):\n" + "\n".join(upward)


def test_the_wan_check_sees_an_upward_import():
    graph = {WAN: {f"{WAN}.space.space"}, f"{WAN}.space.space": {f"{WAN}.transformer.strategy"},
             f"{WAN}.transformer.strategy": set(), f"{WAN}.transformer.model": {f"{WAN}.kernels.vmem"},
             f"{WAN}.kernels.vmem": {f"{WAN}.transformer.strategy", WAN}}
    assert wan_upward_imports(graph) == [f"{WAN}.kernels.vmem -> {WAN}",
                                         f"{WAN}.transformer.model -> {WAN}.kernels.vmem"]
