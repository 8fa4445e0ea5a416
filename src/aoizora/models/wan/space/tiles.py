"""The tiles a Wan space gives its strategies, and the compiler flags chosen with them.

Given the slice's generation, every strategy runs splash blocks fitted to its local lengths and
to that generation's VMEM (`aoizora.models.wan.kernels.splash_tiles`): JAX's splash at the tile and
scoped-VMEM limit the tile search finds fastest, compiled with that limit (`compile_flags`);
without a generation, each call takes the kernel's own pick. On a generation whose matmuls want
16-bit weights in another tile than the runtime's (TPU7x), every strategy with replicated weights
hands its stacked weights over in that tile (`Strategy.weight_tile`), so libtpu does not copy
them (sharded stacks cannot be handed over so: libtpu overrides their tile); the expert
deployments keep the runtime's layout, as deployed.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any, TypeVar

import jax.numpy as jnp

from aoizora.errors import StrategyError
from aoizora.models.wan.kernels.custom_tiles import published_steps
from aoizora.models.wan.kernels.splash_tiles import fitted_splash_blocks, ring_fitted_blocks, searched_splash_tile
from aoizora.models.wan.transformer.kernel_profiles import DEFAULT_KERNEL_PROFILE
from aoizora.models.wan.transformer.strategy import Strategy
from aoizora.toolchain import SCOPED_VMEM_FLAG, CompilerFlags
from aoizora.topology import RUNTIME_TILE_16BIT, hardware_profile
from aoizora.workload import ExpertDeployment

if TYPE_CHECKING:
    from aoizora.models.wan.space.fields import WanSpaceFields
    from aoizora.models.wan.transformer.config import WanConfig

#: a space given to `under_flags`, and the copy it returns (a `WanSpace` or a subclass)
Space = TypeVar("Space", bound="WanSpaceFields")


def splash_max_block_q(generation: str | None) -> dict[int, int]:
    """The largest splash block_q per call the generation's VMEM takes (empty: no blocks fitted,
    for no generation or one whose limit was not measured)."""
    return hardware_profile(generation).splash_max_block_q if generation else {}


def replicated_weight_tile(generation: str | None, config: WanConfig) -> tuple[int, int] | None:
    """The tile replicated 16-bit stacked weights are handed over in, where the generation's
    matmuls want another than the runtime's (None: the runtime's)."""
    tile = hardware_profile(generation).tile_16bit if generation else RUNTIME_TILE_16BIT
    return tile if tile != RUNTIME_TILE_16BIT and jnp.dtype(config.dtype).itemsize == 2 else None


def with_blocks(space: WanSpaceFields, st: Strategy) -> Strategy:
    """The strategy with splash blocks fitted to it, when the space fits blocks and it runs splash:
    JAX's splash (whose cost depends on them) with the tile and scoped-VMEM limit the search finds
    fastest (`blocks.searched_splash_tile`), another kernel (costed by a tile-independent profile)
    with the blocks fitted at libtpu's default limit. Where the export runs MaxDiffusion's ring
    kernel (ring and 2D context), the tile is one that kernel's VMEM rule admits too."""
    if not space.splash_max_block_q or st.kernel == "xla":
        return st
    tokens = space.video.tokens(space.config)
    if st.kernel_profile == DEFAULT_KERNEL_PROFILE and space.generation is not None:
        found = searched_splash_tile(st, tokens, space.batch, space.generation, fixed_limit_kib=space.scoped_vmem_kib)
        if found is not None:
            blocks, limit = found
            return dataclasses.replace(st, splash_blocks=blocks, scoped_vmem_kib=limit)
    hw = hardware_profile(space.generation) if space.generation is not None else None
    fitted = ring_fitted_blocks(st, tokens, space.batch, space.splash_max_block_q, hw)
    return dataclasses.replace(st, splash_blocks=fitted) if fitted is not None else st


def check_fixed_limit(limit_kib: Any) -> int | None:
    """A space's fixed scoped-VMEM limit (KiB) as given, or StrategyError."""
    if limit_kib is not None and (isinstance(limit_kib, bool) or not isinstance(limit_kib, int) or limit_kib < 1):
        raise StrategyError(f"scoped_vmem_kib must be a positive number of KiB or None, not {limit_kib!r}")
    return limit_kib


def fixed_limit(flags: CompilerFlags) -> int | None:
    """The scoped-VMEM limit (KiB) `flags` set (`SCOPED_VMEM_FLAG`), or None; StrategyError for a
    value that is not a positive whole number of KiB."""
    value = dict(flags.items).get(SCOPED_VMEM_FLAG)
    if value is None:
        return None
    try:
        limit = int(value)
    except ValueError:
        limit = 0
    if limit < 1:
        raise StrategyError(f"--{SCOPED_VMEM_FLAG}={value} in the compiler flags is not a positive number of KiB; "
                            "give one (e.g. 65536) or leave the flag out to let the planner choose the limit")
    return limit


def under_flags(space: Space, flags: CompilerFlags) -> Space:
    """The space as planned under the plan's compiler flags: where they set the scoped-VMEM limit,
    a copy whose tiles are searched at that limit alone (the flags given to a plan win over a
    strategy's own, so a tile chosen for another limit would be compiled under this one)."""
    limit = fixed_limit(flags)
    if limit is None or limit == space.scoped_vmem_kib:
        return space  # flags without the limit leave a space's own (fixed or searched) as it is
    fixed = copy.copy(space)
    fixed.__dict__.update(space.__getstate__())  # its own per-process caches: its strategies differ
    fixed.scoped_vmem_kib = limit
    return fixed


def compile_flags(strategy: Strategy) -> str:
    """The scoped-VMEM limit its tile was chosen with, as a libtpu flag ("" for libtpu's default)."""
    if strategy.scoped_vmem_kib is None:
        return ""
    return f"--{SCOPED_VMEM_FLAG}={strategy.scoped_vmem_kib}"


def compiled_form(space: WanSpaceFields, strategy: Strategy) -> Strategy:
    """What Stage 2 compiles to cost a strategy: under a limit the tile search raised, the same
    strategy with the blocks fitted at libtpu's default limit, at that limit. The raised limit
    makes libtpu's back end several times slower (`benchmarks/compile_matrix.py`) and changes
    neither the collectives nor the memory; the splash calls are costed at the searched tile by
    the kernel's model (`costs.compiled_kernel_cost`), and the other fusions at libtpu's
    estimates for the default limit: what the raised limit does to those is left out, on every
    generation (not yet measured on a chip per fusion kind). The strategy itself at the default limit, under a limit the
    plan's flags fix (every compile runs at it), and where the space fits no blocks, or compiles
    MaxDiffusion's program (whose calls are costed at the blocks its compile records)."""
    if (strategy.scoped_vmem_kib is None or not space.splash_max_block_q or space.scoped_vmem_kib is not None
            or space.program == "maxdiffusion"):
        return strategy
    blocks = fitted_splash_blocks(strategy, space.video.tokens(space.config), space.batch, space.splash_max_block_q)
    if blocks is None:
        return strategy
    return dataclasses.replace(strategy, splash_blocks=blocks, scoped_vmem_kib=None)


def as_compiled(space: WanSpaceFields, deployment: ExpertDeployment[Strategy]) -> ExpertDeployment[Strategy]:
    """A deployment of another kernel than JAX's splash as aoizora compiles it: its kernel is
    costed by its profile, which does not depend on the tile, and the program is compiled with
    JAX's splash at blocks that kernel accepts (its own tile may need the other kernel)."""
    st = deployment.strategy
    if st.kernel_profile == DEFAULT_KERNEL_PROFILE or st.splash_blocks is None:
        return deployment
    fitted = with_blocks(space, dataclasses.replace(st, splash_blocks=None))
    compiled = fitted.splash_blocks.describe() if fitted.splash_blocks else "its own blocks"
    note = (f"; runs {st.kernel_profile} at {st.splash_blocks.describe()}, compiled here with JAX's splash at "
            f"{compiled}")
    line = (f"tile {st.splash_blocks.describe()} ({st.kernel_profile}) is not compiled as written: aoizora "
            f"compiles JAX's splash kernel, here at {compiled}; the {st.kernel_profile} profile costs the "
            f"attention at {st.splash_blocks.describe()} (the profile does not depend on the tile)")
    steps = published_steps(st, space.video.tokens(space.config), space.generation)
    if steps:
        line += ("; published steps of this kernel at these lengths: "
                 + ", ".join(f"{m.blocks.describe()} {m.step_seconds} s/step" for m in steps)
                 + f" ({steps[0].source.split(' (')[0]})")
    return dataclasses.replace(deployment, strategy=fitted, documented=deployment.documented + note,
                               notes=(line, *deployment.notes))
