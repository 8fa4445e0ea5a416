"""The comparison's outputs: one labelled point per priced slice, the others named; the folder holds
the page, the picture and the data as strict JSON."""

from __future__ import annotations

import json

from aoizora.report.comparison import COMPARISON_FILES, comparison_figure, write_comparison


def _row(name, seconds, cost, meets=None, error=None):
    price = {"generation": name.split(":")[0], "price_per_chip_hour": None if cost is None else 1.0}
    if cost is None:
        price["absent"] = "not listed"
    return {"topology": name, "chips": 8, "strategy": None if error else "data=8", "video_seconds": seconds,
            "videos_per_hour": None if seconds is None else 3600 / seconds,
            "chip_hours_per_video": None if seconds is None else 8 * seconds / 3600, "price": price,
            "cost_per_video": cost, "meets_target": meets, "error": error}


DOC = {"workload": {"model": "wan2.1-t2v-14b", "resolution": "1280x720", "frames": 81},
       "video_time_includes": "denoising only: steps x predicted step", "max_video_seconds": 400.0,
       "prices": {"currency": "USD", "read": "2026-12-05", "origin": "test prices",
                  "generations": {"v6e": {"generation": "v6e", "price_per_chip_hour": 2.7, "source": "https://x",
                                          "region": "us"},
                                  "v5e": {"generation": "v5e", "price_per_chip_hour": None, "absent": "not listed"}}},
       "slices": [_row("v6e:2x4", 275.0, 1.6, True), _row("tpu7x:2x2x1", 212.0, 0.9, True),
                  _row("v5e:2x4", 524.0, None, False), _row("v5e:2x2", None, None, error="no strategy fits")],
       "pick": {"topology": "tpu7x:2x2x1", "reason": "cheapest per video within 400 s"}}


def test_one_labelled_point_per_priced_slice_and_the_rest_named():
    fig = comparison_figure(DOC)
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.texts]
    assert "v6e:2x4" in labels and "tpu7x:2x2x1" in labels and "v5e:2x4" not in labels
    note = " ".join(t.get_text() for t in fig.texts)
    assert "v5e:2x4 (no price; 524.0 s per video)" in note and "v5e:2x2 (no plan)" in note
    assert ax.get_xlabel().startswith("video time, s (denoising only)") and "USD" in ax.get_ylabel()


def test_chip_hours_per_video_are_plotted_for_every_planned_slice_priced_or_not():
    fig = comparison_figure(DOC)
    hours = fig.axes[1]
    assert sorted(t.get_text() for t in hours.texts if ":" in t.get_text()) == ["tpu7x:2x2x1", "v5e:2x4", "v6e:2x4"]
    assert "chip-hours" in hours.get_ylabel() and hours.get_xlabel() == fig.axes[0].get_xlabel()
    points = sorted(tuple(p) for c in hours.collections for p in c.get_offsets())
    assert (524.0, 8 * 524.0 / 3600) in points  # the slice without a price, at its chip-hours


def test_the_folder_holds_the_page_the_picture_and_strict_json(tmp_path):
    out = tmp_path / "cmp"
    page = write_comparison(DOC, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(COMPARISON_FILES)
    assert json.loads((out / "compare.json").read_text()) == DOC
    assert (out / "compare.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = page.read_text()
    assert "data:image/png;base64," in text and "tpu7x:2x2x1" in text and "no plan: no strategy fits" in text
    assert "Latency target: 400 s" in text and "no price (not listed)" in text


def test_amounts_keep_two_significant_digits_when_small():
    from aoizora.report.comparison import amount

    assert amount(12.5, "USD") == "12.500 USD" and amount(1234.0) == "1,234.000"
    assert amount(0.0032) == "0.0032" and amount(0.00123, "USD") == "0.0012 USD"
    assert amount(None) == "-"
