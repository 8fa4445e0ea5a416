"""Wan 2.2 pipelines through the Stage 1 protocol: one expert's denoising step, both experts' HBM.

The step program planned is one expert's `denoise_step` (both A14B experts have the same
architecture, so either one's step is the same program). What changes with two experts is memory:

* residency ``both`` — both experts stay in HBM for the whole video. The step is lowered with the
  other expert's parameters as extra arguments (kept though unused, not donated), sharded like
  the running expert's, so Stage 1's argument bytes and HBM check and the compiled program in
  Stage 2 — whose out-of-HBM refusal is libtpu's own — all see both experts.
* residency ``swap`` — one expert is resident; at the boundary the other is copied in from host
  memory over each chip's host link (PCIe), and the first copied back in before the next video:
  two transfers of one expert's per-device shard per video. The step program holds one expert;
  the plan records the transfer time (`host_to_device` in data/hardware.json) — it is not part of
  the per-step ranking.

TI2V-5B (one expert, `expand_timesteps`) is planned with its timestep per token (the modulation
tables become per-token activations, sharded over the sequence like the tokens).
"""

from __future__ import annotations

import json
import math
from importlib import resources
from typing import Any

from aoizora.errors import ArgumentError, ShapeError
from aoizora.models.wan.space.space import WanSpace
from aoizora.models.wan.transformer.config import VideoShape, WanConfig
from aoizora.models.wan.transformer.params import param_dtype, param_table
from aoizora.models.wan.transformer.sharding import abstract_params
from aoizora.models.wan.transformer.strategy import Strategy, logical_rules
from aoizora.models.wan.video.pipeline import WanPipelineConfig
from aoizora.models.wan.video.sampling import JitWithDefaults, make_denoise_step
from aoizora.workload import LoweringInputs

RESIDENCIES: tuple[str, ...] = ("both", "swap")
#: Transfers of one expert per video when swapping: the low-noise one in at the boundary, the
#: high-noise one back in before the next video starts.
SWAPS_PER_VIDEO = 2


def host_to_device_bandwidth(generation: str) -> tuple[float | None, str]:
    """(bytes/s one way per chip between its host and its HBM, source); None when unpublished."""
    table = json.loads(resources.files("aoizora").joinpath("data/hardware.json").read_text())
    entry = table.get("host_to_device", {}).get(generation)
    if not entry or entry.get("Bps") is None:
        return None, (entry or {}).get("source", f"no published host-to-device bandwidth for {generation}")
    return float(entry["Bps"]), entry["source"]


def expert_bytes_per_device(config: WanConfig, strategy: Strategy) -> int:
    """Bytes of one expert's parameters on the device holding the most of them under `strategy`."""
    rules = logical_rules(strategy)
    sizes = strategy.axis_sizes
    total = 0
    for spec in param_table(config):
        used: set[str] = set()
        local = []
        for n, name in zip(spec.shape, spec.axes, strict=True):
            axes = [a for a in (rules.get(name) or ()) if a not in used] if name else []
            used.update(axes)
            local.append(-(-n // math.prod(sizes[a] for a in axes)))
        total += math.prod(local) * _itemsize(param_dtype(spec, config))
    return total


def _itemsize(dtype: Any) -> int:
    import numpy as np

    return np.dtype(dtype).itemsize


class WanPipelineSpace(WanSpace):
    """A Wan 2.2 pipeline's strategy space (see the module docstring)."""

    def __init__(self, pipeline: WanPipelineConfig, video: VideoShape, *, residency: str = "both",
                 model_name: str = "wan", **kwargs: Any) -> None:
        if residency not in RESIDENCIES:
            raise ShapeError(f"unknown expert residency {residency!r}; choose one of {RESIDENCIES}")
        kwargs.setdefault("scheduler", pipeline.scheduler())
        kwargs.setdefault("guidance_scale", pipeline.guidance_scale)
        super().__init__(pipeline.transformer, video, model_name=model_name, **kwargs)
        self.pipeline = pipeline
        self.residency = residency if len(pipeline.experts) > 1 else "both"
        if self.program == "maxdiffusion" and self.residency == "swap":
            raise ArgumentError("MaxDiffusion's Wan 2.2 pipeline keeps both experts in HBM: plan program "
                                "'maxdiffusion' with expert residency 'both'")

    @property
    def resident_experts(self) -> tuple[WanConfig, ...]:
        """The experts whose weights the step program holds besides the running one."""
        if len(self.pipeline.experts) == 1 or self.residency == "swap":
            return ()
        return self.pipeline.experts[1:]

    def lowering_inputs(self, strategy: Strategy, mesh: Any) -> LoweringInputs:
        inp = super().lowering_inputs(strategy, mesh)  # the Wan step's arguments, as for Wan 2.1
        fn, args = inp.fn, inp.args
        if self.pipeline.expand_timesteps:
            step = make_denoise_step(self.config, self.scheduler, strategy, mesh, self.guidance_scale,
                                     expand_timesteps=True, videos=self.videos)
            assert isinstance(step, JitWithDefaults)  # a strategy's step: jitted with its shardings
            fn = step.jitted
        if not self.resident_experts:
            return LoweringInputs(fn, args, inp.kwargs, inp.jit_kwargs)
        others = tuple(abstract_params(cfg, strategy, mesh) for cfg in self.resident_experts)

        def step_with_resident_experts(*all_args: Any, **kwargs: Any) -> Any:
            return fn(*all_args[: len(args)], **kwargs)  # the other experts only occupy HBM

        return LoweringInputs(step_with_resident_experts, args + others, inp.kwargs,
                              {**inp.jit_kwargs, "keep_unused": True})

    def describe(self, strategy: Strategy) -> dict[str, Any]:
        out = super().describe(strategy)
        out["experts"] = len(self.pipeline.experts)
        if len(self.pipeline.experts) > 1:
            out["expert_residency"] = self.residency
            out["expert_bytes_per_device"] = expert_bytes_per_device(self.pipeline.experts[1], strategy)
        return out

    def workload(self) -> dict[str, Any]:
        out = super().workload()
        p = self.pipeline
        steps = p.expert_per_step(self.scheduler)
        out["model"]["in_channels"] = self.config.in_channels
        out["model"]["vae_stride"] = list(self.config.vae_stride)
        out["pipeline"] = {
            "experts": [
                {"name": name, "role": role, "steps": steps.count(i), "guidance_scale": p.guidance(i)}
                for i, (name, role) in enumerate(zip(
                    ("transformer", "transformer_2"),
                    ("high-noise", "low-noise") if len(p.experts) > 1 else ("only",), strict=False))
                if i < len(p.experts)
            ],
            "boundary_ratio": p.boundary_ratio,
            "boundary_timestep": p.boundary_timestep,
            "per_token_timesteps": p.expand_timesteps,
            "expert_residency": self.residency,
        }
        return out

    def expert_swap(self, strategy: Strategy, topology: Any) -> tuple[float | None, str]:
        return expert_swap(self, strategy, topology)

    def plan_details(self, strategy: Strategy, topology: Any) -> dict[str, Any]:
        """Both experts and their HBM on the chosen strategy; the swap's transfer time."""
        p = self.pipeline
        if len(p.experts) == 1:
            return {}
        per_device = expert_bytes_per_device(p.experts[1], strategy)  # the low-noise expert, `transformer_2`
        bw, source = host_to_device_bandwidth(topology.generation)
        swap_s = None if bw is None else per_device / bw
        hbm = topology.hardware.hbm_usable_bytes
        return {"experts": {
            "count": len(p.experts),
            "residency": self.residency,
            "both_resident": self.residency == "both",
            "expert_bytes_per_device": per_device,
            "both_experts_bytes_per_device": 2 * per_device,
            "hbm_usable_bytes": hbm,
            "host_to_device_Bps": bw,
            "host_to_device_source": source,
            "swap_seconds_per_transfer": swap_s,
            "swaps_per_video": SWAPS_PER_VIDEO if self.residency == "swap" else 0,
            "swap_seconds_per_video": (SWAPS_PER_VIDEO * swap_s if swap_s is not None else None)
            if self.residency == "swap" else 0.0,
        }}


def expert_swap(space: WanPipelineSpace, strategy: Strategy, topology: Any) -> tuple[float | None, str]:
    """(seconds per video, basis) of the expert swap under `strategy` (`plan_details`' numbers)."""
    if len(space.pipeline.experts) == 1:
        return 0.0, "one transformer: nothing to swap"
    if space.residency == "both":
        return 0.0, "both experts stay in HBM (as MaxDiffusion keeps them): nothing to swap"
    experts = space.plan_details(strategy, topology)["experts"]
    seconds = experts["swap_seconds_per_video"]
    gib = experts["expert_bytes_per_device"] / 2**30
    if seconds is None:
        return None, f"{SWAPS_PER_VIDEO} copies of {gib:.2f} GiB per chip; transfer time unknown " \
                     f"({experts['host_to_device_source']})"
    return seconds, (f"{SWAPS_PER_VIDEO} copies of {gib:.2f} GiB per chip from host memory at "
                     f"{experts['host_to_device_Bps'] / 1e9:.0f} GB/s ({experts['host_to_device_source']})")


def swap_estimate(space: WanPipelineSpace, topology: Any) -> str:
    """What swapping an expert would cost on this slice with the weights sharded the most any legal
    strategy shards them (every strategy keeps some expert bytes per chip; the fewest bound the swap)."""
    p = space.pipeline
    legal = [c.strategy for c in space.candidates(topology.num_devices) if c.legal]
    if len(p.experts) < 2 or not legal:
        return "no legal strategy to estimate an expert swap for"
    per_device = min(expert_bytes_per_device(p.experts[1], st) for st in legal)
    bw, source = host_to_device_bandwidth(topology.generation)
    gib = per_device / 2**30
    if bw is None:
        return f"with --expert-residency swap each swap copies {gib:.2f} GiB per chip; transfer time unknown ({source})"
    return (f"both experts do not fit resident; with --expert-residency swap each chip copies at least {gib:.2f} GiB "
            f"per swap at {bw / 1e9:.0f} GB/s: {per_device / bw:.2f} s, {SWAPS_PER_VIDEO * per_device / bw:.2f} s "
            "per video")
