"""What every hardware reference entry is made of, and how one is predicted.

An entry is a published measurement on a TPU together with the setup as published. The runner
builds the same JAX program, compiles it with libtpu for the same slice and device order
(compile-only devices, through the shared compile cache), parses the compiled HLO with
`aoizora.hlo`, and predicts it with Q2 (`aoizora.cost`) and the reference simulator
(`aoizora.sim`).

Two kinds of entries:

* `TimedEntry`: one configuration, one measured time per call;
* `ComparisonEntry`: several configurations of one program whose measured figures are compared
  with each other (which is faster, by how much); each configuration is a `Config`.

A module of `benchmarks/hardware/` contributes entries through `entries() -> list[Entry]`; the
runner (`run.py`) imports every module listed in `MODULES` there. An end-to-end entry (a whole
Wan step, say) is one more module whose `Config.build` returns the jitted step and its inputs.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aoizora.errors import AoizoraError

Build = Callable[[Any], tuple[Callable[..., Any], tuple[Any, ...]]]
"""Given a `jax.sharding.Mesh`, the jitted function and its abstract inputs (ShapeDtypeStructs)."""


#: What an entry's figures were used for: nothing (held out), or fitting a constant of the model it checks.
HELD_OUT, IN_SAMPLE = "held out", "in-sample"


@dataclass(frozen=True)
class Source:
    """Where a published figure comes from: repository + path + commit, or a URL."""

    repository: str | None = None
    path: str | None = None
    commit: str | None = None
    url: str | None = None
    where: str = ""  # the place in the text (section, table, comment)

    def cite(self) -> str:
        parts = []
        if self.repository:
            parts.append(f"{self.repository}/{self.path}@{self.commit}" if self.path else self.repository)
        if self.url:
            parts.append(self.url)
        if self.where:
            parts.append(self.where)
        return " ; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"repository": self.repository, "path": self.path, "commit": self.commit, "url": self.url,
                "where": self.where}


@dataclass(frozen=True)
class Config:
    """One program on one slice with one device order.

    topology: slice name as aoizora and libtpu take it (e.g. ``v5e:4x8``).
    mesh: ordered (axis name, size) pairs, as the source built its mesh.
    order: ``"jax-default"`` (what `jax.make_mesh` / `mesh_utils.create_device_mesh` return) or a
        callable turning the default device-id array into the source's order.
    build: the program (see `Build`).
    flags: the compiler flags the source ran with (its LIBTPU_INIT_ARGS, in that syntax); the entry
        is compiled with them, as per-compile options (`aoizora.toolchain.CompilerFlags`).
    """

    name: str
    topology: str
    mesh: tuple[tuple[str, int], ...]
    build: Build
    order: str | Callable[[np.ndarray], np.ndarray] = "jax-default"
    setup: str = ""  # the setup as published, for the table and the JSON
    flags: str = ""
    #: costs the program's opaque kernels (e.g. the Wan model's splash calls), as Stage 2 does
    opaque_cost: Callable[[Any], Any] | None = None
    #: the attention kernel profile that costs those kernels (`aoizora.models.wan.transformer.kernel_profiles`), if any
    kernel_profile: str = ""
    #: (strategy space, strategy) of a config that lowers a strategy (`strategy_space_config`)
    workload: tuple[Any, Any] | None = None
    #: the source's own program as the run ran it, where it can be compiled: (repository, commit,
    #: the run's settings beyond the strategy's as (key, value) pairs); `maxdiffusion_programs.py`
    #: compiles MaxDiffusion's at that commit
    program: tuple[str, str, tuple[tuple[str, str], ...]] | None = None


@dataclass(frozen=True)
class TimedEntry:
    """A measured time per call of one configuration."""

    key: str
    title: str
    source: Source
    config: Config
    measured_s: float
    measured_note: str = ""  # how the figure was obtained (e.g. converted from a bandwidth)
    notes: str = ""
    group: str = ""  # entries of one source sweep share a group
    basis: str = HELD_OUT


@dataclass(frozen=True)
class ComparisonEntry:
    """Measured figures of several configurations compared with each other.

    `measured[i]` is the figure of `configs[i]`; `higher_is_better` says which way it goes
    (throughput: True; time: False). Predictions are times, compared as their inverses when the
    measurement is a throughput.
    """

    key: str
    title: str
    source: Source
    configs: tuple[Config, ...]
    measured: tuple[float, ...]
    measured_unit: str
    higher_is_better: bool
    notes: str = ""
    basis: str = HELD_OUT


@dataclass(frozen=True)
class PipelineEntry:
    """End-to-end generation times of one pipeline (`steps` denoising steps plus work outside them:
    text encoding, VAE decoding, host) under several configurations of its denoising step.

    Only the step is predicted, so the work outside it, the same for every configuration, is
    compared through differences: measured (T_i - T_best) / steps against the predicted
    difference of step times.
    """

    key: str
    title: str
    source: Source
    configs: tuple[Config, ...]
    measured_total_s: tuple[float, ...]
    steps: int
    notes: str = ""
    basis: str = HELD_OUT


Entry = TimedEntry | ComparisonEntry | PipelineEntry


def entry_configs(entry: Entry) -> tuple[Config, ...]:
    """The configurations an entry compiles (a timed entry has one)."""
    return (entry.config,) if isinstance(entry, TimedEntry) else tuple(entry.configs)


class NotRunnable(AoizoraError):
    """An entry the current tree cannot build (a slice or hardware profile it does not know yet)."""


@dataclass
class Prediction:
    q2_s: float
    sim_s: float
    q2_comm_s: float
    sim_comm_s: float
    compute_s: float
    collectives: list[str]
    compile_seconds: float
    from_cache: bool


def strategy_space_config(name: str, topology: str, space: Any, strategy: Any, setup: str, flags: str = "") -> Config:
    """A `Config` of one strategy of a strategy space (e.g. a Wan step): its mesh, lowered as Stage
    2 lowers it, its opaque kernels costed by the space as Stage 2 costs them."""
    def build(mesh: Any) -> tuple[Any, Any]:
        import functools

        import jax

        inputs = space.lowering_inputs(strategy, mesh)
        return jax.jit(functools.partial(inputs.fn, **inputs.kwargs), **inputs.jit_kwargs), inputs.args

    mesh_axes = tuple(zip(strategy.mesh_axes, strategy.mesh_shape, strict=True))
    return Config(name, topology, mesh_axes, build, setup=setup, flags=flags,
                  opaque_cost=lambda op: space.compiled_kernel_cost(strategy, op),
                  kernel_profile=getattr(strategy, "kernel_profile", ""), workload=(space, strategy))


def ran_at(config: Config, repository: str, commit: str, **settings: str) -> Config:
    """`config` with the source's own program it ran: `repository` at `commit`, with the run's
    `settings` beyond the strategy's (e.g. its attention name where the commit names it otherwise)."""
    import dataclasses

    return dataclasses.replace(config, program=(repository, commit, tuple(settings.items())))


def default_order_ids(topology: Any, mesh: tuple[tuple[str, int], ...]) -> np.ndarray:
    from aoizora.placement.jax_default import jax_default_placement
    from aoizora.placement.mesh_spec import MeshSpec

    spec = MeshSpec(tuple(n for n, _ in mesh), tuple(s for _, s in mesh))
    return jax_default_placement(topology, spec).device_ids


def placement_for(config: Config, topology: Any) -> Any:
    """The config's placement over `topology`: JAX's default order, or the source's own."""
    from aoizora.placement.mesh_spec import MeshSpec
    from aoizora.placement.placement import Placement

    spec = MeshSpec(tuple(n for n, _ in config.mesh), tuple(s for _, s in config.mesh))
    ids = default_order_ids(topology, config.mesh)
    if config.order == "jax-default":
        return Placement("jax-default", "JAX's default device order", spec, ids)
    reordered = np.asarray(config.order(ids.copy()), dtype=np.int64).reshape(spec.shape)
    return Placement(f"{config.name}-order", "the source's device order", spec, reordered)


@dataclass
class CompiledConfig:
    """A configuration's program as libtpu compiled it for its slice and device order."""

    module: Any  # the parsed HLO module (`aoizora.hlo.parser.HloModule`)
    program: Any  # `aoizora.hlo.program.Program`, its opaque kernels costed by the config
    topology: Any
    placement: Any
    compile_seconds: float
    from_cache: bool


def compile_config(config: Config, cache: Any) -> CompiledConfig:
    """Compile `config` for its slice (or read the compile cache, where a compile is stored), parsed once."""
    from aoizora.hlo import build_program
    from aoizora.hlo.parser import parse_hlo
    from aoizora.stage2.compile_cache import CompileRecord
    from aoizora.toolchain import CompilerFlags, compile_lowered, toolchain_versions
    from aoizora.topology import get_topology

    try:
        topology = get_topology(config.topology)
        placement = placement_for(config, topology)
        placement.check(topology)
    except AoizoraError as exc:
        raise NotRunnable(f"slice {config.topology}: {exc}") from exc
    mesh = placement.jax_mesh(topology)
    try:
        fn, args = config.build(mesh)
        lowered = fn.lower(*args)
    except AoizoraError as exc:  # a setup this tree refuses (e.g. an illegal strategy) is a result, not a crash
        raise NotRunnable(f"{config.name}: {str(exc).splitlines()[0][:200]}") from exc
    ids = [int(d.id) for d in mesh.devices.flat]
    flags = CompilerFlags.parse(config.flags)
    key = cache.key(lowered.as_text(), topology.name, ids, toolchain_versions(), flags)
    record = cache.get(key)
    if record is not None:
        if record.error is not None:
            raise NotRunnable(f"the compiler refused {config.name}: {record.error}")
        module = parse_hlo(record.hlo_text)
        program = build_program(module, device_ids=record.device_ids, opaque_cost=config.opaque_cost)
        return CompiledConfig(module, program, topology, placement, record.compile_seconds, True)
    t0 = time.perf_counter()
    try:
        compiled = compile_lowered(lowered, flags)
    except Exception as exc:  # the compiler's refusal is a result for this entry, not a crash of the run
        raise NotRunnable(f"libtpu refused {config.name}: {str(exc).strip().splitlines()[0][:200]}") from exc
    seconds = time.perf_counter() - t0
    text = compiled.as_text()
    module = parse_hlo(text)
    program = build_program(module, opaque_cost=config.opaque_cost)
    cache.put(key, CompileRecord(text, program.device_ids, None, seconds,
                                 label=f"hardware suite / {config.name} / {topology.name}"))
    return CompiledConfig(module, program, topology, placement, seconds, False)


def predict(config: Config, cache: Any) -> Prediction:
    """Compile `config` for its slice (or read the compile cache) and predict it with Q2 and the simulator."""
    from aoizora.cost.model import CostModel
    from aoizora.sim import simulate

    c = compile_config(config, cache)
    q2 = CostModel(c.topology).evaluate(c.program, c.placement)
    sim = simulate(c.program, c.topology, c.placement)
    return Prediction(
        q2_s=q2.step_seconds, sim_s=sim.step_seconds, q2_comm_s=q2.comm_seconds,
        sim_comm_s=sim.comm_seconds,
        compute_s=q2.compute_seconds,
        collectives=[f"{col.kind.value} x{col.multiplicity}" for col in c.program.collectives],
        compile_seconds=c.compile_seconds, from_cache=c.from_cache,
    )


def sharded(shape: Sequence[int], dtype: Any, mesh: Any, *spec: Any) -> Any:
    """An abstract input of `shape` laid out on `mesh` by PartitionSpec(*spec)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    return jax.ShapeDtypeStruct(tuple(shape), dtype, sharding=NamedSharding(mesh, PartitionSpec(*spec)))


def wan_config(name: str, topology: str, model: str, resolution: str, frames: int, strategy: Any, *,
               flags: str = "", setup: str = "", batch: int = 2, generation: str | None = None,
               rope_partner: str | None = None, ulysses_exchange: str | None = None) -> Config:
    """A `Config` of one Wan deployment: `strategy` of `model`'s strategy space at the video shape,
    its CFG batch `batch` (2 per video), compiled for `topology` with `flags` (LIBTPU_INIT_ARGS
    syntax). `generation` None keeps the strategy's own splash blocks; a generation fits blocks to
    it when the strategy names none, as a plan of that generation compiles them."""
    import dataclasses

    from aoizora.models.registry import wan_space
    from aoizora.models.wan.kernels.splash_tiles import fitted_splash_blocks
    from aoizora.topology import hardware_profile

    space = wan_space(model, resolution, frames, generation=generation, rope_partner=rope_partner,
                      ulysses_exchange=ulysses_exchange, batch=batch, kernel_profile=strategy.kernel_profile)
    if strategy.splash_blocks is None and generation is not None:
        blocks = fitted_splash_blocks(strategy, space.video.tokens(space.config), space.batch,
                                      hardware_profile(generation).splash_max_block_q)
        if blocks is not None:
            strategy = dataclasses.replace(strategy, splash_blocks=blocks)
    blocks = strategy.splash_blocks.describe() if strategy.splash_blocks else "the kernel's own"
    described = (f"{topology}, {model} {resolution}/{frames}f, CFG batch {batch}, {space.key_of(strategy)}, "
                 f"splash blocks {blocks}" + (f"; {setup}" if setup else ""))
    return strategy_space_config(name, topology, space, strategy, described, flags)
