"""The workload interface: what the planner needs from a workload, and nothing more.

Both stages, the benchmark and the plan file read a workload only through this module. Why a
protocol: the planner is generic. The generic scanned transformer and the Wan 2.1 model both
plug in by saying (1) which logical strategies exist on N devices and which are legal, with the
reason for every rejection; (2) for a strategy, its logical mesh and the function plus abstract
arguments to lower on that mesh; (3) the cost of the opaque kernels (Pallas calls) it uses, which
no IR can tell.
"""

from __future__ import annotations

import abc
import importlib
import itertools
import threading
from collections.abc import Callable, Hashable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from aoizora.errors import StrategyError
from aoizora.hlo.program import OpaqueCost, OpaqueOp
from aoizora.placement import MeshSpec, Placement
from aoizora.toolchain import CompilerFlags

if TYPE_CHECKING:  # Stage 1's IR types; the interface names them without depending on Stage 1
    from jax.sharding import Mesh

    from aoizora.stage1.ir import TensorType
    from aoizora.topology import Topology

#: A workload's strategy type (`aoizora.models.wan.transformer.strategy.Strategy`, `FunctionStrategy`, ...).
S = TypeVar("S")


@dataclass(frozen=True)
class KernelCall:
    """An opaque kernel call as a cost hook sees it: target and per-device operand/result types."""

    target: str
    operand_types: tuple[TensorType | None, ...]
    result_types: tuple[TensorType | None, ...]
    in_shard_map: bool


@dataclass(frozen=True)
class Candidate(Generic[S]):
    """One enumerated strategy with its legality verdict (reasons are empty when legal)."""

    key: str  # short unique label, e.g. "data=2,context=8 | weights=fsdp | attn=dense"
    strategy: S
    reasons: tuple[str, ...] = ()

    @property
    def legal(self) -> bool:
        return not self.reasons


@dataclass(frozen=True)
class ExpertDeployment(Generic[S]):
    """A hand-tuned deployment to compare a plan against: its strategy (compiled and placed by
    JAX's default order), the libtpu flags its authors run it with (``LIBTPU_INIT_ARGS``, one flag
    per item, for the compile path to apply), where it is documented and what was measured there."""

    name: str
    strategy: S
    libtpu_args: tuple[str, ...] = ()
    source: str = ""
    documented: str = ""
    #: what the comparison with it does not cover, one line each (e.g. a tile compiled otherwise)
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        out = {"name": self.name, "libtpu_args": list(self.libtpu_args), "source": self.source,
               "documented": self.documented}
        if self.notes:
            out["notes"] = list(self.notes)
        return out


@dataclass
class LoweringInputs:
    """`jax.jit(fn, **jit_kwargs).lower(*args, **kwargs)` lowers the strategy (args abstract)."""

    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any] = field(default_factory=dict)
    jit_kwargs: dict[str, Any] = field(default_factory=dict)

    def lower(self) -> Any:
        """The lowered program (`jax.stages.Lowered`; no compile)."""
        import jax

        return jax.jit(self.fn, **self.jit_kwargs).lower(*self.args, **self.kwargs)


#: Held while a workload traces and lowers a strategy: tracing is not assumed thread-safe for every
#: workload, so within one process Stage 1's lowerings and Stage 2's (early compiles run beside
#: Stage 1) take turns. Reentrant: a lowering may call another workload's.
LOWERING_LOCK = threading.RLock()


@dataclass(frozen=True)
class CompanionProgram:
    """A program of the workload's pipeline besides the step (e.g. a video's VAE decode), costed for
    every plan whatever strategy wins. It depends on the slice and its own inputs only, never on the
    strategy, so a plan compiles it once, over `placement`'s device order, beside Stage 2's compiles
    and through the same compile cache. `space.lowering_inputs(strategy, mesh)` lowers it (the space
    and strategy go to a compile process as a step's do); `name` keys its cost in `plan_totals`."""

    name: str
    label: str  # what a progress line, a note or the time budget's record calls it
    space: StrategySpace[Any]
    strategy: Any
    placement: Placement


@dataclass(frozen=True)
class PlanDisagreement:
    """A field of a plan file that disagrees with another (`StrategySpace.check_plan`)."""

    field: str  # e.g. "strategy.key"
    what: str  # e.g. "is 'x' but the strategy it describes is 'y'"


class StrategySpace(abc.ABC, Generic[S]):
    """A workload's logical strategies on a device count (subclass per workload), of type `S`."""

    name: str = "workload"

    @abc.abstractmethod
    def candidates(self, num_devices: int) -> Iterable[Candidate[S]]:
        """Every strategy on `num_devices`, legal or not (illegal ones carry their reasons)."""

    @abc.abstractmethod
    def mesh_spec(self, strategy: S) -> MeshSpec:
        """The logical mesh (axis names and sizes, product = device count)."""

    @abc.abstractmethod
    def lowering_inputs(self, strategy: S, mesh: Mesh) -> LoweringInputs:
        """The function and abstract (ShapeDtypeStruct) arguments to lower on `mesh`."""

    def compile_inputs(self, strategy: S, mesh: Mesh) -> Any:
        """What Stage 2 compiles for `strategy` on `mesh`: an object whose `lower()` gives the lowered
        program. By default the program Stage 1 lowers (`lowering_inputs`); a space may compile
        another program of the same strategy (the one a deployment runs, e.g. MaxDiffusion's own)."""
        return self.lowering_inputs(strategy, mesh)

    def kernel_cost(self, strategy: S, call: KernelCall) -> OpaqueCost | None:
        """Cost of one opaque kernel call (per device); None when unknown."""
        return None

    def analysis_stand_in(self, strategy: S) -> S | None:
        """A strategy whose Stage 1 analysis stands for this one's, or None (analyse it itself).

        Only for strategies that differ in scheduling alone: the stand-in must move the same
        bytes and do the same FLOPs with no more collectives (so its Q1 is still a lower bound
        for this one) and need at least the memory this one does (so the HBM filter stays
        conservative). Stage 1 then lowers the stand-in only; Stage 2 compiles each for real."""
        return None

    def lowering_affinity(self, strategy: S) -> Hashable:
        """Strategies with equal affinity share costly lowering work (e.g. a kernel's setup that
        the toolchain caches): Stage 1 lowers them one after another in the same process. By
        default nothing is shared: every strategy is its own group, free to go to any worker."""
        return self.key_of(strategy)

    def compile_flags(self, strategy: S) -> str:
        """Compiler flags (LIBTPU_INIT_ARGS syntax) the strategy is compiled with on top of the
        plan's, chosen with it (e.g. a scoped-VMEM limit for its kernels' tiles); "" for none."""
        return ""

    def under_flags(self, flags: CompilerFlags) -> StrategySpace[S]:
        """The space as planned under the plan's compiler flags (`flags`, which win over a
        strategy's own `compile_flags`): a space whose choices depend on a flag the plan's flags
        fix (e.g. the tiles searched for a scoped-VMEM limit) gives a copy that makes them under
        the fixed value. By default the space itself."""
        return self

    def compiled_form(self, strategy: S) -> S:
        """The strategy whose program Stage 2 compiles to cost `strategy` (by default itself): one
        that compiles to the same collectives and memory, differing only in what the space costs
        from the strategy rather than from the compile (a kernel's tile, which
        `compiled_kernel_cost` costs by the kernel's model) and in the flags `compile_flags` adds
        for that alone (e.g. a raised scoped-VMEM limit, under which libtpu's back end runs several
        times slower). Stage 2 compiles each candidate once, in this form, at the plan's flags."""
        return strategy

    def describe(self, strategy: S) -> dict[str, Any]:
        """The strategy as a plan's `strategy` object (JSON-ready): what the plan is run and
        exported from, so `from_description` reads it back to the same strategy."""
        return {"strategy": repr(strategy)}

    def from_description(self, description: dict[str, Any]) -> S:
        """The strategy `describe` wrote as `description` (a plan's `strategy` object)."""
        raise StrategyError(f"{type(self).__name__} does not read its strategies back from a plan")

    @classmethod
    def check_plan(cls, plan: dict[str, Any], flags: CompilerFlags) -> PlanDisagreement | None:
        """The first field of a plan of this workload (`register_plan_reader`) that disagrees with
        another, beyond what every plan is checked for (`aoizora.plan.consistency`); None if none.
        `flags` are the plan's compiler flags (`compiler.libtpu_args`)."""
        return None

    def compiled_kernel_cost(self, strategy: S, op: OpaqueOp, *, compiled: S | None = None) -> OpaqueCost | None:
        """Cost of one opaque custom call in the *compiled* program (the HLO analyzer's hook), as
        `strategy`'s; `compiled` is the strategy whose program was compiled (None: its compiled
        form, `compiled_form(strategy)`, as Stage 2 compiles it)."""
        return None

    def expert_strategy(self, num_devices: int) -> S | None:
        """The hand-tuned deployment to compare against (None when the workload has none)."""
        return None

    def expert_deployments(self, topology: Topology) -> list[ExpertDeployment[S]]:
        """Every hand-tuned deployment documented for this slice's generation, the primary one
        first (by default the one `expert_strategy` names, without flags or source)."""
        st = self.expert_strategy(topology.num_devices)
        return [] if st is None else [ExpertDeployment("expert", st)]

    def workload(self) -> dict[str, Any]:
        """What is being planned, for the plan file and its cache key: name and input shapes."""
        return {"name": self.name, "shapes": {}}

    def plan_details(self, strategy: S, topology: Topology) -> dict[str, Any]:
        """Extra top-level sections of the plan for the chosen strategy on the slice (e.g. the
        experts a pipeline holds); none by default."""
        return {}

    def companion_programs(self, topology: Topology) -> list[CompanionProgram]:
        """The pipeline's programs besides the step that a plan on `topology` costs (none by default)."""
        return []

    def plan_totals(self, strategy: S, topology: Topology, step_seconds: float,
                    companions: dict[str, dict[str, Any]]) -> dict[str, Any]:
        """Extra top-level sections of the plan from the chosen step's time and the companion
        programs' costs (`companions`: name -> the cost's JSON, or {"dropped": reason} for one not
        costed); none by default."""
        return {}

    def key_of(self, strategy: S) -> str:
        """The key of a strategy as `candidates` labels it."""
        return getattr(strategy, "key", repr(strategy))


#: The modules that register the workloads aoizora ships (`register_plan_reader`), imported when a
#: plan names a workload no imported module has registered: a plan file is checked (`load_plan`)
#: without its reader importing the model that wrote it.
SHIPPED_WORKLOADS: tuple[str, ...] = ("aoizora.models.registry",)
_PLAN_READERS: dict[str, Callable[[], type[StrategySpace[Any]]]] = {}


def register_plan_reader(names: Iterable[str], space_type: Callable[[], type[StrategySpace[Any]]]) -> None:
    """Plans whose `workload.name` is one of `names` are checked by the space type `space_type()`
    returns (called when such a plan is read, so registering imports nothing)."""
    for name in names:
        _PLAN_READERS[name] = space_type


def plan_reader(workload_name: str) -> type[StrategySpace[Any]] | None:
    """The space type that checks the plans of `workload_name`, None for a workload none registers."""
    if workload_name not in _PLAN_READERS:
        for module in SHIPPED_WORKLOADS:
            importlib.import_module(module)
    reader = _PLAN_READERS.get(workload_name)
    return reader() if reader is not None else None


def lowering_inputs_on(space: StrategySpace[S], strategy: S, topology: Topology) -> LoweringInputs:
    """`space.lowering_inputs` on a mesh of the slice's devices in id order: lowering does not
    depend on which device sits where, so any order serves Stage 1 (Stage 2 compiles on each
    placement's own order)."""
    import numpy as np
    from jax.sharding import Mesh

    spec = space.mesh_spec(strategy)
    spec.check_fits(topology.num_devices, topology.name)
    devices = np.array(topology.devices, dtype=object).reshape(spec.shape)
    return space.lowering_inputs(strategy, Mesh(devices, spec.axis_names))


def axis_assignments(num_devices: int, axis_names: Sequence[str]) -> Iterator[dict[str, int]]:
    """Every assignment of divisors to the named axes whose product is `num_devices`."""
    divisors = [d for d in range(1, num_devices + 1) if num_devices % d == 0]
    for sizes in itertools.product(divisors, repeat=len(axis_names)):
        prod = 1
        for s in sizes:
            prod *= s
        if prod == num_devices:
            yield dict(zip(axis_names, sizes, strict=True))


def mesh_of(sizes: dict[str, int]) -> MeshSpec:
    """A MeshSpec of the axes larger than 1, in the given order (a 1-device mesh keeps one axis)."""
    names = tuple(a for a, n in sizes.items() if n > 1)
    if not names:
        first = next(iter(sizes))
        return MeshSpec((first,), (1,))
    return MeshSpec(names, tuple(sizes[a] for a in names))
