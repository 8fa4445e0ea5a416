"""What Stage 2 compiles for a Wan strategy (`WanSpace.compiled_form`): under a limit the tile search
raised, the same strategy at the blocks fitted to libtpu's default scoped-VMEM limit, without the
raised limit; its splash calls are costed at the searched tile all the same."""

from __future__ import annotations

import dataclasses

from aoizora.hlo.program import OpaqueOp
from aoizora.hlo.shapes import Shape
from aoizora.models.registry import wan_space
from aoizora.models.wan.kernels.splash_tiles import fitted_splash_blocks
from aoizora.toolchain import SCOPED_VMEM_FLAG, CompilerFlags


def _candidate(space, key_prefix: str, num_devices: int = 8):
    return next(c.strategy for c in space.candidates(num_devices)
                if c.key == key_prefix or c.key.startswith(key_prefix + " |"))


def test_a_strategy_under_a_raised_limit_is_compiled_at_the_default_limit_with_fitted_blocks():
    space = wan_space("wan2.1-t2v-14b", "720p", 81, generation="v5e")
    strategy = _candidate(space, "fsdp=2,context=4 | weights=gathered | attn=allgather")
    assert strategy.scoped_vmem_kib is not None, "the tile search raised this strategy's limit"
    form = space.compiled_form(strategy)
    fitted = fitted_splash_blocks(strategy, space.video.tokens(space.config), space.batch, space.splash_max_block_q)
    assert form == dataclasses.replace(strategy, splash_blocks=fitted, scoped_vmem_kib=None)
    assert form.splash_blocks != strategy.splash_blocks
    assert space.compile_flags(form) == "" and space.mesh_spec(form) == space.mesh_spec(strategy)
    assert space.compiled_form(form) == form, "a strategy at the default limit is compiled as it is"


def test_under_a_limit_the_flags_fix_a_strategy_is_compiled_as_it_is():
    space = wan_space("wan2.1-t2v-14b", "720p", 81, generation="v5e")
    fixed = space.under_flags(CompilerFlags.parse(f"--{SCOPED_VMEM_FLAG}=32768"))
    strategy = _candidate(fixed, "fsdp=2,context=4 | weights=gathered | attn=allgather")
    assert strategy.scoped_vmem_kib == 32768 and fixed.compiled_form(strategy) is strategy


def test_a_space_without_fitted_blocks_compiles_every_strategy_as_it_is():
    space = wan_space("wan2.1-t2v-1.3b", "480p", 5, generation=None)
    strategy = dataclasses.replace(_candidate(space, "context=8 | weights=replicated | attn=allgather"),
                                   scoped_vmem_kib=65536)
    assert space.compiled_form(strategy) is strategy


def test_the_compiled_forms_splash_calls_are_costed_at_the_planned_tile():
    """The hook Stage 2 scores the compiled form's program with costs each splash call by the
    planned strategy's tile (its grid steps and K/V compute sub-blocks), not the compiled one's,
    though the form's blocks pad the queries to another length."""
    from aoizora.placement import enumerate_placements
    from aoizora.topology import get_topology

    space = wan_space("wan2.1-t2v-14b", "720p", 81, generation="v5e")
    strategy = _candidate(space, "fsdp=2,context=4 | weights=gathered | attn=allgather")
    form = space.compiled_form(strategy)
    topo = get_topology("v5e:2x4")
    mesh = enumerate_placements(topo, space.mesh_spec(form)).placements[0].jax_mesh(topo)
    space.compile_inputs(form, mesh)  # as Stage 2 lowers it: the mesh is the form's
    heads_len_dim = lambda shape: Shape("bf16", (1, shape[2], shape[1], shape[3]))  # noqa: E731
    for i, kernel in enumerate(_costs(space, form, mesh)):  # the calls as the form's program has them
        q = heads_len_dim(kernel.q_shape)
        op = OpaqueOp(name=f"{kernel.hlo_name}.{i}", target="tpu_custom_call",
                      operand_shapes=(q, heads_len_dim(kernel.kv_shape)), result_shape=q, backend_config=None,
                      kernel_name=kernel.hlo_name)
        planned, compiled = space.compiled_kernel_cost(strategy, op), space.compiled_kernel_cost(form, op)
        assert planned is not None and compiled is not None
        assert planned.kernel != compiled.kernel, "the tiles differ, so do the calls' costs"
        assert planned.kernel == _costed(space, strategy, mesh, i)


def test_a_strategy_compiled_at_its_own_tile_has_its_calls_costed_as_its_own():
    """`aoizora measure` compiles a strategy at its searched tile and limit, not its compiled form:
    its program's calls (padded to the searched blocks) are found among its own records when the
    hook is told so, and missed among the form's."""
    from aoizora.placement import enumerate_placements
    from aoizora.topology import get_topology

    space = wan_space("wan2.1-t2v-14b", "720p", 81, generation="v5e")
    strategy = _candidate(space, "fsdp=2,context=4 | weights=gathered | attn=allgather")
    topo = get_topology("v5e:2x4")
    mesh = enumerate_placements(topo, space.mesh_spec(strategy)).placements[0].jax_mesh(topo)
    space.compile_inputs(strategy, mesh)
    heads_len_dim = lambda shape: Shape("bf16", (1, shape[2], shape[1], shape[3]))  # noqa: E731
    kernels = _costs(space, strategy, mesh)
    self_calls = 0
    for i, kernel in enumerate(kernels):
        q = heads_len_dim(kernel.q_shape)
        op = OpaqueOp(name=f"{kernel.hlo_name}.{i}", target="tpu_custom_call",
                      operand_shapes=(q, heads_len_dim(kernel.kv_shape)), result_shape=q, backend_config=None,
                      kernel_name=kernel.hlo_name)
        own = space.compiled_kernel_cost(strategy, op, compiled=strategy)
        assert own is not None and own.kernel == _costed(space, strategy, mesh, i)
        if kernel.q_shape[1] == 18944:  # the self-attention calls, their queries padded to 4736 blocks
            self_calls += 1
            assert space.compiled_kernel_cost(strategy, op) is None, "not a call of the compiled form's program"
    assert self_calls


def _costs(space, strategy, mesh):
    from aoizora.models.wan.video.sampling import opaque_kernel_costs

    return opaque_kernel_costs(space.config, space.video, strategy, mesh, space.batch)


def _costed(space, strategy, mesh, i):
    from aoizora.models.wan.space.costs import splash_opaque_cost

    kc = _costs(space, strategy, mesh)[i]
    return splash_opaque_cost(kc.flops, kc.bytes_accessed, kc.q_shape[3], kc.grid_steps, strategy.kernel_profile,
                              kc.compute_blocks_per_step, kc.kv_stream_bytes).kernel
