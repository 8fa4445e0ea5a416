"""Q2's and the simulator's numbers, to the last bit, on a few small compiled programs and the
synthetic N-D collectives, against a committed output (`benchmarks/q2_sim_fingerprint.py`'s
functions; that script runs them over a whole compile cache to check a refactor).

A change meant to change these numbers regenerates the file:
    PYTHONPATH=src:. python -m tests.evaluation.validation.test_fingerprint
"""

from __future__ import annotations

import difflib
import importlib.util
import io
from pathlib import Path

ROOT = Path(__file__).parents[3]
GOLDEN = Path(__file__).parent / "data" / "q2_sim_fingerprint.txt"
# (builder in tests/hlo/programs.py, slice it compiles for): one per collective form
PROGRAMS = [("matmul_allreduce", "v5e:2x4"), ("reduce_scatter", "v5e:2x4"), ("scanned_layers", "v5e:2x4"),
            ("shard_map_4x4", "v5e:4x4"), ("fsdp_tp_scan", "v5e:4x4")]


def _script():
    spec = importlib.util.spec_from_file_location("q2_sim_fingerprint", ROOT / "benchmarks" / "q2_sim_fingerprint.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fingerprint() -> str:
    from aoizora.hlo import build_program
    from aoizora.topology import get_topology
    from tests.hlo import programs

    script, out = _script(), io.StringIO()
    for name, slice_name in PROGRAMS:
        program = build_program(getattr(programs, name)().as_text())
        script.fingerprint_program(out, f"{name} {slice_name}", program, get_topology(slice_name))
    script.fingerprint_synthetic(out)
    return out.getvalue()


def test_q2_and_simulator_numbers_match_the_committed_output():
    got, want = fingerprint(), GOLDEN.read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(True), got.splitlines(True), "committed", "now", n=0))
    assert got == want, f"Q2 or simulator numbers changed:\n{diff[:4000]}"


if __name__ == "__main__":
    GOLDEN.write_text(fingerprint())
