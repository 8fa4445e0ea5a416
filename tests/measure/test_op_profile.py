"""Per-operation times from a profile of the chip, joined with the compiled module's nodes (no chip:
stand-in profiler planes, a hand-written compiled module)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest
from click.testing import CliRunner

from aoizora.cli import cli
from aoizora.errors import MeasureError
from aoizora.measure.op_profile import OPS_LINE, by_kind, device_op_times, instruction_name, op_rows
from aoizora.topology import hardware_profile


@dataclass
class Event:
    name: str
    duration_ns: float


@dataclass
class Line:
    name: str
    events: list[Event] = field(default_factory=list)


@dataclass
class Plane:
    name: str
    lines: list[Line] = field(default_factory=list)


MODULE = """HloModule m, is_scheduled=true, \
entry_computation_layout={(bf16[2048,2048]{1,0}, bf16[2048,2048]{1,0})->bf16[2048,2048]{1,0}}

%scaled (a: bf16[2048,2048]) -> bf16[2048,2048] {
  %a = bf16[2048,2048]{1,0} parameter(0)
  ROOT %n = bf16[2048,2048]{1,0} negate(%a)
}

%mm (x: bf16[2048,2048], y: bf16[2048,2048]) -> bf16[2048,2048] {
  %x = bf16[2048,2048]{1,0} parameter(0)
  %y = bf16[2048,2048]{1,0} parameter(1)
  ROOT %d = bf16[2048,2048]{1,0} dot(%x, %y), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}

ENTRY %main (p0: bf16[2048,2048], p1: bf16[2048,2048]) -> bf16[2048,2048] {
  %p0 = bf16[2048,2048]{1,0} parameter(0)
  %p1 = bf16[2048,2048]{1,0} parameter(1)
  %neg_fusion = bf16[2048,2048]{1,0} fusion(%p0), kind=kLoop, calls=%scaled, \
backend_config={"estimated_cycles":"3000"}
  ROOT %dot_fusion = bf16[2048,2048]{1,0} fusion(%neg_fusion, %p1), kind=kOutput, calls=%mm, \
backend_config={"estimated_cycles":"15000"}
}
"""


def _planes() -> list[Plane]:
    ops = Line(OPS_LINE, [
        Event("%neg_fusion = bf16[2048,2048]{1,0} fusion(bf16[2048,2048]{1,0} %p0), kind=kLoop", 1000.0),
        Event("%dot_fusion = bf16[2048,2048]{1,0} fusion(...), kind=kOutput", 9000.0),
        Event("%neg_fusion = bf16[2048,2048]{1,0} fusion(bf16[2048,2048]{1,0} %p0), kind=kLoop", 1400.0),
        Event("%dot_fusion = bf16[2048,2048]{1,0} fusion(...), kind=kOutput", 11000.0),
        Event("copy-done.3", 60.0),
    ])
    return [Plane("/host:CPU", [Line(OPS_LINE, [Event("%neg_fusion = ...", 5e9)])]),
            Plane("/device:TPU:0", [Line("XLA Modules", [Event("jit_main(1)", 22460.0)]), ops])]


def test_an_events_name_is_its_instructions_name():
    assert instruction_name("%fusion.3 = bf16[8]{0} fusion(bf16[8]{0} %p), kind=kLoop, calls=%f") == "fusion.3"
    assert instruction_name("copy-done.70") == "copy-done.70"


def test_the_ops_line_of_the_chip_is_summed_per_instruction_and_run():
    times = device_op_times(_planes(), runs=2)
    assert set(times) == {"neg_fusion", "dot_fusion", "copy-done.3"}
    assert times["neg_fusion"].seconds == pytest.approx(1.2e-6) and times["neg_fusion"].count == 1
    assert times["dot_fusion"].seconds == pytest.approx(10e-6)
    assert times["copy-done.3"].count == 0.5


def test_a_profile_without_the_chips_ops_is_refused():
    with pytest.raises(MeasureError, match="no 'XLA Ops' line"):
        device_op_times([Plane("/host:CPU", [Line(OPS_LINE, [Event("x", 1.0)])])], runs=1)
    with pytest.raises(MeasureError, match="at least one run"):
        device_op_times(_planes(), runs=0)


def test_each_node_has_its_measured_time_beside_its_estimate_and_unnamed_events_are_kept():
    hw = hardware_profile("v5e")
    rows = {r["name"]: r for r in op_rows(MODULE, device_op_times(_planes(), runs=2), hw)}
    loop, out = rows["neg_fusion"], rows["dot_fusion"]
    assert (loop["opcode"], loop["fusion_kind"], loop["bound"], loop["trips"]) == ("fusion", "kLoop", "hbm", 1)
    assert (out["fusion_kind"], out["bound"]) == ("kOutput", "mxu")
    assert loop["estimated_cycles"] == 3000 and out["estimated_cycles"] == 15000
    assert out["measured_s"] == pytest.approx(10e-6) and out["events"] == 1
    assert out["flops"] == 2 * 2048 ** 3
    assert rows["copy-done.3"]["kind"] == "unnamed" and rows["copy-done.3"]["estimated_s"] is None
    assert sum(r["measured_s"] for r in rows.values()) == pytest.approx((22400.0 + 60.0) / 2 * 1e-9)


def test_op_profile_belongs_to_per_device():
    result = CliRunner().invoke(cli, ["measure", "--splash", "--op-profile", "--model", "wan2.1-t2v-1.3b",
                                      "--topology", "v5e:2x2"])
    assert result.exit_code == 2 and "add --per-device" in result.output


def test_a_programs_operations_are_summed_by_kind_of_estimate():
    hw = hardware_profile("v5e")
    rows = op_rows(MODULE, device_op_times(_planes(), runs=2), hw)
    kinds = by_kind(rows)
    assert set(kinds) == {"loop", "output", "unestimated"}
    assert kinds["loop"] == (pytest.approx(3000 / hw.clock_hz * hw.estimate_scale["loop"]), pytest.approx(1.2e-6))
    assert kinds["output"][1] == pytest.approx(10e-6)
    assert kinds["unestimated"] == (0.0, pytest.approx(30e-9))  # copy-done.3: measured, in no prediction
    raw = by_kind(rows, estimate=lambda op: None if op["estimated_cycles"] is None
                  else op["estimated_cycles"] / hw.clock_hz)
    assert raw["loop"][0] == pytest.approx(3000 / hw.clock_hz)


def test_the_measured_page_shows_each_kind_of_a_profiled_program(tmp_path):
    from aoizora.report.measured import write_measured_page

    row = {"key": "data=2,context=4 | weights=gathered | attn=allgather", "layers": 1, "median_seconds": 0.28,
           "predicted": {"seconds": 0.30}, "replaced": {"all-gather": 2},
           "ops_by_kind": {"loop": {"predicted_s": 0.030, "measured_s": 0.010},
                           "unestimated": {"predicted_s": 0.0, "measured_s": 0.001}}}
    page = write_measured_page([{"kind": "per-device", "rows": [row], "measured_on": {"device_kind": "TPU v5 lite"},
                                 "date": "2026-12-08"}], tmp_path).read_text()
    assert "by kind" in page and "0.333" in page and "unestimated" in page
    plain = dict(row)
    del plain["ops_by_kind"]
    page = write_measured_page([{"kind": "per-device", "rows": [plain]}], tmp_path).read_text()
    assert "by kind" not in page and "0.933" in page
