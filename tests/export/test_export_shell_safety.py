"""A plan file is data, never a shell command: what the export writes into command.sh and prints."""

from __future__ import annotations

import copy
import json
import os
import shlex
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aoizora.errors import ExportError, PlanFormatError
from aoizora.export import export_plan, write_maxdiffusion_export
from aoizora.plan import load_plan
from aoizora.plan.plan import plan_from_bytes
from tests.fuzzing import FUZZ

ROOT = Path(__file__).parents[2]
TPU7X_PLAN = ROOT / "docs/data/plans/tpu7x-2x2x1_wan2.1-t2v-14b_720p_81f_top11.json"
BASE = json.loads(TPU7X_PLAN.read_text())
KEY = BASE["strategy"]["key"]


def _with_key(key: str) -> dict:
    """The plan with its strategy key replaced everywhere the plan repeats it."""
    def swap(value):
        if isinstance(value, dict):
            return {k: swap(v) for k, v in value.items()}
        if isinstance(value, list):
            return [swap(v) for v in value]
        return value.replace(KEY, key) if isinstance(value, str) else value

    return swap(copy.deepcopy(BASE))


def _sandboxed_check(export_dir: Path, sandbox: Path) -> list[str]:
    """Run `sh command.sh --check` in `sandbox` (a stand-in `python` that does nothing comes first
    on PATH); the files it created there and in the export."""
    stub = sandbox.parent / "bin"
    stub.mkdir(exist_ok=True)
    (stub / "python").write_text("#!/bin/sh\nexit 0\n")
    (stub / "python").chmod(0o755)
    before = set(os.listdir(export_dir))
    subprocess.run(["sh", str(export_dir / "command.sh"), "--check"], cwd=sandbox, capture_output=True, timeout=30,
                   env={"PATH": f"{stub}:/usr/bin:/bin", "HOME": str(sandbox)})
    return sorted(os.listdir(sandbox)) + sorted(set(os.listdir(export_dir)) - before)


def test_the_key_suffix_attack_is_refused_on_load(tmp_path):
    doc = _with_key(KEY + " | x\ntouch PWNED\n#")
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanFormatError, match=r"strategy.key holds the control character '\\n'") as info:
        load_plan(path)
    assert "\n" not in str(info.value)


def test_a_key_suffix_outside_the_expert_vocabulary_is_refused():
    base_key = KEY.rsplit(" | ", 1)[0]
    for suffix in ("x; touch PWNED", "$(touch PWNED) flags", "maxdiffusion-flash flags | more"):
        with pytest.raises(PlanFormatError, match="strategy.key adds .* not an expert deployment's flags"):
            plan_from_bytes(json.dumps(_with_key(f"{base_key} | {suffix}")).encode())
    plan_from_bytes(json.dumps(_with_key(f"{base_key} | maxdiffusion-flash flags")).encode())  # a known expert


def test_export_checks_what_it_writes_even_for_a_plan_that_skipped_the_checks():
    from aoizora.export.maxdiffusion import shell_safe

    run = shell_safe(export_plan(load_plan(TPU7X_PLAN)))
    bad = [run.__class__(**{**vars(run), "config": "x.yml; touch PWNED"}),
           run.__class__(**{**vars(run), "overrides": (*run.overrides, ("prompt", "a\ntouch PWNED"))}),
           run.__class__(**{**vars(run), "libtpu_args": "--xla_a=$(touch PWNED)"}),
           run.__class__(**{**vars(run), "plan_summary": {"strategy": "k\ntouch PWNED"}})]
    for other in bad:
        with pytest.raises(ExportError) as info:
            shell_safe(other)
        assert "\n" not in str(info.value)


def test_long_values_are_echoed_cut_short():
    from aoizora.export.maxdiffusion import shell_safe

    run = shell_safe(export_plan(load_plan(TPU7X_PLAN)))
    with pytest.raises(ExportError) as info:
        shell_safe(run.__class__(**{**vars(run), "config": "x;" * 100_000}))
    assert len(str(info.value)) < 400 and "…" in str(info.value)


def _at(doc, path):
    for part in path:
        doc = doc[part]
    return doc


#: every string leaf of the plan, by path
def _string_paths(value, path=()):
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _string_paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _string_paths(v, (*path, i))
    elif isinstance(value, str):
        yield path


#: the plan's distinct string values per top-level section: a value is changed everywhere the plan
#: repeats it (as a plan edited to stay consistent would be)
SECTIONS: dict[str, list[str]] = {}
for _path in _string_paths(BASE):
    SECTIONS.setdefault(str(_path[0]), [])
    if _at(BASE, _path) not in SECTIONS[str(_path[0])]:
        SECTIONS[str(_path[0])].append(_at(BASE, _path))
#: lines of shell words (some of which would create a file if a shell ran them), joined by newlines
_WORD = st.sampled_from(["x", ":>f", "touch f", "#", "'", '"', "$(", ")", "`", ";", "|", "&", "\\", "\r", "\x00",
                         "\x1b", "\t", "=", "-"])
_SHELLISH = st.lists(st.lists(_WORD, min_size=1, max_size=3).map(" ".join), max_size=4).map("\n".join)
_TEXT = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40) | _SHELLISH


def _replaced(value, old: str, new: str):
    if isinstance(value, dict):
        return {k: _replaced(v, old, new) for k, v in value.items()}
    if isinstance(value, list):
        return [_replaced(v, old, new) for v in value]
    return new if value == old else value


@pytest.mark.parametrize("section", sorted(SECTIONS))
@settings(FUZZ, max_examples=15)
@given(data=st.data(), text=_TEXT, keep=st.booleans())
def test_any_text_in_any_plan_string_is_refused_or_exports_inert(tmp_path_factory, section, data, text, keep):
    old = data.draw(st.sampled_from(SECTIONS[section]))
    doc = _replaced(BASE, old, (old if keep else "") + text)  # appended keeps most fields loadable
    try:
        plan = plan_from_bytes(json.dumps(doc).encode())
    except PlanFormatError as exc:
        assert "\n" not in str(exc) and "\r" not in str(exc)
        return
    out = tmp_path_factory.mktemp("export")
    try:
        write_maxdiffusion_export(plan, out / "mdx")
    except ExportError as exc:
        assert "\n" not in str(exc)
        return
    sandbox = out / "sandbox"
    sandbox.mkdir()
    assert _sandboxed_check(out / "mdx", sandbox) == []


@pytest.mark.slow
def test_cli_prints_the_launcher_line_quoted(tmp_path):
    import sys

    out = tmp_path / "a b;touch x"
    r = subprocess.run([sys.executable, "-c", "from aoizora.cli import main; main()", "export", str(TPU7X_PLAN),
                        "--to", "maxdiffusion", "--out", str(out)], capture_output=True, text=True, timeout=300,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    launcher = r.stdout.strip().splitlines()[-1]
    assert shlex.quote(str(out)) + "/run_with_plan.py" in launcher
    assert shlex.split(launcher)[-1] == f"{out}/run_with_plan.py"
