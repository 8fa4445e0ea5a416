"""Fuzzing the small parsers of command-line values (slice names, meshes, resolutions, models,
benchmark cells): any text either parses or raises the project's typed error."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from aoizora.errors import AoizoraError
from tests.fuzzing import FUZZ

NEARLY = st.lists(st.sampled_from(list("v5e6p4:x=,/0123456789 ptsp_a-\n") + ["720p", "480p", "9" * 30, "x0"]),
                  max_size=24).map("".join)
TEXT = st.one_of(st.text(max_size=40), NEARLY)


def _typed(parse, text):
    try:
        return parse(text)
    except AoizoraError:
        return None


@FUZZ
@given(TEXT)
def test_topology_names(text):
    from aoizora.topology.slice import parse_topology_name

    parsed = _typed(parse_topology_name, text)
    if parsed is not None:
        generation, shape = parsed
        assert all(n >= 1 for n in shape)


@FUZZ
@given(TEXT)
def test_meshes(text):
    from aoizora.placement import MeshSpec

    mesh = _typed(MeshSpec.parse, text)
    if mesh is not None:
        assert all(n >= 1 for n in mesh.axis_sizes) and len(set(mesh.axis_names)) == len(mesh.axis_names)


@FUZZ
@given(TEXT, st.integers(-10**6, 10**7))
def test_resolutions_models_and_frames(text, frames):
    from aoizora.models.registry import model_config, parse_resolution, video_shape

    _typed(model_config, text)
    size = _typed(parse_resolution, text)
    if size is not None:
        _typed(lambda t: video_shape(model_config("wan2.1-t2v-1.3b"), t, frames), text)


@FUZZ
@given(TEXT)
def test_bench_cells(text):
    from aoizora.evaluation.bench import parse_cell

    _typed(parse_cell, text)
