"""Fuzzing the HLO parser and program builder: any text either parses or raises the project's
typed error (HloParseError / HloModelError) — never another exception, never a hang."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from aoizora.errors import AoizoraError
from aoizora.hlo import build_program, parse_hlo
from tests.fuzzing import FUZZ, mutated

EDGE_CASES = (Path(__file__).parent / "fixtures" / "syntax_edge_cases.hlo").read_text()
HLO_ALPHABET = st.sampled_from(list("%(){}[],=:.-> \n\"/*ENTRYROOTHloModulef32s32pred0123456789<>T") + [
    "HloModule m\n", "ENTRY %e ", "ROOT ", " parameter(0)", "f32[8,128]{1,0}", "replica_groups={{0,1}}",
    "all-reduce(", "to_apply=%add", "backend_config={", "(f32[], ", "\"", "/*", "*/",
])


def _parse_and_build(text: str) -> None:
    try:
        build_program(parse_hlo(text))
    except AoizoraError:
        pass


def test_the_fixture_builds():
    assert build_program(EDGE_CASES).num_devices == 4


@FUZZ
@given(st.text(max_size=400))
def test_random_text(text):
    _parse_and_build(text)


@FUZZ
@given(st.lists(HLO_ALPHABET, max_size=120).map("".join))
def test_random_hlo_like_tokens(text):
    _parse_and_build(text)


@FUZZ
@given(mutated(EDGE_CASES))
def test_mutated_module(text):
    _parse_and_build(text)


@FUZZ
@given(st.integers(1, 20_000), st.sampled_from(["(", "{", "["]))
def test_deep_nesting(depth, bracket):
    closing = {"(": ")", "{": "}", "[": "]"}[bracket]
    for body in (f"ROOT %x = {bracket * depth}f32[]{closing * depth} constant(0)",
                 f"ROOT %x = f32[] constant(0), backend_config={'{' * depth}{'}' * depth}",
                 f"ROOT %x = f32[] constant(0), sharding={bracket * depth}"):
        _parse_and_build("HloModule m\n\nENTRY %e () -> f32[] {\n  " + body + "\n}\n")
