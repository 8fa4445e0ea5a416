"""A plan's `video_time`: written by the Wan space, checked by the schema on load, shown by
`aoizora plan`'s summary, the HTML report and the MaxDiffusion export's command.sh."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from rich.console import Console

from aoizora.errors import PlanFormatError
from aoizora.export import generation_time_comment, write_maxdiffusion_export
from aoizora.models.wan.text_encoder.cost import text_encode_cost
from aoizora.models.wan.video.video_time import VideoTime
from aoizora.plan import Plan, load_plan
from aoizora.report.html import write_report
from aoizora.report.tables import print_plan, video_time_line
from tests.plan.plan_doc import plan_doc

ROOT = Path(__file__).parents[2]
TPU7X_PLAN = ROOT / "docs/data/plans/tpu7x-2x2x1_wan2.1-t2v-14b_720p_81f_top11.json"


def _video_time(step_seconds: float, decode: float | None = 4.07) -> dict:
    return VideoTime(videos=1, text_encode=text_encode_cost(1), steps=50, step_seconds=step_seconds,
                     expert_swap_seconds=0.0, expert_swap_basis="one transformer: nothing to swap",
                     vae_decode_seconds=decode, vae_decode_basis="compiled for the slice and costed by Q2"
                     if decode is not None else "not costed: compile stopped: the time budget ran out").to_json()


def test_a_plan_with_its_video_time_round_trips(tmp_path):
    doc = plan_doc()
    doc["video_time"] = _video_time(doc["prediction"]["step_seconds"])
    path = Plan(doc).save(tmp_path / "plan.json")
    assert load_plan(path).data["video_time"] == doc["video_time"]
    assert json.loads(path.read_text())["video_time"]["total_seconds"] == pytest.approx(20.0 + 50 * 0.01 + 4.07)


@pytest.mark.parametrize(("mutate", "where"), [
    (lambda vt: vt["vae_decode"].update(seconds=-1.0), "video_time/vae_decode/seconds"),
    (lambda vt: vt.pop("denoise"), "video_time"),
    (lambda vt: vt["text_encode"].pop("device"), "video_time/text_encode"),
    (lambda vt: vt.update(videos=0), "video_time/videos"),
])
def test_a_bad_video_time_is_refused_on_load(tmp_path, mutate, where):
    doc = plan_doc()
    doc["video_time"] = _video_time(0.01)
    mutate(doc["video_time"])
    path = tmp_path / "plan.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanFormatError, match=f"at {re.escape(where)}"):
        load_plan(path)


def test_the_summary_prints_the_video_time_beside_the_step():
    doc = plan_doc()
    doc["video_time"] = _video_time(0.01)
    out = io.StringIO()
    print_plan(Plan(doc), console=Console(file=out, width=400))
    text = out.getvalue()
    assert "predicted step 10.00 ms" in text
    assert "video: 24.6 s end to end = text encode 20.0 s (host CPU, estimated) + 50 steps x 10.0 ms 0.5 s" in text
    assert "VAE decode 4.1 s; MaxDiffusion's generation_time 4.6 s" in text


def test_an_unknown_decode_is_shown_with_its_reason():
    line = video_time_line(_video_time(0.01, decode=None))
    assert "video: unknown end to end" in line and "VAE decode unknown" in line
    assert "(VAE decode not costed: compile stopped: the time budget ran out)" in line


def test_the_report_shows_the_breakdown(tmp_path):
    plan = load_plan(TPU7X_PLAN)
    doc = dict(plan.data, video_time=_video_time(plan.predicted_step_seconds))
    page = write_report(Plan(doc), tmp_path / "report").read_text()
    assert "<h2>One generation, end to end</h2>" in page
    for part in ("text encode", "denoising", "expert swap", "VAE decode", "MaxDiffusion&#x27;s generation_time"):
        assert f"<td>{part}</td>" in page, part


def test_command_sh_states_the_generation_time_maxdiffusion_prints(tmp_path):
    plan = load_plan(TPU7X_PLAN)
    step = plan.predicted_step_seconds
    write_maxdiffusion_export(Plan(dict(plan.data, video_time=_video_time(step))), tmp_path / "with")
    script = (tmp_path / "with" / "command.sh").read_text()
    expected = f"{50 * step + 4.07:.1f} s = 50 steps x {step * 1e3:.1f} ms + expert swap 0.0 s + VAE decode 4.1 s."
    assert f"# Predicted generation_time (printed by generate_wan.py): {expected}" in script
    assert "# It leaves out the text encoding (about 20.0 s on the host CPU" in script
    write_maxdiffusion_export(plan, tmp_path / "without")
    assert "generation_time" not in (tmp_path / "without" / "command.sh").read_text()
    assert generation_time_comment(plan.data) == []
