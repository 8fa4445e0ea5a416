"""The planner reads a workload only through `StrategySpace`: no module of `aoizora.plan` imports a
model, a Wan plan is still checked as one (its space type registered by the models it ships), and
the scoped-VMEM flag's name is written once."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import aoizora
from aoizora.toolchain import SCOPED_VMEM_FLAG
from aoizora.workload import plan_reader

SRC = Path(aoizora.__file__).parent


def _imports(path: Path) -> set[str]:
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def test_no_plan_module_imports_a_model():
    offenders = {str(p.relative_to(SRC)): sorted(m for m in _imports(p) if m.startswith("aoizora.models"))
                 for p in (SRC / "plan").rglob("*.py")}
    assert not {p: m for p, m in offenders.items() if m}


@pytest.mark.parametrize("name", ["wan2.1-t2v-14b", "wan2.2-t2v-a14b", "wan2.2-ti2v-5b"])
def test_wan_plans_are_read_by_the_wan_space(name):
    from aoizora.models.wan.space.space import WanSpace

    assert plan_reader(name) is WanSpace
    assert plan_reader("mlp") is None


def test_the_scoped_vmem_flag_is_named_once():
    where = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py") if SCOPED_VMEM_FLAG in p.read_text()]
    assert where == ["toolchain.py"]
