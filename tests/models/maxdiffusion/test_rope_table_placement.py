"""Why MaxDiffusion's step compiled for TPU7x takes its rotary table as the compiler places it.

MaxDiffusion passes its complex64 rotary table replicated; each device slices its part inside the
step. libtpu (the pinned 0.0.42.1) aborts compiling a per-partition slice of a replicated complex64
array for TPU7x, so `aoizora.models.maxdiffusion.program` lets the compiler place the table there
(and the plan says so). The reduction below is that slice alone, compiled in a child process (the
abort ends the process): while it aborts, the adjustment is needed; the day it compiles, the
adjustment can go, and the first test says so. MaxDiffusion itself is not needed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aoizora.models.maxdiffusion import program

#: the slice alone: a replicated complex64 table resharded along its sequence dim over 8 devices
REDUCTION = """
import sys
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
from aoizora.toolchain import compile_only_devices
mesh = Mesh(np.array(compile_only_devices(sys.argv[1])), ("x",))
out = NamedSharding(mesh, P(None, None, "x"))
table = None if sys.argv[2] == "compiler" else NamedSharding(mesh, P())
lowered = jax.jit(lambda z: z + 0, out_shardings=out).lower(
    jax.ShapeDtypeStruct((1, 1, 3120, 64), jnp.complex64, sharding=table))
compiled = lowered.compile()
print("compiled", compiled.input_shardings[0][0].is_fully_replicated)
"""


def _compile(topology: str, table: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", REDUCTION, topology, table], capture_output=True, text=True,
                          timeout=600, cwd=Path(__file__).parent)


def test_libtpu_still_aborts_slicing_a_replicated_complex_table_on_tpu7x():
    out = _compile("tpu7x:2x2x1", "replicated")
    assert out.returncode != 0, ("libtpu now compiles a per-partition slice of a replicated complex64 array "
                                 "for TPU7x: drop COMPILER_PLACED_ROPE in aoizora.models.maxdiffusion.program")
    assert "windowing_util" in out.stderr


def test_the_same_slice_compiles_on_v6e():
    out = _compile("v6e:2x4", "replicated")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "compiled True" in out.stdout


def test_with_the_table_placed_by_the_compiler_tpu7x_compiles_and_slices_nothing():
    out = _compile("tpu7x:2x2x1", "compiler")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "compiled False" in out.stdout  # the table arrives sharded: no slice in the step


@pytest.mark.parametrize("generation, adjusted", [("tpu7x", True), ("v6e", False), ("v5e", False), (None, False)])
def test_the_plan_records_the_adjustment_where_it_is_made(generation, adjusted):
    record = program.MaxDiffusionSource(Path("."), "7cfb8801").to_json(generation)
    assert ("adjustments" in record) == adjusted
    assert (generation in program.COMPILER_PLACED_ROPE) == adjusted
    if adjusted:
        assert record["adjustments"] == [program.ROPE_ADJUSTMENT]
