"""The results pages (`docs/results/`): the index and one page per topic, read by the tests that
check the published figures against their data."""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "docs" / "results"
#: The topic pages, in the order the index lists them.
PAGES = ("chip.md", "bench.md", "wan-model.md", "planning-speed.md", "slices-and-throughput.md",
         "maxdiffusion.md", "fidelity.md")


def page(name: str) -> str:
    """One page's text (`"README.md"` for the index)."""
    return (RESULTS / name).read_text()


def all_pages() -> str:
    """The index and every topic page, concatenated: where a test looks for a figure anywhere in
    the results."""
    return "\n".join(page(name) for name in ("README.md", *PAGES))
