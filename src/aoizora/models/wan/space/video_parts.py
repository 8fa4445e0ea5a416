"""A Wan space's parts of the video besides the step: the VAE decode it compiles beside Stage 2, and
the plan's `video_time` assembled from the chosen step, the decode's cost, the expert swap and the
text encoding (`aoizora.models.wan.video.video_time` owns the arithmetic)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from aoizora.models.wan.text_encoder.cost import text_encode_cost
from aoizora.models.wan.vae.program import VAE_DECODE, decode_program
from aoizora.models.wan.vae.sharding import latent_shape
from aoizora.models.wan.video.video_time import VideoTime, decode_part
from aoizora.workload import CompanionProgram

if TYPE_CHECKING:
    from aoizora.models.wan.space.fields import WanSpaceFields
    from aoizora.models.wan.transformer.strategy import Strategy
    from aoizora.topology import Topology


def decode_latent(space: WanSpaceFields) -> tuple[int, ...]:
    """The latent the VAE decodes after the last step: the space's videos (the CFG pair is one video)."""
    assert space.vae is not None
    v = space.video
    return latent_shape(v.height, v.width, v.frames, space.videos, space.vae)


def companion_programs(space: WanSpaceFields, topology: Topology) -> list[CompanionProgram]:
    if space.vae is None:
        return []
    return [decode_program(topology, decode_latent(space), space.vae)]


def video_time(space: WanSpaceFields, strategy: Strategy, topology: Topology, step_seconds: float,
               companions: dict[str, dict[str, Any]]) -> VideoTime:
    swap, swap_basis = space.expert_swap(strategy, topology)
    decode, decode_basis = decode_part(companions.get(VAE_DECODE))
    return VideoTime(videos=space.videos, text_encode=text_encode_cost(space.videos),
                     steps=space.scheduler.num_steps, step_seconds=step_seconds, expert_swap_seconds=swap,
                     expert_swap_basis=swap_basis, vae_decode_seconds=decode, vae_decode_basis=decode_basis)


def video_time_json(space: WanSpaceFields, strategy: Strategy, topology: Topology, step_seconds: float,
                    companions: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """The plan's `video_time` section: `VideoTime.to_json()`, the decode's whole cost beside its seconds."""
    out = video_time(space, strategy, topology, step_seconds, companions).to_json()
    cost = companions.get(VAE_DECODE)
    if cost is not None:
        out["vae_decode"]["cost"] = cost
    return out
