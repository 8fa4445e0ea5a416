"""Plan any JAX function: describe its strategies as meshes plus argument shardings.

A `FunctionStrategy` is one way to run the function: a logical mesh and, for each argument, the
`PartitionSpec` over that mesh (a pytree matching the abstract arguments). `FunctionSpace` turns
a list of them into a Stage 1 strategy space, so a user's own model goes through the same two
stages as Wan.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import jax
from jax.sharding import NamedSharding, PartitionSpec

from aoizora.errors import StrategyError, clipped
from aoizora.placement import MeshSpec
from aoizora.workload import Candidate, LoweringInputs, StrategySpace


@dataclass(frozen=True)
class FunctionStrategy:
    """One strategy of a user function: mesh axes and the PartitionSpec of every argument."""

    name: str
    mesh: MeshSpec
    in_specs: Any  # pytree of PartitionSpec, one per abstract argument leaf (or prefix)
    out_specs: Any = None  # pytree of PartitionSpec for the outputs; None lets the compiler choose
    notes: tuple[str, ...] = field(default=())

    @property
    def key(self) -> str:
        return self.name


class FunctionSpace(StrategySpace[FunctionStrategy]):
    """A strategy space made of explicit `FunctionStrategy`s for `fn(*abstract_args)`."""

    def __init__(self, fn: Callable[..., Any], abstract_args: Sequence[Any], strategies: Sequence[FunctionStrategy],
                 *, name: str | None = None, expert: str | None = None):
        self.fn = fn
        self.abstract_args = tuple(abstract_args)
        self.strategies = list(strategies)
        self.name: str = name or str(getattr(fn, "__name__", "function"))
        self.expert = expert

    def candidates(self, num_devices: int) -> list[Candidate[FunctionStrategy]]:
        out = []
        for s in self.strategies:
            reasons = (() if s.mesh.size == num_devices
                       else (f"mesh {s.mesh} needs {s.mesh.size} devices, not {num_devices}",))
            out.append(Candidate(s.name, s, reasons))
        return out

    def mesh_spec(self, strategy: FunctionStrategy) -> MeshSpec:
        return strategy.mesh

    def lowering_inputs(self, strategy: FunctionStrategy, mesh: Any) -> LoweringInputs:
        def place(arg: Any, spec: PartitionSpec | None) -> Any:
            sharding = NamedSharding(mesh, spec if spec is not None else PartitionSpec())
            return jax.ShapeDtypeStruct(arg.shape, arg.dtype, sharding=sharding)

        args = jax.tree.map(place, self.abstract_args, tuple(strategy.in_specs),
                            is_leaf=lambda x: isinstance(x, PartitionSpec) or x is None)
        jit_kwargs = {}
        if strategy.out_specs is not None:
            jit_kwargs["out_shardings"] = jax.tree.map(
                lambda spec: NamedSharding(mesh, spec), strategy.out_specs,
                is_leaf=lambda x: isinstance(x, PartitionSpec)
            )
        return LoweringInputs(self.fn, args, jit_kwargs=jit_kwargs)

    def describe(self, strategy: FunctionStrategy) -> dict[str, Any]:
        return {"mesh": str(strategy.mesh), "in_specs": str(strategy.in_specs), "out_specs": str(strategy.out_specs)}

    def from_description(self, description: dict[str, Any]) -> FunctionStrategy:
        """The space's strategy that `describe` writes as `description` (its text is not parsed back:
        the strategies are the caller's)."""
        given = {k: v for k, v in description.items() if k != "key"}
        found = next((s for s in self.strategies if self.describe(s) == given), None)
        if found is None:
            raise StrategyError(f"no strategy of {self.name} is described as {clipped(given)}")
        return found

    def expert_strategy(self, num_devices: int) -> FunctionStrategy | None:
        return next((s for s in self.strategies if s.name == self.expert), None)

    def workload(self) -> dict[str, Any]:
        shapes = [f"{a.dtype}{list(a.shape)}" for a in jax.tree.leaves(self.abstract_args)]
        return {"name": self.name, "shapes": {"args": shapes}, "strategies": [s.name for s in self.strategies]}
