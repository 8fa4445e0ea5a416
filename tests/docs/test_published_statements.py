"""Statements in the documents that summarise committed data say what that data gives.

Each test reads a sentence of `docs/` (by a phrase that anchors it), pulls its figures out, and
recomputes them from the raw data under `docs/data/`. A figure edited by hand, or data committed
without the sentence that quotes it being updated, fails here.
"""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

import pytest

from tests.results_pages import PAGES, all_pages, page

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
DATA = DOCS / "data"


def _cells(directory: str) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((DATA / "bench" / directory / "cells").glob("*.json"))]


def _flat(text: str) -> str:
    """The text with line breaks inside paragraphs folded, so a sentence can be matched whole."""
    return re.sub(r"\s+", " ", text)


def _section(heading: str) -> str:
    text = all_pages()
    start = text.index(f"\n## {heading}")
    ends = [i for i in (text.find("\n## ", start + 1), text.find("\n# ", start + 1)) if i > 0]
    return _flat(text[start:min(ends, default=None)])


def _number(text: str) -> float:
    return float(text.replace(",", "").replace("−", "-"))


def test_tuning_rho_q2_sim_range_is_the_cells():
    quoted = re.search(r"ρ\(Q2, simulator\) per cell ([\d.]+) to ([\d.]+)", _section("Bench: the tuning grid"))
    assert quoted, "the tuning section no longer quotes ρ(Q2, simulator) per cell"
    rhos = [round(c["metrics"]["spearman_q2_sim"], 3) for c in _cells("tuning")]
    assert (float(quoted.group(1)), float(quoted.group(2))) == (min(rhos), max(rhos))


def test_tuning_memory_check_counts_are_the_estimate_file_and_the_cells():
    text = _section("Bench: the tuning grid")
    quoted = re.search(r"on the (\d+) strategies the 17 committed cells compiled", text)
    assert quoted, "the tuning section's memory check does not say which strategies it covers"
    estimates = (DATA / "memory-gap" / "tuning-estimate.txt").read_text()
    summary = re.search(r"^(\d+) compiled strategies: \|error\| median ([\d.]+)%, max [\d.]+%, "
                        r"within 15%: (\d+)/", estimates, re.M)
    assert int(quoted.group(1)) == int(summary.group(1))
    assert int(quoted.group(1)) == sum(c["metrics"]["strategies_compiled"] for c in _cells("tuning"))
    assert f"median |error| {summary.group(2)} %, {summary.group(3)} within 15 %" in text
    refused = re.search(r"^refused by the compiler: (\d+)", estimates, re.M)
    assert f"the compiler refused {refused.group(1)} strategies" in text


def test_compile_seconds_per_strategy_are_the_cited_cell():
    text = _flat((DOCS / "results-summary.md").read_text())
    quoted = re.search(r"compile seconds for the (\d+) Wan 14B strategies .*? were ([\d.]+)–([\d.]+) s, "
                       r"median ([\d.]+) s \(`docs/data/bench/([\w.-]+)`\)", text)
    assert quoted, "results-summary.md no longer quotes compile seconds per strategy with their data"
    (cell,) = _cells(quoted.group(5))
    seconds = [s["compile_seconds"] for s in cell["strategies"].values() if s.get("compile_seconds")]
    assert int(quoted.group(1)) == len(seconds)
    assert [float(quoted.group(i)) for i in (2, 3, 4)] == [round(min(seconds), 1), round(max(seconds), 1),
                                                          round(statistics.median(seconds), 1)]


CLAUSE = re.compile(r"(v\d\w*:\d+x\d+) ([\d.]+B) (\d+p)/(\d+)f: (\d+) strategies and the expert compiled, "
                    r"(\d+) pruned by Q1, [^;|]*?([\d,]+) pairs")


def test_manifest_held_out_counts_are_the_cells():
    manifest = (DATA / "MANIFEST.md").read_text()
    quoted = {(m[1], m[3], int(m[4])): (int(m[5]), int(m[6]), int(m[7].replace(",", "")))
              for m in CLAUSE.finditer(manifest)}
    cells = _cells("held-out")
    assert len(quoted) == len(cells)
    for cell in cells:
        key = (cell["cell"]["topology"], cell["cell"]["resolution"], int(cell["cell"]["frames"]))
        m = cell["metrics"]
        expected = (m["strategies_compiled"] - len(cell["experts"]), m["strategies_pruned_by_q1"], m["pairs_scored"])
        assert quoted[key] == expected, key


def test_held_out_v6e_2x4_480p_21_plan_placements_are_the_pairs():
    quoted = re.search(r"its (\d+) placements simulate at two speeds: (\d+) at ([\d.]+) ms, (\d+) at ([\d.]+) ms; "
                       r"placement spread ([\d.]+)", _section("Bench: the held-out grid"))
    assert quoted, "the held-out section no longer says how the v6e:2x4 480p/21 plan fares per placement"
    (cell,) = [c for c in _cells("held-out")
               if c["cell"]["topology"] == "v6e:2x4" and c["cell"]["resolution"] == "480p"]
    sims = sorted(round(p["sim_seconds"] * 1000, 1) for p in cell["pairs"]
                  if p["strategy"] == cell["aoizora"]["strategy"])
    speeds = sorted(set(sims))
    assert len(speeds) == 2
    assert int(quoted.group(1)) == len(sims)
    assert (int(quoted.group(2)), float(quoted.group(3))) == (sims.count(speeds[0]), speeds[0])
    assert (int(quoted.group(4)), float(quoted.group(5))) == (sims.count(speeds[1]), speeds[1])
    assert float(quoted.group(6)) == round(cell["metrics"]["placement_spread"], 3)


@pytest.mark.parametrize("which", ["before", "after"])
def test_hardware_suite_commits_are_the_ones_its_data_records(which):
    recorded = json.loads((DATA / "hardware" / f"{which}.json").read_text())["commit"]
    commits = re.search(r"- \*\*Commits:\*\* before the model fixes `(\w+)`.*?; after `(\w+)`",
                        _section("Hardware reference suite"))
    assert commits, "the hardware suite no longer names its commits"
    assert recorded.startswith(commits.group(1 if which == "before" else 2))
    row = next(line for line in (DATA / "MANIFEST.md").read_text().splitlines()
               if line.startswith(f"| `hardware/{which}.json`"))
    assert recorded.startswith(re.findall(r"`([0-9a-f]{7,})`", row)[0])


def test_methodology_small_program_range_is_the_held_out_estimates():
    text = _flat((DOCS / "methodology.md").read_text())
    quoted = re.search(r"every 1\.3B over-estimate above 15 % is of a program of ([\d.]+)–([\d.]+) GiB compiled", text)
    assert quoted, "methodology.md no longer bounds the sizes of the 1.3B over-estimates"
    sizes = [float(m[1]) for m in re.finditer(r"compiled\s+([\d.]+) GiB\s+\+([\d.]+)%",
                                               (DATA / "memory-gap" / "held-out-estimate.txt").read_text())
             if float(m[2]) > 15 and m.string[m.string.rfind("\n", 0, m.start()) + 1:].startswith("v5e")]
    assert sizes and (float(quoted.group(1)), float(quoted.group(2))) == (min(sizes), max(sizes))


def test_time_outside_the_steps_is_what_the_totals_and_steps_give():
    """The time outside the denoise steps is a measured total less the predicted steps; the section
    quotes it per run, and a negative one (impossible) must be called out as such."""
    text = _section("Hardware reference suite")
    entries = {e["key"]: e for e in json.loads((DATA / "hardware" / "maxdiffusion_wan.json").read_text())["entries"]}

    def outside(key: str, config: str, model: str) -> float:
        entry = entries[key]
        c = next(c for c in entry["configs"] if c["name"] == config)
        return round(c["measured_total_seconds"] - entry["steps"] * c[f"{model}_seconds"], 1)

    absolute = re.search(r"out at ([\d.−-]+) s \(no flags\) and ([\d.−-]+) s \(flags\), the simulator's at "
                         r"([\d.−-]+) s and \*\*([\d.−-]+) s\*\*", text)
    assert absolute, "the end-to-end section no longer quotes the time outside the steps"
    assert [_number(g) for g in absolute.groups()] == [
        outside("maxdiffusion/wan22-v7-8-no-flags", "2d-context", "q2"),
        outside("maxdiffusion/wan22-v7-8-flags", "2d-context", "q2"),
        outside("maxdiffusion/wan22-v7-8-no-flags", "2d-context", "sim"),
        outside("maxdiffusion/wan22-v7-8-flags", "2d-context", "sim")]
    readme = re.search(r"The README runs leave no time outside the steps:.*?\*\*([\d.−-]+) s\*\* with Q2's step and "
                       r"\*\*([\d.−-]+) s\*\* with the simulator's, which is impossible", text)
    assert readme, "the README runs' negative time outside the steps is not reported"
    assert [_number(g) for g in readme.groups()] == [outside("maxdiffusion/wan22-v7x-8-readme", "flash", "q2"),
                                                     outside("maxdiffusion/wan22-v7x-8-readme", "flash", "sim")]


def _anchor(heading: str) -> str:
    """GitHub's anchor of a markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_index_puts_the_conclusions_first_each_linking_to_a_section_that_exists():
    index = page("README.md")
    conclusions = index.split("\n## Conclusions\n", 1)[1].split("\n## ", 1)[0]
    links = re.findall(r"^\|.*\]\(([\w.-]+\.md)#([\w-]+)\) \|$", conclusions, re.M)
    rows = [line for line in conclusions.splitlines() if line.startswith("| ") and not line.startswith("| conclusion")]
    assert rows and len(links) == len(rows), "every conclusion ends with a link to its page and section"
    for name, anchor in links:
        anchors = {_anchor(h) for h in re.findall(r"^#{2,4} (.+)$", page(name), re.M)}
        assert anchor in anchors, f"{name}#{anchor}"
    assert ("fidelity.md", "hardware-reference-suite") in links
    assert index.index("\n## Conclusions") < index.index("\n## Pages"), "the conclusions come before the pages"
    assert all(f"]({name})" in index for name in PAGES), "the index lists every page"


def test_guide_wan22_stage1_table_is_its_raw_output():
    import gzip

    guide = (DOCS / "guide.md").read_text()
    table = guide.split("| model, slice (experts) |", 1)[1].split("\n\n", 1)[0]
    rows = [[c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))] for line in table.splitlines()[2:]]
    assert len(rows) == 7
    for label, _, fit, best, hbm, _ in rows:
        parts = [p.strip() for p in label.split(",")]
        name = f"{parts[0]}_{parts[1].replace(':', '-')}" + (f"_{parts[2]}" if len(parts) > 2 else "")
        doc = json.load(gzip.open(DATA / "wan22-stage1" / f"{name}.json.gz"))
        first = min((e for e in doc["strategies"] if e["rank"]), key=lambda e: e["rank"])
        assert int(fit) == doc["counts"]["ranked"], name
        key, q1 = re.match(r"`(.+)`: ([\d.]+) s/step", best).groups()
        assert first["key"].startswith(key.replace("\\|", "|") + " | "), name
        assert float(q1) == round(first["q1"]["seconds"], 2), name
        assert float(hbm.split()[0]) == round(first["memory"]["total_bytes"] / 2**30, 2), name
