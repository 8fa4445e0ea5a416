"""Wan video DiT in JAX — Wan 2.1 (T2V-1.3B, T2V-14B, I2V-14B) and Wan 2.2 (T2V-A14B and I2V-A14B
with two experts, TI2V-5B) — with parallel strategies as configuration.

Public API (what the planner imports)
-------------------------------------
Model and inputs
    ``WanConfig``, presets ``WAN_T2V_1_3B``, ``WAN_T2V_14B``, ``WAN_I2V_14B``, ``WAN22_T2V_A14B``,
    ``WAN22_I2V_A14B``, ``WAN22_TI2V_5B`` (``PRESETS``); ``cfg.vae_stride`` is the VAE's
    compression (4×8×8, or 4×16×16 for TI2V-5B), ``cfg.condition_channels`` the I2V channels
    concatenated to the latent. ``VideoShape(frames, height, width)`` with ``.latent_shape(cfg)``,
    ``.grid(cfg)``, ``.tokens(cfg)`` — raises ``ShapeError`` for frames ≠ 4n+1 or sizes not
    multiples of VAE stride × patch (16, or 32 for TI2V-5B). ``forward`` takes a timestep per
    sample (B,) or per token (B, tokens) (TI2V-5B).

Pipelines (Wan 2.2 experts)
    ``WanPipelineConfig(transformer, transformer_2, boundary_ratio, expand_timesteps, shift, steps,
    guidance_scale, guidance_scale_2)``: ``.expert_of_timestep(t)`` (high-noise expert 0 while
    t >= boundary_ratio × 1000, low-noise expert 1 after), ``.guidance(expert)``, ``.scheduler()``.
    ``load_pipeline_config(folder)`` and ``load_expert_params(folder, pipeline)`` read a diffusers
    pipeline folder (``transformer/``, ``transformer_2/``, ``model_index.json``, ``vae/``,
    ``scheduler/``); ``make_pipeline_steps`` gives one jitted step per expert and
    ``sample_pipeline`` runs the loop, switching experts at the boundary.

Strategy (logical sharding)
    ``Strategy(data, fsdp, context, tensor, attention, weights, kernel, context_ulysses=1,
    ulysses_chunks=1, splash_blocks=None)`` — mesh axes ``MESH_AXES = ("data", "fsdp",
    "context", "tensor")``; ``attention`` ∈ ``"allgather"`` (Q sequence-sharded, K/V
    all-gathered), ``"ulysses"`` (all-to-all heads↔sequence), ``"ring"`` (K/V ppermute around
    ``context``), ``"ulysses_ring"`` (2D context: ``context`` = U × R on the two mesh axes
    ``context_ring`` × ``context_ulysses`` of ``ULYSSES_RING_MESH_AXES``, U = ``context_ulysses``;
    ``Strategy.mesh_axes``/``mesh_shape`` give a strategy's mesh); ``ulysses_chunks`` splits the
    Ulysses all-to-alls and attention into head groups; ``splash_blocks`` (``SplashBlocks``)
    fixes the splash kernel's block sizes; ``weights`` ∈ ``"replicated"``,
    ``"gathered"`` (embed dim sharded over fsdp×context, all-gathered per layer inside the scan),
    ``"tensor"`` (heads/mlp over tensor), ``"gathered+tensor"``; ``kernel`` ∈ ``"auto"``
    (splash on TPU devices, blockwise XLA elsewhere), ``"xla"``, ``"splash"``.
    ``check_strategy(strategy, cfg, video=None, batch=2, num_devices=None) -> list[str]`` gives
    every reason a strategy is illegal (empty: legal); ``validate_strategy`` raises
    ``StrategyError`` with them; ``enumerate_strategies(cfg, video, num_devices)`` lists every
    legal one. ``logical_rules(strategy)`` maps logical axis names
    (batch, length, kv_length, heads_act, head_dim, embed_act, mlp_act; weights: layers, embed,
    heads, mlp) to mesh axes. ``make_mesh(strategy, devices)`` reshapes devices *in the given
    order* into the strategy's mesh — the planner passes its own physical order (or any
    ``jax.sharding.Mesh`` with those axis names and sizes).

Programs for a strategy on a mesh
    ``make_denoise_step(cfg, scheduler, strategy, mesh, guidance_scale)`` → jitted
    ``step(params, latents, state, text_cond, text_uncond, image=None, condition=None)
    -> (latents, state)``: the transformer on the CFG batch of 2, guidance, scheduler update.
    ``make_forward(cfg, strategy, mesh)`` → jitted ``forward(params, latents, t, text, image=None)``.
    ``lower_denoise_step(cfg, video, strategy, mesh, scheduler)`` and
    ``lower_forward(cfg, video, strategy, mesh)`` return ``jax.stages.Lowered`` built from
    abstract inputs (no weights): call ``.compile()`` for the TPU topology.
    ``abstract_params(cfg, strategy, mesh)``, ``abstract_forward_inputs(cfg, video, strategy, mesh)``,
    ``abstract_step_inputs(cfg, video, mesh, scheduler)``: sharded ``jax.ShapeDtypeStruct`` pytrees.
    ``param_shardings(cfg, strategy, mesh)``: NamedSharding pytree of the parameters.

Opaque kernels
    ``opaque_kernel_costs(cfg, video, strategy, mesh) -> list[KernelCost]``: every Pallas
    splash call one forward emits, per device: local q/kv shapes, block sizes, ``calls`` (layers ×
    uses), ``flops``/``transcendentals``/``bytes_accessed`` per call. They appear in compiled
    HLO as ``custom-call`` with ``custom_call_target="tpu_custom_call"``. It traces ``forward``
    with a ``KernelLog`` of its own (``forward(..., kernels=log)``; ``log.kernels`` afterwards):
    the log belongs to the trace that is passed it, so traces never see each other's kernels.

Weights
    ``load_params(path, cfg, shardings=None, strict=True)`` loads diffusers
    ``WanTransformer3DModel`` safetensors (single file, folder, or sharded with index json),
    validating every tensor name/shape before reading anything (``CheckpointError`` names the
    tensor); ``load_config(path)`` reads diffusers' ``config.json``; ``save_params`` writes the
    diffusers layout; ``init_params(cfg, seed)`` makes random weights; ``param_shapes``,
    ``param_logical_axes`` and ``param_table`` describe every parameter.

Schedulers
    ``EulerScheduler(num_steps, shift)`` and ``UniPCScheduler(num_steps, shift, solver_order=2)``
    (flow matching, as diffusers' FlowMatchEulerDiscrete / UniPCMultistep with flow sigmas);
    ``sample(step_fn, params, latents, scheduler, text_cond, text_uncond, ...)`` runs all steps.
"""

from aoizora.models.wan.attention import KernelCost, KernelLog
from aoizora.models.wan.checkpoint import load_config, load_params, save_params
from aoizora.models.wan.config import (
    PRESETS, WAN22_I2V_A14B, WAN22_T2V_A14B, WAN22_TI2V_5B, WAN_I2V_14B, WAN_T2V_1_3B, WAN_T2V_14B, VideoShape, WanConfig,
)
from aoizora.models.wan.model import forward
from aoizora.models.wan.params import init_params, param_logical_axes, param_shapes, param_table
from aoizora.models.wan.sampling import (
    denoise_step, lower_denoise_step, lower_forward, make_denoise_step, make_forward, opaque_kernel_costs, sample,
)
from aoizora.models.wan.pipeline import (
    WanPipelineConfig, load_expert_params, load_pipeline_config, make_pipeline_steps, sample_pipeline,
)
from aoizora.models.wan.schedulers import EulerScheduler, UniPCScheduler
from aoizora.models.wan.sharding import (
    abstract_forward_inputs, abstract_params, abstract_step_inputs, param_shardings,
)
from aoizora.models.wan.strategy import (
    ATTENTION_VARIANTS, MESH_AXES, ULYSSES_RING_MESH_AXES, WEIGHT_MODES, SplashBlocks, Strategy, check_strategy,
    enumerate_strategies, logical_rules, make_mesh, validate_strategy,
)

__all__ = [
    "KernelCost", "KernelLog", "load_config", "load_params", "save_params", "PRESETS", "WAN_I2V_14B", "WAN_T2V_1_3B",
    "WAN_T2V_14B", "WAN22_T2V_A14B", "WAN22_I2V_A14B", "WAN22_TI2V_5B", "VideoShape", "WanConfig",
    "WanPipelineConfig", "load_expert_params", "load_pipeline_config", "make_pipeline_steps", "sample_pipeline", "forward", "init_params", "param_logical_axes", "param_shapes",
    "param_table", "denoise_step", "lower_denoise_step", "lower_forward", "make_denoise_step", "make_forward",
    "opaque_kernel_costs", "sample", "EulerScheduler", "UniPCScheduler", "abstract_forward_inputs",
    "abstract_params", "abstract_step_inputs", "param_shardings", "ATTENTION_VARIANTS", "MESH_AXES", "ULYSSES_RING_MESH_AXES", "SplashBlocks",
    "WEIGHT_MODES", "Strategy", "check_strategy", "enumerate_strategies", "logical_rules", "make_mesh", "validate_strategy",
]
