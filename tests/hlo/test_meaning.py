"""HLO that parses but would be analysed into wrong numbers is refused, naming the line: a second
ENTRY computation (its collectives would be ignored), a negative known trip count (negative bytes
and times), a collective-permute with a repeated target or source."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from aoizora.cli import cli
from aoizora.errors import HloParseError
from aoizora.hlo import build_program, parse_hlo

_ALL_REDUCE = """HloModule m, num_partitions=4

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

ENTRY %first (p: f32[1024]) -> f32[1024] {
  ROOT %p = f32[1024] parameter(0)
}

ENTRY %second (q: f32[1024]) -> f32[1024] {
  %q = f32[1024] parameter(0)
  ROOT %ar = f32[1024] all-reduce(%q), replica_groups={{0,1,2,3}}, to_apply=%add
}
"""

_WHILE = """HloModule m, num_partitions=1

%cond (c: (s32[])) -> pred[] {
  %c = (s32[]) parameter(0)
  %i = s32[] get-tuple-element(%c), index=0
  %n = s32[] constant(8)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%body (b: (s32[])) -> (s32[]) {
  %b = (s32[]) parameter(0)
  %j = s32[] get-tuple-element(%b), index=0
  %one = s32[] constant(1)
  %k = s32[] add(%j, %one)
  ROOT %t = (s32[]) tuple(%k)
}

ENTRY %main (x: s32[]) -> (s32[]) {
  %x = s32[] parameter(0)
  %init = (s32[]) tuple(%x)
  ROOT %w = (s32[]) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"TRIP"}}
}
"""

_PERMUTE = """HloModule m, num_partitions=4

ENTRY %main (x: f32[256]) -> f32[256] {
  %x = f32[256] parameter(0)
  ROOT %cp = f32[256] collective-permute(%x), source_target_pairs=PAIRS
}
"""


def _refused(text: str, line: int, fragment: str) -> None:
    with pytest.raises(HloParseError) as exc:
        parse_hlo(text)
    assert exc.value.line == line and fragment in str(exc.value), str(exc.value)


def test_a_second_entry_computation_is_refused_at_its_line():
    _refused(_ALL_REDUCE, 13, "second ENTRY computation 'second'")


def test_a_negative_known_trip_count_is_refused_at_its_line():
    _refused(_WHILE.replace("TRIP", "-20"), 21, "negative known_trip_count -20")
    program = build_program(_WHILE.replace("TRIP", "20"))
    assert [loop.trip_count for loop in program.loops] == [20]


@pytest.mark.parametrize("pairs, fragment", [
    ("{{0,1},{2,1},{1,0}}", "device 1 as a target"),
    ("{{0,1},{0,2}}", "device 0 as a source"),
])
def test_a_collective_permute_with_a_repeated_device_is_refused_at_its_line(pairs, fragment):
    _refused(_PERMUTE.replace("PAIRS", pairs), 5, fragment)


def test_a_collective_permute_of_distinct_pairs_is_read():
    program = build_program(_PERMUTE.replace("PAIRS", "{{0,1},{1,2},{2,3},{3,0}}"))
    assert len(program.collectives) == 1


@pytest.mark.parametrize("text", [_ALL_REDUCE, _WHILE.replace("TRIP", "-20"),
                                  _PERMUTE.replace("PAIRS", "{{0,1},{2,1}}")])
def test_the_hlo_command_refuses_them_with_one_line(tmp_path, text):
    path = tmp_path / "m.hlo"
    path.write_text(text)
    result = CliRunner().invoke(cli, ["hlo", str(path)], catch_exceptions=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1 and "at line" in lines[0], result.output
