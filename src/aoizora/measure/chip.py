"""Timing on the TPU chip attached to this host: splash calls and one device's program.

Each measurement compiles its program for the first local TPU device (with the scoped-VMEM
limit it asks for), runs it `warmup` times untimed, then `runs` times, each run timed from its
dispatch to its result being ready. A run of a short program dispatches it `repeat` times back
to back and counts the mean, so that the host's dispatch latency hides behind the chip's work.
A program the compiler refuses (a tile whose working set overflows the scoped VMEM) is recorded
as refused, with the compiler's first line, not timed.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from aoizora.errors import MeasureError

#: a run lasts at least this long: short programs are dispatched several times per run
MIN_RUN_SECONDS = 0.05


@dataclass
class Timing:
    """What one program measured: every run's seconds (mean per dispatch), or why it did not run."""

    seconds: list[float] = field(default_factory=list)
    compile_seconds: float | None = None
    repeat: int = 1
    refused: str | None = None

    @property
    def median_seconds(self) -> float | None:
        return statistics.median(self.seconds) if self.seconds else None

    def to_json(self) -> dict[str, Any]:
        return {"median_seconds": self.median_seconds, "seconds": self.seconds, "repeat": self.repeat,
                "compile_seconds": self.compile_seconds, "refused": self.refused}


def tpu_device() -> Any:
    """The first local TPU device; MeasureError (one line) where this host has none."""
    import jax

    try:
        devices = jax.devices("tpu")
    except RuntimeError:
        devices = []
    if not devices:
        raise MeasureError("no TPU is attached to this host, so nothing can be timed on a chip; run "
                           "`aoizora measure --per-device/--splash` on a TPU host (planning needs none)")
    return devices[0]


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return (lines[0] if lines else type(exc).__name__)[:300]


def time_runs(run: Callable[[], Any], runs: int, warmup: int, estimate_s: float | None = None) -> Timing:
    """Time `run` (a dispatch returning arrays) `runs` times after `warmup` untimed runs."""
    import jax

    for _ in range(warmup):
        jax.block_until_ready(run())
    if estimate_s is None:
        t0 = time.perf_counter()
        jax.block_until_ready(run())
        estimate_s = time.perf_counter() - t0
    repeat = max(1, math.ceil(MIN_RUN_SECONDS / max(estimate_s, 1e-6))) if estimate_s < MIN_RUN_SECONDS else 1
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        outs = [run() for _ in range(repeat)]
        jax.block_until_ready(outs)
        times.append((time.perf_counter() - t0) / repeat)
        del outs
    return Timing(seconds=times, repeat=repeat)


def compiler_options(limit_kib: int | None) -> dict[str, str | bool] | None:
    from aoizora.toolchain import SCOPED_VMEM_FLAG

    return None if limit_kib is None else {SCOPED_VMEM_FLAG: str(int(limit_kib))}


def time_splash_case(case: Any, runs: int = 5, warmup: int = 1, seed: int = 0) -> Timing:
    """Time one `splash_calls.SplashCase` on the chip: the splash kernel alone over heads-major
    inputs of the call's padded lengths (what the model's call runs inside its layer)."""
    import jax
    import jax.numpy as jnp

    from aoizora.models.wan.transformer.attention import SplashTiles, run_splash

    device = tpu_device()
    call, blocks = case.call, case.blocks
    tiles = SplashTiles.of(call.lq, call.lk, blocks.block_q, blocks.block_kv, blocks.block_kv_compute)
    kernel = tiles.kernel(call.heads, call.residuals, interpret=False)
    keys = jax.random.split(jax.random.key(seed), 3)

    def draw(key: Any, length: int) -> Any:
        shape = (call.batch, call.heads, length, call.head_dim)
        return jax.device_put(jax.random.normal(key, shape, jnp.bfloat16), device)

    q, k, v = draw(keys[0], tiles.lq), draw(keys[1], tiles.lk), draw(keys[2], tiles.lk)
    segments = tiles.segments(None)
    fn = jax.jit(lambda a, b, c: run_splash(kernel, a, b, c, segments, "splash"))
    t0 = time.perf_counter()
    try:
        compiled = fn.lower(q, k, v).compile(compiler_options=compiler_options(case.limit_kib))
    except Exception as exc:  # the compiler's refusal (scoped VMEM) is a result, not a failure
        return Timing(refused=_first_line(exc))
    compile_s = time.perf_counter() - t0
    timing = time_runs(lambda: compiled(q, k, v), runs, warmup)
    timing.compile_seconds = compile_s
    return timing


def compile_module_text(text: str, device: Any, options: dict[str, str] | None = None) -> Any:
    """Compile a module's HLO text for `device` (a chip's, or a compile-only device's) with the
    compiler options (libtpu flags by name); the loaded executable, or the executable alone for a
    compile-only device. The compiler's refusal propagates as it raised it."""
    from jax._src import compiler as jax_compiler
    from jax._src.interpreters import mlir
    from jax._src.lib import _jax
    from jax._src.lib import xla_client as xc
    from jax._src.lib.mlir import ir

    module = xc.hlo.hlo_module_from_text(text)
    stablehlo = _jax.mlir.hlo_to_stablehlo(module.as_serialized_hlo_module_proto())
    compile_options = jax_compiler.get_compile_options(num_replicas=1, num_partitions=1,
                                                       env_options_overrides=options or None)
    client = device.client
    with mlir.make_ir_context():
        parsed = ir.Module.parse(stablehlo)
        if isinstance(client, _jax.CompileOnlyPyClient):
            return client.compile(parsed, executable_devices=xc.DeviceList((device,)), compile_options=compile_options)
        return client.compile_and_load(parsed, executable_devices=xc.DeviceList((device,)),
                                       compile_options=compile_options)


def compiled_text(executable: Any) -> str:
    """The optimized module of an executable compiled by `compile_module_text`."""
    return "\n".join(m.to_string() for m in executable.hlo_modules())


def time_module_text(text: str, options: dict[str, str] | None, runs: int = 3, warmup: int = 1,
                     seed: int = 0) -> tuple[Timing, str | None]:
    """Compile a module's HLO text (one device's program, `local_program.localize`d) for the chip
    with the compiler options and time it on random arguments of its parameters' shapes (normal
    floats, zero integers); with the timing, the compiled module's text (None when refused)."""
    from jax._src.lib import xla_client as xc

    device = tpu_device()
    t0 = time.perf_counter()
    try:
        executable = compile_module_text(text, device, options)
    except Exception as exc:  # the compiler's refusal (scoped VMEM, HBM) is a result
        return Timing(refused=_first_line(exc)), None
    compile_s = time.perf_counter() - t0
    args = _random_arguments(xc.hlo.hlo_module_from_text(text), device, seed)

    def run() -> Any:
        return executable.execute_sharded(args).disassemble_into_single_device_arrays()

    timing = time_runs(run, runs, warmup)
    timing.compile_seconds = compile_s
    return timing, compiled_text(executable)


def _random_arguments(module: Any, device: Any, seed: int) -> list[Any]:
    import jax
    import jax.numpy as jnp
    from jax._src.lib import xla_client as xc

    shapes = xc.XlaComputation(module.as_serialized_hlo_module_proto()).program_shape().parameter_shapes()
    out = []
    key = jax.random.key(seed)
    for i, shape in enumerate(shapes):
        dtype = jnp.dtype(shape.numpy_dtype())
        dims = tuple(shape.dimensions())
        if jnp.issubdtype(dtype, jnp.floating):
            value = jax.random.normal(jax.random.fold_in(key, i), dims, dtype)
        else:
            value = jnp.zeros(dims, dtype)
        out.append(jax.device_put(value, device))
    return out
