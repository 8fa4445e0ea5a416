"""Which strategies a Wan space holds, which of them are legal, and the deployments it compares.

Every assignment of the device count to the mesh axes data/fsdp/context/tensor, times the
self-attention variants (allgather, ulysses, ring, ulysses_ring) and the weight modes of
`aoizora.models.wan.transformer.strategy`. 2D context attention (ulysses_ring) comes with every split of
context into Ulysses U × ring R with both at least 2 (`context_splits`: U = 1 is ring and
U = context is Ulysses, the same program); the Ulysses variants come with 1, 2 or 4 head-group
chunks (`ULYSSES_CHUNK_CHOICES`) where the heads each device attends to divide evenly, and the
ring variants with each form of their K/V rotation the space plans (`WanSpace.ring_layouts`:
which one overlaps its rotation better depends on the compiler's schedule for the slice). Each
strategy carries the tiles the space fits to it (`aoizora.models.wan.space.tiles`).

Legality is the model's own `check_strategy`; on top, variants that the model runs identically
are rejected as duplicates (with context = 1 every attention variant is plain local attention,
see `attention.self_attention`). The deployments compared are MaxDiffusion's documented ones for
the slice's generation (`aoizora.models.wan.kernels.experts`), and the user's own when given.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aoizora.models.wan.kernels.experts import legal_expert_strategies
from aoizora.models.wan.space.tiles import as_compiled, with_blocks
from aoizora.models.wan.transformer.kernel_profiles import KERNEL_PROFILES
from aoizora.models.wan.transformer.strategy import MESH_AXES, RING_LAYOUTS, Strategy, check_strategy, context_splits
from aoizora.workload import Candidate, ExpertDeployment, axis_assignments

if TYPE_CHECKING:
    from aoizora.models.wan.space.fields import WanSpaceFields
    from aoizora.topology import Topology


def candidates(space: WanSpaceFields, num_devices: int) -> list[Candidate[Strategy]]:
    """Every strategy of the space on `num_devices`, with the reasons of the illegal ones."""
    out = []
    for sizes in axis_assignments(num_devices, MESH_AXES):
        for attention in space.attentions:
            chunk_choices = space.ulysses_chunks if attention in ("ulysses", "ulysses_ring") else (1,)
            layouts = space.ring_layouts if attention in ("ring", "ulysses_ring") else RING_LAYOUTS[:1]
            for uly in context_splits(sizes["context"], attention):
                for chunks in chunk_choices:
                    for weights in space.weights:
                        for layout in layouts:
                            st = with_blocks(space, Strategy(
                                **sizes, attention=attention, weights=weights,  # type: ignore[arg-type]
                                kernel=space.kernel, context_ulysses=uly, ulysses_chunks=chunks,  # type: ignore[arg-type]
                                weight_tile=space.weight_tile if weights == "replicated" else None,
                                kernel_profile=space.kernel_profile, ring_layout=layout))
                            out.append(Candidate(st.key(), st, tuple(reasons(space, st, num_devices))))
    return out


def reasons(space: WanSpaceFields, st: Strategy, num_devices: int) -> list[str]:
    """Why `st` is not one of the space's strategies: illegal for the model, or a duplicate."""
    out = check_strategy(st, space.config, space.video, space.batch, num_devices)
    if st.fsdp > 1 and not st.shards_embed:
        out.append(f"fsdp > 1 with weights={st.weights} (embed not sharded) is data parallelism (duplicate)")
    if st.context == 1 and st.attention != space.attentions[0]:
        out.append(f"attention={st.attention} with context=1 runs as {space.attentions[0]} (duplicate)")
    profile = KERNEL_PROFILES[st.kernel_profile]
    if st.context > 1 and st.attention not in profile.variants:
        out.append(f"the {profile.name} kernel is deployed with {' and '.join(profile.variants)} attention only")
    if st.ulysses_chunks > 1 and st.ulysses_axis is not None and st.ulysses_axis[1] == 1:
        out.append(f"ulysses_chunks={st.ulysses_chunks} without an all-to-all has nothing to overlap (duplicate)")
    if st.ring_layout != RING_LAYOUTS[0]:
        if st.context == 1:
            out.append(f"ring_layout={st.ring_layout} with context=1 has no ring (duplicate)")
        elif space.program == "maxdiffusion":
            out.append(f"ring_layout={st.ring_layout} is a form of aoizora's program; MaxDiffusion's program "
                       "rotates K/V in its own kernel's form (duplicate)")
        elif space.kernel == "xla":
            out.append(f"ring_layout={st.ring_layout} lays K/V out for the splash kernel; the xla kernel runs "
                       "the sequence-major ring (duplicate)")
    return out


def expert_strategy(space: WanSpaceFields, num_devices: int) -> Strategy | None:
    """MaxDiffusion's generation-agnostic Wan deployment (its README's command): CFG on
    data=2, the rest on context, K/V all-gathered, weights' embed dimension sharded over
    context and gathered per layer, the command's splash block sizes."""
    rows = legal_expert_strategies(space.config, space.video, "", num_devices, space.batch, space.kernel)
    return rows[0][1] if rows else None


def expert_deployments(space: WanSpaceFields, topology: Topology) -> list[ExpertDeployment[Strategy]]:
    """The deployments MaxDiffusion documents for the slice's generation (`wan_experts`), then the
    user's own, each as aoizora compiles it (`tiles.as_compiled`)."""
    rows = legal_expert_strategies(space.config, space.video, topology.generation, topology.num_devices,
                                   space.batch, space.kernel, space.kernel_profile)
    deployments = [ExpertDeployment(e.name, st, e.libtpu_args, e.source, e.documented) for e, st in rows]
    if space.user_deployment is not None:
        deployments.append(space.user_deployment)
    return [as_compiled(space, d) for d in deployments]
