"""The predicted time of a Wan video's VAE decode on a slice: the decode sharded as MaxDiffusion shards
it (`aoizora.models.wan.vae_sharding`: its own (1, devices) mesh, the width over `vae_spatial`),
lowered from abstract inputs, compiled by libtpu for the described slice (through the compile cache,
as Stage 2's step compiles are) and costed by Q2 over the mesh's placement, libtpu's default device
order, as one step's program is costed."""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from aoizora.cost import CostModel
from aoizora.hlo.builder import build_program
from aoizora.models.wan.vae_config import WAN21_VAE, WanVAEConfig, decode_shapes
from aoizora.models.wan.vae_sharding import COMPUTE_DTYPE, latent_shape, sharded_decode, vae_mesh_spec
from aoizora.placement import Placement, jax_default_placement
from aoizora.sim import simulate
from aoizora.stage2.compile_cache import CompileCache, CompileRecord
from aoizora.stage2.compile_workers import device_ids_of, memory_bytes
from aoizora.toolchain import CompilerFlags, compile_lowered, toolchain_versions
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
    lower_seconds: float
    compile_seconds: float
    cached: bool

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def vae_placement(topology: Topology, vae_spatial: int = -1) -> Placement:
    """The VAE mesh's placement: JAX's default device order (`mesh_utils`) for (1, devices), which is
    the order MaxDiffusion's flattened transformer mesh gives its VAE mesh."""
    return jax_default_placement(topology, vae_mesh_spec(topology.num_devices, vae_spatial))


def vae_decode_cost(topology: Topology, latent: tuple[int, ...], *, config: WanVAEConfig | None = None,
                    flags: CompilerFlags | None = None, cache: CompileCache | None = None,
                    vae_spatial: int = -1, simulated: bool = True) -> VaeDecodeCost:
    """Compile the decode of a latent of shape `latent` (batch, z_dim, T, h, w) for `topology` with
    `flags`, sharded as MaxDiffusion shards it, and cost it with Q2. `config` defaults to Wan 2.1's VAE
    in MaxDiffusion's dtype (float32 compute, bfloat16 weights). With `simulated`, the simulator
    runs the program too, as Stage 2 simulates a step."""
    config = config or WAN21_VAE.replace(dtype=COMPUTE_DTYPE)
    placement = vae_placement(topology, vae_spatial)
    mesh = placement.jax_mesh(topology)
    t0 = time.perf_counter()
    decode = sharded_decode(config, latent, mesh)
    lowered = decode.fn.lower(*decode.inputs)
    lower_s = time.perf_counter() - t0
    text = lowered.as_text()
    key = record = None
    if cache is not None:
        key = cache.key(text, topology.name, [d.id for d in mesh.devices.flat], toolchain_versions(), flags)
        record = cache.get(key)
    cached = record is not None and record.hlo_text is not None
    if record is None or record.hlo_text is None:
        t1 = time.perf_counter()
        compiled = compile_lowered(lowered, flags)
        record = CompileRecord(compiled.as_text(), device_ids_of(compiled), memory_bytes(compiled),
                               time.perf_counter() - t1, label=f"vae decode {latent} / {topology.name}")
        if cache is not None and key is not None:
            cache.put(key, record)
    assert record.hlo_text is not None
    program = build_program(record.hlo_text, device_ids=record.device_ids)
    q2 = CostModel(topology).evaluate(program, placement)
    sim = simulate(program, topology, placement).step_seconds if simulated else None
    return VaeDecodeCost(
        topology=topology.name, latent=tuple(latent), video=decode_shapes(config, latent).video,
        mesh=placement.mesh.shape, seconds=q2.step_seconds, compute_seconds=q2.compute_seconds,
        exposed_comm_seconds=q2.exposed_comm_seconds, comm_seconds=q2.comm_seconds, sim_seconds=sim,
        collectives=sum(c.multiplicity for c in program.collectives), memory_bytes=record.memory_bytes,
        lower_seconds=lower_s, compile_seconds=record.compile_seconds, cached=cached,
    )


def video_decode_cost(topology: Topology, height: int, width: int, frames: int, batch: int = 1,
                      **kwargs: Any) -> VaeDecodeCost:
    """`vae_decode_cost` of the latent of a `frames`-frame height × width video (Wan 2.1's VAE unless
    `config=` says otherwise)."""
    config = kwargs.get("config") or WAN21_VAE
    return vae_decode_cost(topology, latent_shape(height, width, frames, batch, config), **kwargs)
