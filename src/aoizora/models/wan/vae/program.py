"""The Wan VAE decode as a program a plan compiles beside the step (`CompanionProgram`).

The decode depends only on the VAE, the latent's shape and the slice's device count, never on the
step's strategy: a plan compiles it once per such key, through the compile cache, in the compile
processes Stage 2 uses. `VaeDecodeSpace` lowers it as `aoizora.models.wan.vae.sharding` shards it
(MaxDiffusion's own (1, devices) mesh); `decode_program` names it for a plan.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from aoizora.errors import StrategyError
from aoizora.models.wan.vae.config import WAN21_VAE, WanVAEConfig
from aoizora.models.wan.vae.sharding import COMPUTE_DTYPE, sharded_decode, vae_mesh_spec
from aoizora.placement import MeshSpec, jax_default_placement
from aoizora.workload import Candidate, CompanionProgram, LoweringInputs, StrategySpace

if TYPE_CHECKING:
    from jax.sharding import Mesh

    from aoizora.topology import Topology

#: The name of the decode among a plan's companion programs.
VAE_DECODE = "vae_decode"


@dataclasses.dataclass(frozen=True)
class DecodeShape:
    """What a decode program is compiled for: the latent (batch, z_dim, T, h, w), the slice's device
    count and MaxDiffusion's `vae_spatial` (-1: all devices)."""

    latent: tuple[int, ...]
    devices: int
    vae_spatial: int = -1


class VaeDecodeSpace(StrategySpace[DecodeShape]):
    """The decode of one VAE (`config`, computing in MaxDiffusion's float32 by default) as a space
    with one program per `DecodeShape`: no strategies to enumerate, one mesh, one lowering."""

    name = "wan-vae-decode"

    def __init__(self, config: WanVAEConfig | None = None) -> None:
        self.config = config or WAN21_VAE.replace(dtype=COMPUTE_DTYPE)

    def candidates(self, num_devices: int) -> list[Candidate[DecodeShape]]:
        raise StrategyError("the VAE decode has no strategies to plan: MaxDiffusion fixes its mesh")

    def mesh_spec(self, strategy: DecodeShape) -> MeshSpec:
        return vae_mesh_spec(strategy.devices, strategy.vae_spatial)

    def lowering_inputs(self, strategy: DecodeShape, mesh: Mesh) -> LoweringInputs:
        decode = sharded_decode(self.config, strategy.latent, mesh)
        # the function itself, jitted by `LoweringInputs.lower` as `sharded_decode` jits it: the
        # same lowered text, so the same compile-cache entry as `aoizora.stage2.vae_decode`'s
        return LoweringInputs(decode.fn.__wrapped__, decode.inputs)

    def workload(self) -> dict[str, Any]:
        return {"name": self.name, "shapes": {}}


def decode_program(topology: Topology, latent: tuple[int, ...], config: WanVAEConfig | None = None,
                   vae_spatial: int = -1) -> CompanionProgram:
    """The decode of a latent of shape `latent` on `topology`, over JAX's default device order for
    its (1, devices) mesh (the order MaxDiffusion's flattened transformer mesh gives its VAE mesh)."""
    shape = DecodeShape(tuple(latent), topology.num_devices, vae_spatial)
    space = VaeDecodeSpace(config)
    placement = jax_default_placement(topology, space.mesh_spec(shape))
    return CompanionProgram(VAE_DECODE, f"vae decode {tuple(latent)} / {topology.name}", space, shape, placement)
