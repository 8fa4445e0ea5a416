"""The guide's Layout is generated from the tree (`tools/guide_layout.py`): it lists every module,
subpackage and data directory of src/aoizora and every top-level directory of the repository."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("guide_layout", ROOT / "tools" / "guide_layout.py")
guide_layout = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(guide_layout)


def test_the_guide_layout_is_the_tree():
    assert guide_layout.GUIDE.read_text() == guide_layout.rendered_guide(), (
        "docs/guide.md's Layout differs from the tree: .venv/bin/python tools/guide_layout.py")


def test_the_layout_names_every_unit_of_the_package():
    block = guide_layout.layout()
    names = {p.name + ("/" if p.is_dir() else "") for p in guide_layout.units()}
    assert {"export/", "store.py", "data/", "evaluation/", "cli/"} <= names
    assert all(f"\n  {name}" in block for name in names)


def test_every_top_level_directory_is_described():
    assert set(guide_layout.REPOSITORY) == guide_layout.top_level_directories()


def test_a_first_sentence_ends_at_a_full_stop_outside_brackets(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""A thing (v2.1 e.g. this. or that) with `a.b. c`. Then more.\n\nBody."""\n')
    assert guide_layout.first_sentence(module) == "A thing (v2.1 e.g. this. or that) with `a.b. c`"
