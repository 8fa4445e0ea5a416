"""Timing on the TPU chip attached to this host: splash calls and one device's program.

Each measurement compiles its program for the first local TPU device (with the scoped-VMEM
limit it asks for: `compile_splash_case`, `compile_module`), makes its inputs on the chip, runs it
`warmup` times untimed, then `runs` times, each run timed from its dispatch to its result being
ready (`time_compiled`). A run of a short program dispatches it `repeat` times back to back and
counts the mean, so that the host's dispatch latency hides behind the chip's work. A program the
compiler refuses (a tile whose working set overflows the scoped VMEM) is recorded as refused,
with the compiler's first line, not timed.

Compiling is the host's work and most of a measurement's wall time; `compiled_in_order` compiles
several programs at once in threads (the compiler releases Python's lock), a batch at a time,
and hands them on only when the whole batch is compiled, so that no compile runs while the chip
is timed.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aoizora.errors import MeasureError

#: a run lasts at least this long: short programs are dispatched several times per run
MIN_RUN_SECONDS = 0.05

T = TypeVar("T")


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


@dataclass
class ChipProgram:
    """A program compiled for the chip and not yet run: `make_run` makes its inputs on the chip
    and returns the dispatch to time; or the compiler's refusal. `text` is the compiled module
    (for a module compiled from text), to predict it from."""

    make_run: Callable[[], Callable[[], Any]] | None = None
    compile_seconds: float | None = None
    refused: str | None = None
    text: str | None = None


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


def time_compiled(compiled: ChipProgram, runs: int, warmup: int = 1) -> Timing:
    """Time a compiled program on the chip (`time_runs`), with its compile time; a refusal as is."""
    if compiled.make_run is None:
        return Timing(refused=compiled.refused, compile_seconds=compiled.compile_seconds)
    timing = time_runs(compiled.make_run(), runs, warmup)
    timing.compile_seconds = compiled.compile_seconds
    return timing


def compiled_in_order(jobs: Sequence[Callable[[], T]], workers: int = 1) -> Iterator[T]:
    """Each job's result (a compile), in the jobs' order. With `workers` > 1 the jobs run in that
    many threads, a batch of `workers` at a time, and a batch's results are handed on only once
    all of it is done: the caller times them on the chip with no compile running beside it."""
    if workers <= 1:
        for job in jobs:
            yield job()
        return
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="aoizora-compile") as pool:
        for start in range(0, len(jobs), workers):
            futures = [pool.submit(job) for job in jobs[start:start + workers]]
            results = [f.result() for f in futures]
            del futures
            while results:
                yield results.pop(0)


def compile_splash_case(case: Any, device: Any, seed: int = 0) -> ChipProgram:
    """Compile one `splash_calls.SplashCase` for `device`: the splash kernel alone over
    heads-major inputs of the call's padded lengths (what the model's call runs inside its layer);
    its inputs are drawn on the chip when it is timed."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import SingleDeviceSharding

    from aoizora.models.wan.transformer.attention import SplashTiles, run_splash

    call, blocks = case.call, case.blocks
    tiles = SplashTiles.of(call.lq, call.lk, blocks.block_q, blocks.block_kv, blocks.block_kv_compute)
    kernel = tiles.kernel(call.heads, call.residuals, interpret=False)
    segments = tiles.segments(None)
    shapes = [(call.batch, call.heads, length, call.head_dim) for length in (tiles.lq, tiles.lk, tiles.lk)]
    fn = jax.jit(lambda a, b, c: run_splash(kernel, a, b, c, segments, "splash"))
    on_device = SingleDeviceSharding(device)
    t0 = time.perf_counter()
    try:
        executable = fn.lower(*(jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=on_device) for s in shapes)).compile(
            compiler_options=compiler_options(case.limit_kib))
    except Exception as exc:  # the compiler's refusal (scoped VMEM) is a result, not a failure
        return ChipProgram(refused=_first_line(exc))
    compile_s = time.perf_counter() - t0

    def make_run() -> Callable[[], Any]:
        keys = jax.random.split(jax.random.key(seed), 3)
        q, k, v = (jax.device_put(jax.random.normal(key, shape, jnp.bfloat16), device)
                   for key, shape in zip(keys, shapes, strict=True))
        return lambda: executable(q, k, v)

    return ChipProgram(make_run=make_run, compile_seconds=compile_s)


def time_splash_case(case: Any, runs: int = 5, warmup: int = 1, seed: int = 0) -> Timing:
    """Time one `splash_calls.SplashCase` on the chip (`compile_splash_case`, `time_compiled`)."""
    return time_compiled(compile_splash_case(case, tpu_device(), seed), runs, warmup)


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


def compile_module(text: str, options: dict[str, str] | None, device: Any, seed: int = 0) -> ChipProgram:
    """Compile a module's HLO text (one device's program, `local_program.localize`d) for `device`
    with the compiler options; it runs on random arguments of its parameters' shapes (normal
    floats, zero integers), made on the chip when it is timed."""
    from jax._src.lib import xla_client as xc

    t0 = time.perf_counter()
    try:
        executable = compile_module_text(text, device, options)
    except Exception as exc:  # the compiler's refusal (scoped VMEM, HBM) is a result
        return ChipProgram(refused=_first_line(exc))
    compile_s = time.perf_counter() - t0

    def make_run() -> Callable[[], Any]:
        args = _random_arguments(xc.hlo.hlo_module_from_text(text), device, seed)
        return lambda: executable.execute_sharded(args).disassemble_into_single_device_arrays()

    return ChipProgram(make_run=make_run, compile_seconds=compile_s, text=compiled_text(executable))


def time_module_text(text: str, options: dict[str, str] | None, runs: int = 3, warmup: int = 1,
                     seed: int = 0) -> tuple[Timing, str | None]:
    """Compile a module's HLO text for the chip and time it (`compile_module`, `time_compiled`);
    with the timing, the compiled module's text (None when refused)."""
    compiled = compile_module(text, options, tpu_device(), seed)
    return time_compiled(compiled, runs, warmup), compiled.text


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
