"""What the modules of a Wan space's concerns read of the space (`WanSpaceFields`).

`WanSpace` (`aoizora.models.wan.space.space`) answers the `StrategySpace` protocol from one module per
concern (`enumeration`, `tiles`, `lowering`, `costs`, `plan_file`, `video_parts`) and MaxDiffusion's
step (`aoizora.models.maxdiffusion.program`). Those modules take the space as this protocol, not as
the class that imports them: `WanSpace` and its subclasses are what they are given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from jax.sharding import Mesh

    from aoizora.models.wan.transformer.attention import KernelCost
    from aoizora.models.wan.transformer.config import VideoShape, WanConfig
    from aoizora.models.wan.transformer.strategy import Strategy
    from aoizora.models.wan.vae.config import WanVAEConfig
    from aoizora.topology import Topology
    from aoizora.workload import ExpertDeployment


class ProgramSource(Protocol):
    """The program Stage 2 compiles when it is not aoizora's step (MaxDiffusion's), as the plan records it."""

    def to_json(self, generation: str | None = None) -> dict[str, Any]: ...


class WanSpaceFields(Protocol):
    """A Wan space's fields (`WanSpace.__init__` says each) and the two methods its concerns call."""

    name: str
    config: WanConfig
    video: VideoShape
    batch: int
    videos: int
    attentions: tuple[str, ...]
    weights: tuple[str, ...]
    kernel: str
    ulysses_chunks: tuple[int, ...]
    ring_layouts: tuple[str, ...]
    generation: str | None
    splash_max_block_q: dict[int, int]
    weight_tile: tuple[int, int] | None
    scoped_vmem_kib: int | None
    scheduler: Any
    guidance_scale: float
    user_deployment: ExpertDeployment[Strategy] | None
    kernel_profile: str
    program: str
    vae: WanVAEConfig | None
    _meshes: dict[Strategy, Mesh]
    _kernel_costs: dict[Strategy, list[KernelCost]]

    @property
    def program_source(self) -> ProgramSource | None: ...

    def __getstate__(self) -> dict[str, Any]: ...

    def expert_swap(self, strategy: Strategy, topology: Topology) -> tuple[float | None, str]: ...
