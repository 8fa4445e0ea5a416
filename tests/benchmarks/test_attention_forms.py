"""benchmarks/attention_forms.py: the forms it compiles per variant, and the committed runs
(docs/data/attention-forms/) against the table of docs/results/maxdiffusion.md that cites them."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from attention_forms import forms  # noqa: E402
from program_form import VARIANTS  # noqa: E402

DATA = {name: ROOT / "docs" / "data" / "attention-forms" / f"{name}_wan2.1-t2v-14b_720p_81f.json"
        for name in ("tpu7x-2x2x1", "v6e-2x4")}


def test_the_ring_variants_take_both_layouts_and_every_variant_both_estimates():
    assert forms("allgather") == [("sequence_major", False), ("sequence_major", True)]
    assert sorted(forms("ring")) == sorted((layout, estimate) for layout in ("sequence_major", "heads_major")
                                           for estimate in (False, True))
    assert forms("ulysses_ring") == forms("ring")


@pytest.mark.parametrize("name", DATA)
def test_each_committed_run_compiles_every_form_of_one_strategy_per_variant(name):
    runs = json.loads(DATA[name].read_text())["runs"]
    for variant in VARIANTS:
        mine = [r for r in runs if r["variant"] == variant]
        assert sorted((r["ring_layout"], r["splash_cost_estimate"]) for r in mine) == sorted(forms(variant))
        assert len({r["strategy"].replace(" | ring_layout=heads_major", "") for r in mine}) == 1
        for r in mine:
            assert ("ring_layout=heads_major" in r["strategy"]) == (r["ring_layout"] == "heads_major")


def _runs(name: str) -> dict[tuple[str, str, bool], dict]:
    return {(r["variant"], r["ring_layout"], r["splash_cost_estimate"]): r
            for r in json.loads(DATA[name].read_text())["runs"]}


def test_the_results_table_is_the_committed_data():
    text = (ROOT / "docs" / "results" / "maxdiffusion.md").read_text()
    section = text[text.index("## The forms aoizora's program takes from MaxDiffusion's"):]
    end = section.find("\n## ")  # the section is its page's last
    section = section[:end] if end > 0 else section
    names = {"all-gather": "allgather", "Ulysses": "ulysses", "ring": "ring", "2D context": "ulysses_ring"}
    rows = re.findall(r"^\| (all-gather|Ulysses|ring|2D context)[^|]* \| (—|sequence-major|heads-major) \| "
                      r"(no|yes) \| ([^|]+) \| ([^|]+) \| ([^|]+) \| ([^|]+) \|$", section, flags=re.M)
    assert len(rows) == 12
    tpu7x, v6e = _runs("tpu7x-2x2x1"), _runs("v6e-2x4")
    for variant, layout, estimate, *cells in rows:
        key = (names[variant], "sequence_major" if layout in ("—", "sequence-major") else "heads_major",
               estimate == "yes")
        want = [tpu7x[key]["step_seconds"], tpu7x[key]["exposed_comm_seconds"], v6e[key]["step_seconds"],
                v6e[key]["exposed_comm_seconds"]]
        got = [float(c.strip().strip("*").replace(",", "")) / 1e3 for c in cells]
        assert got == pytest.approx(want, abs=0.06e-3), (variant, layout, estimate)


@pytest.mark.parametrize("name", DATA)
def test_the_estimate_hides_the_rings_exchange_and_slows_no_step(name):
    runs = _runs(name)
    for (variant, layout, estimate), r in runs.items():
        if estimate:
            assert r["step_seconds"] <= runs[(variant, layout, False)]["step_seconds"] + 1e-9
    for layout in ("sequence_major", "heads_major"):
        assert runs[("ring", layout, True)]["exposed_comm_seconds"] < 0.005


PER_STEP = {name: path.with_name(path.stem + "_heads_major_per_step_merge.json") for name, path in DATA.items()}


@pytest.mark.parametrize("name", DATA)
def test_with_each_merge_written_out_the_heads_major_forms_stay_the_faster(name):
    """The heads-major ring and 2D context steps with a barrier behind each ring step's merge: no
    faster than with the merges fused (the barrier costs compute), still under their sequence-major
    siblings, and as `docs/results/maxdiffusion.md` gives them."""
    fused = _runs(name)
    text = (ROOT / "docs" / "results" / "maxdiffusion.md").read_text()
    for r in json.loads(PER_STEP[name].read_text())["runs"]:
        assert (r["ring_layout"], r["splash_cost_estimate"]) == ("heads_major", True)
        key = (r["variant"], "heads_major", True)
        assert fused[key]["step_seconds"] <= r["step_seconds"]
        assert r["step_seconds"] < fused[(r["variant"], "sequence_major", True)]["step_seconds"]
        assert f"{r['step_seconds'] * 1e3:,.1f}" in text
