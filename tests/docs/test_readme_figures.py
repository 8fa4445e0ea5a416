"""The README's counts and ranges are what the committed data they cite gives: the cells a geomean
is over, the cells of a grid, how many figures were compared, and each range's ends (the figures
themselves are also checked to be in the results pages, docs/results/, `test_published_tables.py`)."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest

from aoizora.evaluation.bench.grid import GRIDS
from tests.results_pages import all_pages

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "docs" / "data"
README = " ".join((ROOT / "README.md").read_text().split())
RESULTS = " ".join(all_pages().split())
SUMMARY = " ".join((ROOT / "docs" / "results-summary.md").read_text().split())

_spec = importlib.util.spec_from_file_location("wan_table", ROOT / "benchmarks" / "hardware" / "wan_table.py")
wan_table = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wan_table)


def _said(pattern: str, text: str | None = None) -> tuple[str, ...]:
    match = re.search(pattern, README if text is None else text)
    assert match, f"not found: {pattern}"
    return match.groups()


def _number(text: str) -> float:
    return float(text.replace("−", "-").replace(",", ""))


def _bench(grid: str) -> dict:
    return json.loads((DATA / "bench" / grid / "results.json").read_text())


def _count(cells: list[dict], metric: str) -> int:
    return sum(c["metrics"][metric] is not None for c in cells)


# --- the bench grids ------------------------------------------------------------------------------

def test_tuning_grid_cells_and_the_cells_each_geomean_is_over():
    tuning = _bench("tuning")
    ran, of, expert, n_expert, logical, n_logical = _said(
        r"Tuning grid \((\d+) of its (\d+) cells.*?([\d.]+)× \(geomean over the (\d+) cells where the April README "
        r"deployment fits\) over that deployment, ([\d.]+)× \(geomean over (\d+) cells\)")
    assert int(ran) == tuning["summary"]["cells"] == len(tuning["cells"])
    assert int(ran) == len(list((DATA / "bench" / "tuning" / "cells").glob("*.json")))
    assert int(of) == len(GRIDS["tuning"]())
    assert int(n_expert) == _count(tuning["cells"], "speedup_over_expert")
    assert int(n_logical) == _count(tuning["cells"], "speedup_over_logical")
    assert float(expert) == round(tuning["summary"]["speedup_over_expert"]["geomean"], 3)
    assert float(logical) == round(tuning["summary"]["speedup_over_logical"]["geomean"], 3)


def test_the_tuning_grid_counts_of_the_results_documents():
    tuning = _bench("tuning")
    n_expert, n_logical = _said(r"1\.224× and 1\.082× \(geomeans over (\d+) and (\d+) cells\)", RESULTS)
    assert (int(n_expert), int(n_logical)) == (_count(tuning["cells"], "speedup_over_expert"),
                                               _count(tuning["cells"], "speedup_over_logical"))
    ran, of = _said(r"on (\d+) of the (\d+) cells of the tuning grid", RESULTS)
    assert (int(ran), int(of)) == (len(tuning["cells"]), len(GRIDS["tuning"]()))
    (grid,) = _said(r"The (\d+)-cell tuning grid", SUMMARY)
    assert int(grid) == len(GRIDS["tuning"]())
    n_expert, n_logical = _said(r"geometric means over the (\d+) cells where the README deployment fits and over "
                                r"the (\d+) of the table", SUMMARY)
    assert (int(n_expert), int(n_logical)) == (_count(tuning["cells"], "speedup_over_expert"),
                                               _count(tuning["cells"], "speedup_over_logical"))


def test_held_out_grid_oracle_count_and_range():
    cells = _bench("held-out")["cells"]
    hits, total, low, high = _said(r"Held-out grid \(v6e, v5e\): plan = oracle in (\d+) of (\d+) cells; "
                                   r"([\d.]+)–([\d.]+)× faster")
    assert int(total) == len(cells) == len(GRIDS["held-out"]())
    assert int(hits) == sum(c["metrics"]["top1_recall"] for c in cells)
    speedups = [c["metrics"]["speedup_over_expert"] for c in cells]
    assert (float(low), float(high)) == (round(min(speedups), 3), round(max(speedups), 3))


# --- the plans of the headline ---------------------------------------------------------------------

def _plan(path: str) -> dict:
    return json.loads((DATA / "plans" / path).read_text())


def test_the_demo_with_and_without_the_tile_search():
    after, before = _said(r"The demo \(v5e:2x4, Wan 2\.1 14B 720p/81\): ([\d.]+)× over "
                          r"`maxdiffusion-readme-default-blocks` \(([\d.]+)× for the same strategy before the tile "
                          r"search\)")
    searched = _plan("tile-search/v5e-2x4_wan2.1-t2v-14b_720p_81f_top3.json")
    fitted = _plan("v5e-2x4_wan2.1-t2v-14b_720p_81f_top3.json")
    assert float(after) == round(searched["baselines"]["expert"]["speedup_of_plan"], 3)
    assert float(before) == round(fitted["baselines"]["expert"]["speedup_of_plan"], 3)
    assert searched["strategy"].get("scoped_vmem_kib") and not fitted["strategy"].get("scoped_vmem_kib")
    same = ("mesh", "attention", "weights", "kernel", "video")
    assert [searched["strategy"][k] for k in same] == [fitted["strategy"][k] for k in same]
    assert searched["placement"]["device_coords"] == fitted["placement"]["device_coords"]


def test_todays_maxdiffusion_range_is_the_other_rows_of_the_kernel():
    low, high = _said(r"aoizora's plan is the fast recipe's own deployment; ([\d.]+)–([\d.]+)× faster than the "
                      r"other rows of its kernel")
    plan = _plan("kernel-profiles/tpu7x-2x2x1_wan2.2-t2v-a14b_720p_81f_maxdiffusion-custom.json")
    speedups = [e["speedup_of_plan"] for e in plan["baselines"]["experts"]]
    assert round(min(speedups), 3) == 1.0  # the plan is one row's own deployment
    others = [x for x in speedups if round(x, 3) > 1.0]
    assert (float(low), float(high)) == (round(min(others), 3), round(max(others), 3))
    assert not plan["strategy"].get("scoped_vmem_kib")  # at the blocks fitted to the default limit


# --- Wan on TPU: predicted against published ------------------------------------------------------

def _wan_rows() -> list[dict]:
    """The rows of the "Wan on TPU" table, from the committed suite output: entry, figure and the Q2
    error (points for a ratio, percent for seconds)."""
    entries = wan_table.load([DATA / "hardware" / "wan_on_tpu.json"])
    out = []
    for row in (r for e in entries for r in wan_table.rows(e)):
        cells = [c.strip() for c in row.strip("|").split("|")]
        error, unit = cells[5].split()
        out.append({"entry": cells[0].strip("`"), "figure": cells[1], "measured": float(cells[2].removesuffix(" s")),
                    "q2": float(cells[3].removesuffix(" s")), "error": float(error), "unit": unit})
    return out


def test_the_number_of_published_wan_figures():
    (n,) = _said(r"\[(\d+) published Wan figures\]")
    assert int(n) == len(_wan_rows())


def test_v7x_8_denoise_steps_are_within_the_stated_percent():
    (bound,) = _said(r"v7x-8 denoise steps come out within (\d+) %")
    errors = [abs(r["error"]) for r in _wan_rows() if r["unit"] == "%" and r["entry"].startswith("maxdiffusion/")
              and "-v7x-8-" in r["entry"]]
    assert errors and int(bound) - 1 < max(errors) <= int(bound)


def test_the_ulysses_forms_are_the_largest_miss_as_stated():
    entry = next(e for e in wan_table.load([DATA / "hardware" / "wan_on_tpu.json"])
                 if e["key"].endswith("-ulysses-forms"))
    configs = {c["name"]: c for c in entry["configs"]}
    a2a, constraint = configs["ulysses-all-to-all"], configs["ulysses-constraint"]
    ratio, slow, fast, apart = _said(r"the two Ulysses forms of one deployment: ([\d.]+)× apart measured "
                                     r"\(([\d.]+) against ([\d.]+) s\), a tie predicted \(([\d.]+) % apart, in the "
                                     r"wrong order\)")
    assert (float(slow), float(fast)) == (a2a["measured_total_seconds"], constraint["measured_total_seconds"])
    assert float(ratio) == round(a2a["measured_total_seconds"] / constraint["measured_total_seconds"], 1)
    assert a2a["q2_seconds"] < constraint["q2_seconds"]  # the wrong order
    assert float(apart) == round(100 * (constraint["q2_seconds"] / a2a["q2_seconds"] - 1), 1)
    # the largest miss of a ratio: the two forms' (in points, as the table gives the others) is over every
    # other entry's (this entry's ratios to 2D context miss by as much: they hold the same two forms)
    miss = 100 * abs(a2a["measured_total_seconds"] / constraint["measured_total_seconds"]
                     - a2a["q2_seconds"] / constraint["q2_seconds"])
    assert miss > max(abs(r["error"]) for r in _wan_rows() if r["unit"] == "pt" and r["entry"] != entry["key"])


def test_the_ranges_of_the_attention_variant_misses():
    rows = _wan_rows()
    low, high, over, under = _said(r"miss by ([\d.]+)–([\d.]+) points where the program form differs \(flash and "
                                   r"Ulysses against 2D context\), and by \+([\d.]+) and −([\d.]+) points on the two "
                                   r"v7x-16 ring/flash pairs")
    form = [abs(r["error"]) for r in rows if re.fullmatch(r"step (flash|ulysses) / 2d-context", r["figure"])
            and not r["entry"].endswith("-ulysses-forms")]
    assert (float(low), float(high)) == (min(form), max(form))
    v7x_16 = sorted(r["error"] for r in rows if "-v7x-16-" in r["entry"])
    assert v7x_16 == [-float(under), float(over)]


def test_batch_scaling_and_torchax_misses():
    rows = _wan_rows()
    (batch,) = _said(r"batch 1→2 scaling by \+([\d.]+) %")
    row = next(r for r in rows if r["entry"].endswith("-batch-scaling"))
    assert float(batch) == round(100 * (row["q2"] / row["measured"] - 1), 1)
    first, second = _said(r"torchax runs on v6e by \+(\d+) % and \+(\d+) %")
    torchax = sorted(round(r["error"]) for r in rows if r["entry"].startswith("gpu-tpu-pedia/") and "v6e" in r["entry"]
                     and r["unit"] == "%")
    assert torchax == sorted([int(first), int(second)])


def test_the_collectives_range_is_every_timed_collective_of_the_hardware_suite():
    low, high = _said(r"collectives on v5e, v5p, v6e and TPU7x at ([\d.]+)–([\d.]+)× the measured time per call")
    timed = [e for e in json.loads((DATA / "hardware" / "after.json").read_text())["entries"]
             if e["kind"] == "timed"]
    assert {e["topology"].split(":")[0] for e in timed} == {"v5e", "v5p", "v6e", "tpu7x"}
    ratios = [e["q2_over_measured"] for e in timed]
    assert (float(low), float(high)) == (round(min(ratios), 2), round(max(ratios), 2))


MUTATIONS = [  # (what the README says, a count or range the data does not give, the check that reads it)
    ("17 of its 18 cells", "17 of its 19 cells", test_tuning_grid_cells_and_the_cells_each_geomean_is_over),
    ("geomean over the 16 cells", "geomean over the 17 cells",
     test_tuning_grid_cells_and_the_cells_each_geomean_is_over),
    ("in 5 of 6 cells", "in 6 of 6 cells", test_held_out_grid_oracle_count_and_range),
    ("6.4–7.4 points", "6–8 points", test_the_ranges_of_the_attention_variant_misses),
    ("+8.8 and −7.4 points", "+8.8 and −6.4 points", test_the_ranges_of_the_attention_variant_misses),
    ("within 6 %", "within 20 %", test_v7x_8_denoise_steps_are_within_the_stated_percent),
    ("[22 published", "[21 published", test_the_number_of_published_wan_figures),
    ("1.062–1.382×", "1.062–1.114×", test_todays_maxdiffusion_range_is_the_other_rows_of_the_kernel),
    ("at 0.75–1.27×", "at 0.75–1.10×", test_the_collectives_range_is_every_timed_collective_of_the_hardware_suite),
]


@pytest.mark.parametrize("said, wrong, check", MUTATIONS, ids=[m[1] for m in MUTATIONS])
def test_each_check_fails_on_a_count_or_range_the_data_does_not_give(said, wrong, check, monkeypatch):
    assert said in README
    monkeypatch.setitem(globals(), "README", README.replace(said, wrong))
    with pytest.raises(AssertionError):
        check()
