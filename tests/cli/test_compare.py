"""`aoizora compare`: bad input refused in one line before any planning; the table, the pick, strict
JSON and the folder from plans of each slice (the committed 14B plans stand in for the planner in
the fast tests; one slow test plans the small model on two small slices for real)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from aoizora.cli import cli
from tests.plan.test_plan_consistency import PLANS

COMMITTED = {"v5e:2x4": "v5e-2x4_wan2.1-t2v-14b_720p_81f_top3.json",
             "v6e:2x4": "v6e-2x4_wan2.1-t2v-14b_720p_81f.json",
             "tpu7x:2x2x1": "tpu7x-2x2x1_wan2.1-t2v-14b_720p_81f.json"}
COMPARE = ("compare", "--model", "wan2.1-t2v-14b", "--resolution", "720p", "--frames", "81")


def refused(args, fragment: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    return lines[0]


@pytest.fixture()
def no_planning(monkeypatch):
    """Fail the test if anything is planned."""
    import aoizora.plan

    def plan_space(*args, **kwargs):
        raise AssertionError("planned despite bad input")

    monkeypatch.setattr(aoizora.plan, "plan_space", plan_space)


@pytest.mark.parametrize("extra, fragment", [
    (["--slices", "v5e:2x4,v9z:2x2"], "v9z"),
    (["--slices", "v5e:2x4,v5e:2x4"], "lists v5e:2x4 twice"),
    (["--slices", "v5e:2x4,"], "empty entry"),
    (["--slices", "v5e:2x4", "--max-video-seconds", "0"], "not a positive number of seconds"),
    (["--slices", "v5e:2x4", "--max-video-seconds", "nan"], "not a positive number of seconds"),
    (["--slices", "v5e:2x4", "--prices", "{tmp}/none.json"], "cannot read price file"),
    (["--slices", "v5e:2x4", "--prices", "{tmp}/bad.json"], "'read' is"),
    (["--slices", "v5e:2x4", "--out", "{tmp}/file"], "is a file"),
    (["--slices", "v5e:2x4", "--frames", "10"], "4n+1"),
    (["--slices", "v5e:2x4", "--prices", "{tmp}/o/compare.json", "--out", "{tmp}/o"], "would overwrite --prices"),
])
def test_bad_input_is_one_line_before_any_planning(tmp_path, no_planning, extra, fragment):
    (tmp_path / "bad.json").write_text(json.dumps({"currency": "USD", "read": "soon", "generations": {}}))
    (tmp_path / "file").write_text("")
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "compare.json").write_text(json.dumps({"currency": "USD", "read": "2026-01-01",
                                                             "generations": {"v5e": {"price_per_chip_hour": None,
                                                                                     "absent": "x"}}}))
    refused([*COMPARE, *(a.replace("{tmp}", str(tmp_path)) for a in extra)], fragment)


def test_the_model_and_slices_are_required(no_planning):
    refused(["compare", "--slices", "v5e:2x4"], "--model")
    refused(["compare", "--model", "wan2.1-t2v-14b"], "--slices")


@pytest.fixture()
def committed_plans(monkeypatch):
    """The planner answers each slice with its committed plan (what `aoizora plan` wrote for it)."""
    import aoizora.plan

    asked = []

    def plan_space(space, topology, **options):
        asked.append((topology.name, options.get("executor") is not None, options["top_k"]))
        data = json.loads((PLANS / COMMITTED[topology.name]).read_text())
        return SimpleNamespace(plan=SimpleNamespace(data=data), from_cache=False)

    monkeypatch.setattr(aoizora.plan, "plan_space", plan_space)
    return asked


def _seconds(name: str) -> float:
    data = json.loads((PLANS / COMMITTED[name]).read_text())
    return data["workload"]["scheduler"]["steps"] * data["prediction"]["step_seconds"]


def test_json_and_the_folder_hold_every_slice_and_the_pick(tmp_path, committed_plans):
    prices = tmp_path / "prices.json"
    prices.write_text(json.dumps({"currency": "USD", "read": "2026-12-01", "generations": {
        "v5e": {"price_per_chip_hour": 1.0, "source": "test"}, "v6e": {"price_per_chip_hour": 2.0, "source": "test"},
        "tpu7x": {"price_per_chip_hour": None, "absent": "not offered to us"}}}))
    target = 400.0
    result = CliRunner().invoke(cli, [*COMPARE, "--slices", "v5e:2x4,v6e:2x4,tpu7x:2x2x1", "--prices", str(prices),
                                      "--max-video-seconds", str(target), "--top-k", "2", "--json",
                                      "--out", str(tmp_path / "out")], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"{c} in --json"))
    assert committed_plans == [(n, True, 2) for n in ("v5e:2x4", "v6e:2x4", "tpu7x:2x2x1")]
    rows = {r["topology"]: r for r in doc["slices"]}
    for name, row in rows.items():
        assert row["video_seconds"] == pytest.approx(_seconds(name))
        assert row["meets_target"] is (_seconds(name) <= target)
        assert row["chip_hours_per_video"] == pytest.approx(row["chips"] * _seconds(name) / 3600)
    assert rows["v5e:2x4"]["cost_per_video"] == pytest.approx(8 * _seconds("v5e:2x4") / 3600 * 1.0)
    assert rows["tpu7x:2x2x1"]["cost_per_video"] is None
    # v5e:2x4 (524 s) misses 400 s; v6e:2x4 (275 s) is the only priced slice within it
    assert doc["pick"]["topology"] == "v6e:2x4" and "tpu7x:2x2x1 not compared: no price" in doc["pick"]["reason"]
    assert json.loads((tmp_path / "out" / "compare.json").read_text()) == doc
    assert (tmp_path / "out" / "compare.png").stat().st_size > 0 and (tmp_path / "out" / "index.html").exists()


def test_the_table_says_what_the_video_time_is_and_when_no_slice_meets_the_target(committed_plans):
    result = CliRunner().invoke(cli, [*COMPARE, "--slices", "v5e:2x4,v6e:2x4", "--max-video-seconds", "10"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    out = result.stdout
    assert "video time: denoising only" in out
    assert "pick: none: no slice makes a video within 10 s; the fastest is v6e:2x4" in out
    assert "aoizora's packaged prices, read" in out and "no price for v5e:2x4" in out


@pytest.mark.slow
@pytest.mark.tpu_compile
def test_compare_plans_the_small_model_on_two_small_slices(tmp_path):
    """Wan 2.1 1.3B, 480p, 5 frames on one v5e and one v6e chip, Top-1, planned for real (without the VAE
    decode's compile, which the plan tests cover: each video time is then the steps alone, and says so; and
    without the raised limit's check, a slow compile that tests/stage2/test_compile_once.py covers)."""
    result = CliRunner().invoke(cli, ["compare", "--model", "wan2.1-t2v-1.3b", "--resolution", "480p", "--frames", "5",
                                      "--slices", "v5e:1x1,v6e:1x1", "--top-k", "1", "--verify-top", "0", "--json",
                                      "--no-vae-decode", "--no-limit-check",
                                      "--out", str(tmp_path)], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    assert [r["topology"] for r in doc["slices"]] == ["v5e:1x1", "v6e:1x1"]
    for row in doc["slices"]:
        assert row["strategy"] and row["steps"] == 50 and math.isfinite(row["video_seconds"])
        assert row["video_seconds"] == pytest.approx(50 * row["step_seconds"])
        assert row["video_time_includes"].startswith("denoising only")
    assert Path(tmp_path, "compare.png").exists()
