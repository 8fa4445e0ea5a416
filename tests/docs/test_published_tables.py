"""The bench tables published in docs/results/bench.md are what the committed per-cell data gives at HEAD.

Each bench section names its raw data (`../data/bench/<dir>/`); its table's
rows must be the rows this code's report computes from that directory's cells, and the committed
`table.md` beside them must be that report (bar the line naming the running code's fingerprint).
A table edited by hand, data committed without its table, or a report change that alters a
published number fails here.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from aoizora.evaluation.bench.report import COLUMNS, markdown, row
from tests.results_pages import all_pages, page

ROOT = Path(__file__).resolve().parents[2]
RAW_DATA_LINK = re.compile(r"\(\.\./data/bench/([\w.-]+)/\)")


def _sections() -> dict[str, str]:
    """Bench sections of the results document by the data directory their raw-data line names."""
    out = {}
    for section in page("bench.md").split("\n## ")[1:]:
        raw = next((line for line in section.splitlines() if line.startswith("- **Raw data:**")), None)
        match = RAW_DATA_LINK.search(raw or "")
        if section.startswith("Bench:") and match:
            out[match.group(1)] = section
    return out


def _normal(cell: str) -> str:
    return cell.replace("**", "").replace("†", "").strip().lower()


def _table_rows(text: str) -> dict[str, list[str]]:
    """Rows of the markdown tables in `text` whose first column names a grid cell, by that cell."""
    rows = {}
    for line in text.splitlines():
        cols = [_normal(c) for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and len(cols) == len(COLUMNS) and re.match(r"v\d\w*:\S+ \d+p \d+f", cols[0]):
            rows[cols[0]] = cols
    return rows


def _cells(directory: str) -> list[dict]:
    paths = sorted((ROOT / "docs" / "data" / "bench" / directory / "cells").glob("*.json"))
    return [json.loads(p.read_text()) for p in paths]


SECTIONS = _sections()


def test_every_bench_data_directory_has_its_section():
    on_disk = {p.name for p in (ROOT / "docs" / "data" / "bench").iterdir() if p.is_dir()}
    assert on_disk and set(SECTIONS) == on_disk


@pytest.mark.parametrize("directory", sorted(SECTIONS))
def test_the_published_rows_are_what_the_committed_cells_give(directory):
    docs = _cells(directory)
    computed = {_normal(r["cell"]): [_normal(r[k]) for k, _ in COLUMNS] for r in (row(d) for d in docs)}
    published = _table_rows(SECTIONS[directory])
    assert docs and set(published) == set(computed), (sorted(published), sorted(computed))
    for cell, cols in published.items():
        for (_key, header), shown, recomputed in zip(COLUMNS, cols, computed[cell], strict=True):
            assert shown == recomputed, f"{directory} {cell} {header}: published {shown}, data {recomputed}"


@pytest.mark.parametrize("directory", sorted(SECTIONS))
def test_the_published_table_is_the_committed_table_with_its_marks(directory):
    """The document shows the generator's table as committed: its wording of every column (an
    incomplete oracle reads "– (oracle partial; …)", not a recall) and its `†` marks."""
    committed = [line for line in (ROOT / "docs" / "data" / "bench" / directory / "table.md").read_text().splitlines()
                 if line.startswith("|")]
    published = [line for line in SECTIONS[directory].splitlines() if line.startswith("| ")]
    header = committed[0]
    start = published.index(header) if header in published else -1
    assert start >= 0, f"{directory}: the section's table does not have the generator's header"
    assert published[start:start + len(committed) - 1] == [committed[0]] + committed[2:]


@pytest.mark.parametrize("directory", sorted(SECTIONS))
def test_the_committed_table_is_the_report_of_the_committed_cells(directory):
    """Which cells carry `†` depends on the code that ran the report, so the marks and the line
    naming the fingerprints are left out of the comparison."""
    committed = (ROOT / "docs" / "data" / "bench" / directory / "table.md").read_text()
    regenerated = markdown(_cells(directory), current="any")
    assert _without_marks(committed) == _without_marks(regenerated)


def _without_marks(table: str) -> list[str]:
    return [line.replace(" †", "") for line in table.strip().splitlines() if not line.startswith("`†` computed by")]


README = ROOT / "README.md"
# a figure: a decimal, a number with thousands separators, or a percentage
FIGURE = re.compile(r"(?<![\w.])(\d[\d,]*\.\d+|\d{1,3}(?:,\d{3})+|\d+ ?%)(?![\w.])")
NAMES = re.compile(r"Wan \d\.\d|python3\.\d+")  # model and interpreter versions are names, not figures


def _figures(text: str) -> set[str]:
    text = re.sub(r"(?<=\d)x(?=\W|$)", "×", NAMES.sub("", text))  # "1.382x" (tables) is "1.382×"
    return set(FIGURE.findall(text))


def _excerpt_and_prose(readme: str) -> tuple[str, str]:
    excerpt = re.search(r"```json\n(.*?)```", readme, re.S).group(1)
    return excerpt, readme.replace(excerpt, "")


def test_every_readme_figure_is_in_the_results_document():
    """The README promises that every figure is in the results pages with its raw data."""
    _, prose = _excerpt_and_prose(README.read_text())
    results = _figures(all_pages())
    missing = sorted(_figures(prose) - results)
    assert not missing, f"README figures not found in docs/results/: {missing}"


def test_every_results_summary_figure_is_in_the_results_documents():
    """docs/results-summary.md (the README's results in full) quotes the results pages and their provenance
    page, at their precision."""
    results = _figures(all_pages()) | _figures((ROOT / "docs" / "results-provenance.md").read_text())
    missing = sorted(_figures((ROOT / "docs" / "results-summary.md").read_text()) - results)
    assert not missing, f"docs/results-summary.md figures not found in docs/results/: {missing}"


def test_the_readme_plan_excerpt_is_the_committed_plan_it_names():
    readme = README.read_text()
    excerpt, prose = _excerpt_and_prose(readme)
    path = re.search(r"\(docs/data/plans/([\w./-]+\.json)\)", prose).group(1)
    plan = json.loads((ROOT / "docs" / "data" / "plans" / path).read_text())
    flat = json.dumps(plan)
    for key, value in re.findall(r'"(\w+)": "([^"]*)"', excerpt):
        assert f'"{key}": "{value}"' in flat, f"README plan excerpt: {key} = {value!r} is not in {path}"
    for key, value in re.findall(r'"(\w+)": (\d+)\b(?![.\d])', excerpt):
        assert f'"{key}": {value}' in flat, f"README plan excerpt: {key} = {value} is not in {path}"
    step = re.search(r'"step_seconds": ([\d.]+)', excerpt).group(1)
    assert float(step) == round(plan["prediction"]["step_seconds"], len(step.split(".")[1]))
    # the excerpt shows the first row of the innermost-but-one level and elides the rest ("...")
    first = re.search(r'"device_coords": \[\[(.*?), \.\.\.\]\]', excerpt).group(1)
    assert json.loads(first) == plan["placement"]["device_coords"][0][0]
