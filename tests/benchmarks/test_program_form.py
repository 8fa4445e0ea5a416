"""benchmarks/program_form.py: its strategy per variant is the one it names, its summary of a
program counts what the program holds, and the committed run (docs/data/program-form/) pairs
aoizora's program with MaxDiffusion's for each variant on the same strategy."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from aoizora.models.registry import wan_space
from aoizora.topology import get_topology

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from program_form import describe, pick, relayout_bytes, relayout_parts  # noqa: E402

RUNS = sorted((ROOT / "docs" / "data" / "program-form").glob("*.json"))


@pytest.mark.parametrize("variant", ["allgather", "ulysses", "ring", "ulysses_ring"])
def test_each_variant_is_compared_on_a_data_parallel_strategy_of_that_variant(variant):
    topo = get_topology("v6e:2x4")
    strategy = pick(wan_space("wan2.1-t2v-14b", "720p", 81, generation=topo.generation), 8, variant)
    assert strategy.attention == variant and strategy.data == 2 and strategy.context == 4
    assert strategy.weights == "replicated" and strategy.ulysses_chunks == 1


def test_the_summary_counts_collectives_bytes_and_fusions_per_step():
    kind = SimpleNamespace
    program = SimpleNamespace(
        collectives=[SimpleNamespace(kind=kind(value="all-to-all"), payload_bytes=100, multiplicity=40),
                     SimpleNamespace(kind=kind(value="all-gather"), payload_bytes=7, multiplicity=1),
                     SimpleNamespace(kind=kind(value="all-to-all"), payload_bytes=5, multiplicity=2)],
        nodes=[SimpleNamespace(opcode="fusion", multiplicity=40), SimpleNamespace(opcode="fusion", multiplicity=1),
               SimpleNamespace(opcode="custom-call", multiplicity=40), SimpleNamespace(opcode="copy", multiplicity=3)])
    summary = describe(program)
    assert summary["collectives"] == {"all-to-all": 42, "all-gather": 1}
    assert summary["collective_bytes"] == {"all-to-all": 4010, "all-gather": 7}
    assert summary["collective_bytes_total"] == 4017
    assert summary["fusions"] == 41 and summary["custom_calls"] == 40


def _inst(opcode, name, to_apply=None):
    return SimpleNamespace(opcode=opcode, name=name, attr=lambda key: to_apply if key == "to_apply" else None)


def test_the_sparsecore_relayout_bytes_count_the_copies_the_data_format_calls_run():
    comps = {
        "main": SimpleNamespace(name="main", instructions=[
            _inst("call-start", "sparse-core-data-format-call.1", "format"),
            _inst("call-start", "all-gather-offload.2", "gather")]),
        "format": SimpleNamespace(name="format", instructions=[_inst("call-start", "call.3", "inner")]),
        "inner": SimpleNamespace(name="inner", instructions=[]),
        "gather": SimpleNamespace(name="gather", instructions=[]),
    }
    module = SimpleNamespace(computations=comps, computation=comps.__getitem__)
    node = lambda comp, opcode, hbm, mult: SimpleNamespace(  # noqa: E731
        computation=comp, opcode=opcode, hbm_bytes=hbm, multiplicity=mult)
    program = SimpleNamespace(nodes=[node("format", "copy", 200, 3), node("inner", "copy", 100, 1),
                                     node("format", "fusion", 1000, 1), node("gather", "copy", 400, 1),
                                     node("main", "copy", 800, 1)])
    assert relayout_bytes(program, module) == 350  # read and written once: half the bytes, trips counted
    for n, loop in zip(program.nodes, (7, None, None, None, None), strict=True):
        n.loop, n.compute_seconds = loop, (lambda hw, b=n.hbm_bytes: b / hw)
    parts = relayout_parts(program, module, 100.0)
    assert parts["sparsecore_relayout_q2_seconds"] == (200 * 3 + 100) / 100.0  # the copies only, trips counted
    assert parts["sparsecore_relayout_bytes_once_per_step"] == 50  # the one outside the layer loop


@pytest.mark.parametrize("path", RUNS, ids=lambda p: p.stem)
def test_the_committed_run_pairs_the_two_programs_on_each_strategy(path):
    doc = json.loads(path.read_text())
    by_variant: dict[str, dict[str, dict]] = {}
    for rec in doc["runs"]:
        by_variant.setdefault(rec["variant"], {})[rec["program"]] = rec
    assert by_variant
    for variant, recs in by_variant.items():
        assert set(recs) == {"aoizora", "maxdiffusion"}, variant
        assert recs["aoizora"]["strategy"] == recs["maxdiffusion"]["strategy"]
        done = [r for r in recs.values() if "error" not in r]
        for rec in done:
            assert rec["step_seconds"] >= rec["compute_seconds"] > 0
            assert abs(rec["sim_step_seconds"] - rec["step_seconds"]) <= 0.1 * rec["step_seconds"]
        if "error" not in recs["maxdiffusion"]:
            assert "transformer_forward_pass_full_cfg" in recs["maxdiffusion"]["module"]
        if path.name.startswith("tpu7x"):  # TPU7x offloads relayouts to its SparseCores: each program has some
            assert all(r["sparsecore_relayout_bytes"] > 0 for r in done), variant
