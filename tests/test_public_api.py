"""The public API: the Python examples of the guide and the README use only exported names, and
every exported name exists."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]
PUBLIC = ("aoizora", "aoizora.models.wan")
DOCS = [ROOT / "README.md", ROOT / "docs" / "guide.md"]


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(), re.S)


def non_public_names(code: str) -> list[str]:
    """Each `aoizora` name the code imports or reads that is not in `aoizora.__all__` or
    `aoizora.models.wan.__all__` (or comes from another module)."""
    exported = {m: set(importlib.import_module(m).__all__) for m in PUBLIC}
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "aoizora":
            if node.module not in exported:
                found += [f"from {node.module} import {a.name}" for a in node.names]
            else:
                found += [f"from {node.module} import {a.name}" for a in node.names
                          if a.name not in exported[node.module]]
        elif isinstance(node, ast.Import):
            found += [f"import {a.name}" for a in node.names if a.name.startswith("aoizora.")]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "aoizora":
            if node.attr not in exported["aoizora"]:
                found.append(f"aoizora.{node.attr}")
    return found


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_doc_examples_use_only_exported_names(path):
    blocks = _python_blocks(path)
    assert all(not non_public_names(code) for code in blocks), [non_public_names(c) for c in blocks]


def test_the_checker_sees_names_from_elsewhere():
    code = ("import aoizora\nimport aoizora.plan\nfrom aoizora.placement import MeshSpec\n"
            "from aoizora import plan_wan, run_stage2\nfrom aoizora.models.wan import Strategy\naoizora.plan_space\n"
            "aoizora.stage2\n")
    assert non_public_names(code) == ["import aoizora.plan", "from aoizora.placement import MeshSpec",
                                      "from aoizora import run_stage2", "aoizora.stage2"]


@pytest.mark.parametrize("module", PUBLIC)
def test_every_exported_name_exists(module):
    mod = importlib.import_module(module)
    assert [n for n in mod.__all__ if not hasattr(mod, n)] == []
