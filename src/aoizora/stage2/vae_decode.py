"""The predicted time of a Wan video's VAE decode on a slice: the decode sharded as MaxDiffusion shards
it (`aoizora.models.wan.vae.sharding`: its own (1, devices) mesh, the width over `vae_spatial`),
lowered from abstract inputs, compiled by libtpu for the described slice (through the compile cache,
as Stage 2's step compiles are: `aoizora.stage2.companions`, which a plan compiles it with too) and
costed by Q2 over the mesh's placement, libtpu's default device order, as one step's program is
costed."""

from __future__ import annotations

import dataclasses
from typing import Any

from aoizora.models.wan.vae.config import WAN21_VAE, WanVAEConfig, decode_shapes
from aoizora.models.wan.vae.program import VaeDecodeSpace, decode_program
from aoizora.models.wan.vae.sharding import latent_shape
from aoizora.stage2.companions import compile_companion, program_cost
from aoizora.stage2.compile_cache import CompileCache
from aoizora.toolchain import CompilerFlags
from aoizora.topology import Topology


@dataclasses.dataclass(frozen=True)
class VaeDecodeCost:
    """One decode's predicted time on a slice, as Q2 gives it, and what its compile took.

    `seconds` is Q2's time of the whole decode program (every latent frame, the scan's trip count
    included); `compute_seconds` the fusions' libtpu-estimated time, `exposed_comm_seconds` the
    collectives' time not hidden behind compute, `comm_seconds` the collectives' total.
    `memory_bytes` is the per-device HBM libtpu reports (arguments, outputs, temporaries, code),
    None when it does not. `sim_seconds` is the reference simulator's time of the same program on the
    same placement (None when not asked for). `compile_seconds` is the compile's wall time (on a
    cache hit, `cached`, the time the cached compile took)."""

    topology: str
    latent: tuple[int, ...]
    video: tuple[int, ...]
    mesh: tuple[int, ...]
    seconds: float
    compute_seconds: float
    exposed_comm_seconds: float
    comm_seconds: float
    sim_seconds: float | None
    collectives: int
    memory_bytes: int | None
    compile_seconds: float
    cached: bool

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def vae_decode_cost(topology: Topology, latent: tuple[int, ...], *, config: WanVAEConfig | None = None,
                    flags: CompilerFlags | None = None, cache: CompileCache | None = None,
                    vae_spatial: int = -1, simulated: bool = True) -> VaeDecodeCost:
    """Compile the decode of a latent of shape `latent` (batch, z_dim, T, h, w) for `topology` with
    `flags` (in a compile process of its own), sharded as MaxDiffusion shards it, and cost it with
    Q2. `config` defaults to Wan 2.1's VAE in MaxDiffusion's dtype (float32 compute, bfloat16
    weights). With `simulated`, the simulator runs the program too, as Stage 2 simulates a step."""
    program = decode_program(topology, latent, config, vae_spatial)
    assert isinstance(program.space, VaeDecodeSpace)
    compiled = compile_companion(program, topology, None, cache, flags, None)
    cost = program_cost(compiled, topology, program.placement, simulated)
    return VaeDecodeCost(
        topology=topology.name, latent=tuple(latent), video=decode_shapes(program.space.config, latent).video,
        mesh=cost.mesh, seconds=cost.seconds, compute_seconds=cost.compute_seconds,
        exposed_comm_seconds=cost.exposed_comm_seconds, comm_seconds=cost.comm_seconds, sim_seconds=cost.sim_seconds,
        collectives=cost.collectives, memory_bytes=cost.memory_bytes, compile_seconds=cost.compile_seconds,
        cached=cost.cached,
    )


def video_decode_cost(topology: Topology, height: int, width: int, frames: int, batch: int = 1,
                      **kwargs: Any) -> VaeDecodeCost:
    """`vae_decode_cost` of the latent of a `frames`-frame height × width video (Wan 2.1's VAE unless
    `config=` says otherwise)."""
    config = kwargs.get("config") or WAN21_VAE
    return vae_decode_cost(topology, latent_shape(height, width, frames, batch, config), **kwargs)
