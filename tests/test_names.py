"""Names that cannot be confused: no two classes of `aoizora` share a name, and no modules are named
alike for different things (`run.py`, `runner.py`, `running.py`)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import aoizora

ROOT = Path(aoizora.__file__).parent


def classes_by_name(root: Path) -> dict[str, list[str]]:
    """Each class name defined under `root` (at any depth of a module), with the modules defining it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(str(path.relative_to(root)))
    return found


def test_no_two_classes_share_a_name():
    shared = {name: paths for name, paths in classes_by_name(ROOT).items() if len(paths) > 1}
    assert shared == {}, "rename one of each pair (a name says what the class is)"


def test_the_walker_finds_a_shared_name(tmp_path):
    (tmp_path / "a.py").write_text("class Plan:\n    class Inner:\n        pass\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text("def f():\n    class Plan:\n        pass\n")
    assert dict(classes_by_name(tmp_path)) == {"Plan": ["a.py", "sub/b.py"], "Inner": ["a.py"]}


def test_no_modules_named_run_runner_running():
    names = {"run.py", "runner.py", "running.py"}
    assert sorted(str(p.relative_to(ROOT)) for p in ROOT.rglob("*.py") if p.name in names) == []
