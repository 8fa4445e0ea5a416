"""The predicted Wan totals (benchmarks/hardware/wan_totals.py) against their committed parts, without compiling:
every committed total is re-added from the suite's Q2 step, the committed decode and the text encoding, and a
changed part is caught."""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "hardware"))

import wan_table  # noqa: E402
import wan_totals  # noqa: E402

TOTALS = ROOT / "docs" / "data" / "hardware" / "wan_totals.json"


def _committed() -> dict[str, Any]:
    return json.loads(TOTALS.read_text())


def problems(doc: dict[str, Any], suite: list[dict[str, Any]], records: list[dict[str, Any]]) -> list[str]:
    """Where a committed total is not the sum of its parts as the committed data gives them."""
    from aoizora.models.wan.text_encoder.cost import text_encode_cost

    steps_of = {(e["key"], c["name"]): c["q2_seconds"] for e in suite for c in e.get("configs", [])}
    out = []
    for entry in doc["entries"]:
        for c in entry.get("configs", []):
            where = f"{entry['key']} {c['config']}"
            if c["predicted_total_seconds"] is None:
                continue
            parts = c["parts"]
            denoise = parts["denoise"]
            if denoise["step_seconds"] != steps_of[(entry["key"], c["config"])]:
                out.append(f"{where}: step is not the suite's Q2 step")
            decode = wan_totals.find_decode(records, c["topology"], c["videos"], c["vae_spatial"],
                                            wan_totals.DEVICES[c["topology"]])
            if decode is None or parts["vae_decode"]["seconds"] != decode["seconds"]:
                out.append(f"{where}: decode is not the committed decode on its mesh")
            if parts["text_encode"]["seconds"] != text_encode_cost(c["videos"]).seconds:
                out.append(f"{where}: text encoding is not text_encode_cost's")
            total = (parts["text_encode"]["seconds"] + denoise["steps"] * denoise["step_seconds"]
                     + parts["expert_swap"]["seconds"] + parts["vae_decode"]["seconds"])
            if c["predicted_total_seconds"] != pytest.approx(total, rel=1e-12):
                out.append(f"{where}: predicted total is not its parts' sum")
            if c["error"] != pytest.approx(total / c["measured_total_seconds"] - 1, rel=1e-9):
                out.append(f"{where}: error is not predicted / measured - 1")
    return out


def _inputs() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    return wan_table.load([wan_totals.SUITE]), wan_totals.decode_records(list(wan_totals.DECODES))


def test_every_committed_total_is_the_sum_of_its_committed_parts():
    suite, records = _inputs()
    doc = _committed()
    assert problems(doc, suite, records) == []
    # the text encoding counts (the timed call re-encodes the prompts at every commit read) and no swap is added
    predicted = [c for e in doc["entries"] for c in e.get("configs", []) if c["predicted_total_seconds"] is not None]
    assert predicted, "no total was predicted"
    assert all(c["parts"]["text_encode"]["in_generation_time"] for c in predicted)
    assert all(c["parts"]["expert_swap"]["seconds"] == 0.0 for c in predicted)


@pytest.mark.parametrize("change", ["step", "decode", "total"])
def test_a_changed_part_is_caught(change):
    suite, records = _inputs()
    doc = copy.deepcopy(_committed())
    row = next(c for e in doc["entries"] for c in e.get("configs", []) if c["predicted_total_seconds"] is not None)
    if change == "step":
        suite = copy.deepcopy(suite)
        for e in suite:
            for c in e.get("configs", []):
                c["q2_seconds"] *= 1.01
    elif change == "decode":
        records = [{**r, "seconds": r["seconds"] + 0.5} for r in records]
    else:
        row["predicted_total_seconds"] += 1.0
    assert problems(doc, suite, records)


def test_the_committed_totals_are_the_scripts_output_on_the_committed_data():
    doc = wan_totals.totals(wan_totals.SUITE, list(wan_totals.DECODES))
    assert json.loads(json.dumps(doc)) == _committed()


def test_every_wan_entry_says_what_its_figures_time_and_cites_it():
    keys = {e["key"] for e in wan_table.load([wan_totals.SUITE])}
    assert keys <= set(wan_totals.TIMED)
    doc = _committed()
    assert {e["key"] for e in doc["entries"]} == keys
    for key, timed in wan_totals.TIMED.items():
        assert timed.facts and all("/" in f for f in timed.facts), key
        # a figure that is no total, or a total that is not predicted, says why
        assert timed.total or timed.reason, key
    for e in doc["entries"]:
        for c in e.get("configs", []):
            assert c["predicted_total_seconds"] is not None or c["reason"].startswith("not predicted"), e["key"]


def test_the_results_note_counts_the_totals_it_states():
    import re

    text = " ".join((ROOT / "docs" / "results" / "fidelity.md").read_text().split())
    said = re.search(r"Of the (\d+) predicted totals, (\d+) are within 5 % .*? and (\d+) within 10 %", text)
    assert said, "docs/results/fidelity.md no longer counts the predicted totals"
    errors = [abs(c["error"]) for e in _committed()["entries"] for c in e.get("configs", [])
              if c["predicted_total_seconds"] is not None]
    assert [int(g) for g in said.groups()] == [len(errors), sum(e <= 0.05 for e in errors),
                                               sum(e <= 0.10 for e in errors)]
