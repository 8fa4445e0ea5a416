"""The code's size budget: no source module over 700 lines, no function over 60 lines unless it
says why (a sentence about its length, "60 lines", in its docstring or a comment in its body)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "aoizora"
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 700, 60


def test_no_module_is_over_its_line_budget():
    long = {str(p.relative_to(SRC)): n for p in SRC.rglob("*.py") if (n := len(p.read_text().splitlines()))
            > MAX_MODULE_LINES}
    assert not long


def test_every_long_function_says_why():
    unexplained = []
    for path in SRC.rglob("*.py"):
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = node.end_lineno - node.lineno + 1
                body = "\n".join(lines[node.lineno - 1:node.end_lineno])
                if length > MAX_FUNCTION_LINES and "60 lines" not in body:
                    unexplained.append(f"{path.relative_to(SRC)}:{node.lineno} {node.name} ({length} lines)")
    assert not unexplained
