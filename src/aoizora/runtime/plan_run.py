"""`aoizora run` / `aoizora measure`: denoising steps of the planned model with the plan's mesh.

On the planned TPU slice the mesh is built from the devices' coordinates and the full model runs
(random weights unless a diffusers checkpoint is given). Without a TPU, the same strategy runs on
host CPU devices with a small config of the same model family (same head count, so the strategy
stays legal): this checks that the plan's program runs and matches a single-device run; its
timings say nothing about a TPU.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from aoizora.errors import PlanMismatchError
from aoizora.plan.plan import Plan


@dataclass
class RunReport:
    platform: str
    on_planned_slice: bool
    config: str
    steps: int
    compile_seconds: float
    step_seconds: list[float]
    check_relative_error: float | None = None

    @property
    def median_step_seconds(self) -> float:
        return statistics.median(self.step_seconds)


def ensure_host_devices(count: int) -> None:
    """Ask XLA for `count` CPU devices; only effective before jax starts its backends."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_force_host_platform_device_count" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_force_host_platform_device_count={count}".strip()


def small_config(config: Any) -> Any:
    """A few-layer, narrow config with the same heads (so tensor/Ulysses degrees stay legal)."""
    heads = config.num_attention_heads
    return dataclasses.replace(
        config, num_layers=2, attention_head_dim=16, ffn_dim=2 * heads * 16, text_dim=64, text_len=16, freq_dim=32,
        image_dim=32 if config.image_dim else None, added_kv_proj_dim=heads * 16 if config.added_kv_proj_dim else None,
        image_len=8, dtype=np.float32,
    )


def _strategy(plan: Plan) -> Any:
    from aoizora.models.wan.transformer.strategy import Strategy

    st = plan.strategy
    if "mesh" not in st or "attention" not in st:
        raise PlanMismatchError("this plan is not of a Wan model; `aoizora run` runs Wan plans")
    return Strategy.from_description(st)


def run_plan(
    plan: Plan,
    *,
    steps: int = 3,
    check: bool = False,
    checkpoint: str | None = None,
    distributed: bool = False,
    seed: int = 0,
) -> RunReport:
    """Run `steps` denoising steps (after two warm-up steps that compile) with the plan's mesh."""
    from aoizora.models.registry import model_config
    from aoizora.models.wan.transformer.config import VideoShape

    n = math.prod(plan.axis_sizes)
    ensure_host_devices(n)
    import jax

    if distributed:
        jax.distributed.initialize()  # multi-host slices: launched once per host, as JAX programs are
    devices = jax.devices()
    on_tpu = devices[0].platform == "tpu"
    strategy = _strategy(plan)
    full = model_config(plan.data["workload"]["name"])
    if on_tpu:
        mesh = plan.mesh(devices)
        config = full
        shapes = plan.data["workload"]["shapes"]
        video = VideoShape(frames=shapes["frames"], height=shapes["height"], width=shapes["width"])
    else:
        cpu = jax.devices("cpu")
        if len(cpu) < n:
            raise PlanMismatchError(
                f"the plan needs {n} devices but this host has {len(cpu)} CPU devices; "
                f"set XLA_FLAGS=--xla_force_host_platform_device_count={n} before starting"
            )
        from jax.sharding import Mesh

        mesh = Mesh(np.array(cpu[:n], dtype=object).reshape(plan.axis_sizes), plan.axis_names)
        config = small_config(full)
        video = VideoShape(frames=5, height=64, width=64)
        # a weight tile is a TPU layout: the CPU stand-in runs the plan's sharding in its own layouts
        strategy = dataclasses.replace(strategy, weight_tile=None)
    return _run(plan, config, video, strategy, mesh, steps, check, checkpoint, seed, on_tpu)


def _run(plan, config, video, strategy, mesh, steps, check, checkpoint, seed, on_tpu) -> RunReport:
    import jax

    from aoizora.models.wan.transformer.checkpoint import load_params
    from aoizora.models.wan.transformer.params import init_params
    from aoizora.models.wan.transformer.sharding import param_shardings
    from aoizora.models.wan.video.sampling import make_denoise_step
    from aoizora.models.wan.video.schedulers import UniPCScheduler

    sched_info = plan.data["workload"].get("scheduler", {})
    warmup = 2  # UniPC's state gains its history after the first step: the second call compiles again
    scheduler = UniPCScheduler(num_steps=max(int(sched_info.get("steps", 50)), steps + warmup),
                               shift=float(sched_info.get("shift", 5.0)))
    shardings = param_shardings(config, strategy, mesh)
    if checkpoint:
        params = load_params(checkpoint, config, shardings=shardings)
    else:
        params = jax.device_put(init_params(config, seed), shardings)
    latents, *conditions = _random_inputs(config, video, seed)

    from aoizora.models.registry import pipeline_config

    # one expert's step (a two-expert plan's steps all have this program); TI2V's timesteps per token.
    # The plan's compiler flags are libtpu's: on the CPU stand-in they do not exist (nor matter).
    expand = pipeline_config(plan.data["workload"]["name"]).expand_timesteps
    step = make_denoise_step(config, scheduler, strategy, mesh, expand_timesteps=expand,
                             compiler_options=plan.compiler_options() if on_tpu else None)

    def loop(step_fn: Any, p: Any) -> tuple[np.ndarray, float, list[float]]:
        return _timed_steps(step_fn, p, latents, scheduler.init_state(latents), conditions, warmup, steps)

    out, compile_s, times = loop(step, params)
    report = RunReport(
        platform=mesh.devices.flat[0].platform, on_planned_slice=on_tpu,
        config="full" if on_tpu else "small (CPU stand-in)", steps=steps, compile_seconds=compile_s, step_seconds=times,
    )
    if check:
        single_params = jax.device_put(jax.device_get(params), mesh.devices.flat[0])
        ref, _, _ = loop(make_denoise_step(config, scheduler, expand_timesteps=expand), single_params)
        report.check_relative_error = float(np.linalg.norm(out - ref)) / max(float(np.linalg.norm(ref)), 1e-30)
    return report


def _random_inputs(config: Any, video: Any, seed: int) -> tuple[Any, ...]:
    """Random latents, conditional and unconditional text embeddings, image embeddings (I2V, else
    None) and condition latents (TI2V, else None) of one video, drawn from `seed + 1`."""
    import jax.numpy as jnp

    rng = np.random.default_rng(seed + 1)
    _, t, h, w = video.latent_shape(config)
    latents = jnp.asarray(rng.standard_normal((1, config.out_channels, t, h, w)), jnp.float32)
    text_c = jnp.asarray(rng.standard_normal((1, config.text_len, config.text_dim)), config.dtype)
    text_u = jnp.asarray(rng.standard_normal((1, config.text_len, config.text_dim)), config.dtype)
    image = condition = None
    if config.is_i2v:
        image = jnp.asarray(rng.standard_normal((1, config.image_len, config.image_dim)), config.dtype)
    if config.condition_channels:
        condition = jnp.asarray(rng.standard_normal((1, config.condition_channels, t, h, w)), jnp.float32)
    return latents, text_c, text_u, image, condition


def _timed_steps(step_fn: Any, params: Any, latents: Any, state: Any, conditions: list[Any], warmup: int,
                 steps: int) -> tuple[np.ndarray, float, list[float]]:
    """(final latents, seconds of the `warmup` steps that compile, seconds of each of `steps` timed steps)."""
    import jax

    x = latents
    t0 = time.perf_counter()
    for _ in range(warmup):  # compiles (both state structures); not timed as steps
        x, state = step_fn(params, x, state, *conditions)
    jax.block_until_ready(x)
    compile_s = time.perf_counter() - t0
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        x, state = step_fn(params, x, state, *conditions)
        jax.block_until_ready(x)
        times.append(time.perf_counter() - t0)
    return np.asarray(x), compile_s, times
