"""The device order Stage 2 compiles a strategy over: predicted best where the program depends on it.

Stage 2 compiles each strategy once and scores the program on every placement: a placement only
relabels the compiled replica groups. Where the compiler's program depends on the device order
(every generation outside `REORDERING_MAP_ONLY_GENERATIONS`: on TPU7x libtpu writes explicit ICI
rings and SparseCore assignments for the order it is given), the pair that leads is then
recompiled over its own order before the choice (`search._verify`). Compiling each strategy over
the placement predicted best from the start makes that recompile unnecessary whenever the
prediction names the pair that leads.

The rule (`predicted_compile_placement`):
- on a generation in `REORDERING_MAP_ONLY_GENERATIONS`, and for a strategy without Stage 1's
  collective list, the strategy's first placement (JAX's default order), as before;
- elsewhere, Stage 1's prediction of the strategy's collectives (kind, mesh axes, bytes,
  multiplicity: `Prediction.collective_traffic`, kept in its summary and its cache) is written as
  a program of those collectives alone (`synthetic_program`: replica groups over the mesh axes at
  logical positions, as the partitioner writes them; one loop per collective for its
  multiplicity) and Q2 scores it on every placement of the strategy's mesh. The predicted best is
  the argmin; ties go to the earlier placement in enumeration order (JAX's default first).

The prediction depends only on the strategy, its Stage 1 analysis and the slice, never on which
other compiles have finished, so parallel compiles give a sequential run's programs. What it does
not see: compute (the synthetic program has none, so overlap is not weighed) and the compiled
collectives' algorithm configs (it takes Q2's defaults for a collective without one: a
bidirectional ring in the listed order), which is where it can miss the pair Q2 ranks best on
the compiled program.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aoizora.cost import CostModel, Q2Options
from aoizora.hlo import ProgramBuilder
from aoizora.hlo.program import CollectiveKind, Program
from aoizora.placement import MeshSpec, Placement, enumerate_placements
from aoizora.stage2.verify import REORDERING_MAP_ONLY_GENERATIONS
from aoizora.topology import Topology
from aoizora.workload import StrategySpace


@dataclass(frozen=True)
class PredictedCollective:
    """One kind of collective Stage 1 predicts: `multiplicity` executions over the groups spanning `axes`.

    Axes are mesh axis names or Shardy sub-axes `name:pre_size:size`, major first; `payload_bytes`
    per device, by `aoizora.hlo.program`'s convention (all-gather: the shard; the others: the input).
    """

    kind: str
    axes: tuple[str, ...]
    payload_bytes: float
    multiplicity: int


def traffic_of(summary: Mapping[str, Any] | None) -> list[PredictedCollective] | None:
    """The collectives of a Stage 1 summary (`Prediction.summary`); None when it has no list."""
    rows = (summary or {}).get("collective_traffic")
    if rows is None:
        return None
    return [PredictedCollective(kind, tuple(axes), float(payload), int(mult)) for kind, axes, payload, mult in rows]


def compile_order_matters(topology: Topology) -> bool:
    """Whether the compiled program can depend on the device order beyond the reordering map."""
    return topology.hardware.generation not in REORDERING_MAP_ONLY_GENERATIONS


def _axis_digit(mesh: MeshSpec, ref: str) -> tuple[int, int, int] | None:
    """(mesh axis index, stride, size) of an axis or sub-axis reference; None when not of this mesh."""
    name, _, sub = ref.partition(":")
    if name not in mesh.axis_names:
        return None
    axis = mesh.axis_names.index(name)
    full = mesh.axis_sizes[axis]
    if not sub:
        return axis, 1, full
    pre, size = (int(x) for x in sub.split(":"))
    if pre * size == 0 or full % (pre * size):
        return None
    return axis, full // (pre * size), size


def replica_groups(mesh: MeshSpec, axes: Sequence[str]) -> list[list[int]] | None:
    """The groups of logical positions (row-major mesh ids) a collective over `axes` spans, each
    ordered by its position along `axes` (the first axis major); None when an axis is not the mesh's."""
    digits = [d for d in (_axis_digit(mesh, a) for a in axes) if d is not None]
    if len(digits) != len(axes):  # an axis that is not the mesh's
        return None
    groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    for logical in range(mesh.size):
        coords = [int(c) for c in np.unravel_index(logical, mesh.axis_sizes)]
        rank = 0
        for axis, stride, size in digits:
            value = (coords[axis] // stride) % size
            rank = rank * size + value
            coords[axis] -= value * stride  # what stays fixed across the group
        groups.setdefault(tuple(coords), []).append((rank, logical))
    ordered = [[logical for _, logical in sorted(members)] for members in groups.values()]
    return sorted(ordered, key=lambda g: g[0])


def synthetic_program(mesh: MeshSpec, traffic: Iterable[PredictedCollective]) -> Program | None:
    """A program of the collectives alone, over logical positions of `mesh`; None when a
    collective names an axis the mesh does not have.

    A collective-permute is taken as a shift by one position along its axes (a ring exchange,
    as in ring attention); the others run over the groups of `replica_groups`.
    """
    builder = ProgramBuilder(mesh.size, name="stage1-collectives")
    for t in traffic:
        groups = replica_groups(mesh, t.axes)
        if groups is None:
            return None
        if len(groups[0]) < 2 or t.multiplicity < 1:
            continue
        try:
            kind = CollectiveKind(t.kind)
        except ValueError:  # a kind Q2 does not route
            return None
        payload = int(round(t.payload_bytes))
        with builder.loop(t.multiplicity):
            if kind is CollectiveKind.COLLECTIVE_PERMUTE:
                pairs = [(g[i], g[(i + 1) % len(g)]) for g in groups for i in range(len(g))]
                builder.collective(kind, groups, payload, pairs=pairs)
            else:
                builder.collective(kind, groups, payload)
    return builder.build()


def rank_by_traffic(program: Program, placements: Sequence[Placement], model: CostModel) -> Placement:
    """The placement with the least Q2 for `program`; the earliest of equals."""
    best, best_seconds = placements[0], math.inf
    for p in placements:
        seconds = model.evaluate(program, p).step_seconds
        if seconds < best_seconds:
            best, best_seconds = p, seconds
    return best


def predicted_compile_placement(space: StrategySpace, topology: Topology, strategy: Any,
                                summary: Mapping[str, Any] | None, model: CostModel | None = None) -> Placement:
    """The placement to compile `strategy` over (the module's rule), from its Stage 1 `summary`."""
    placements = enumerate_placements(topology, space.mesh_spec(strategy)).placements
    if not compile_order_matters(topology):
        return placements[0]
    traffic = traffic_of(summary)
    program = synthetic_program(space.mesh_spec(strategy), traffic) if traffic is not None else None
    if program is None:
        return placements[0]
    return rank_by_traffic(program, placements, model or CostModel(topology))


def predicted_best_placement(space: StrategySpace, topology: Topology, strategy: Any,
                             summary: Mapping[str, Any] | None, model: CostModel | None = None
                             ) -> tuple[Placement, Program | None]:
    """The placement Q2 ranks first on `strategy`'s Stage 1 collectives (`synthetic_program`), on any
    generation, and that program (None, with JAX's default order, when the summary has no list or
    names an axis the mesh lacks): a plan's placement when nothing compiled (`--time-budget`)."""
    placements = enumerate_placements(topology, space.mesh_spec(strategy)).placements
    traffic = traffic_of(summary)
    program = synthetic_program(space.mesh_spec(strategy), traffic) if traffic is not None else None
    if program is None:
        return placements[0], None
    return rank_by_traffic(program, placements, model or CostModel(topology)), program


class CompilePlacements:
    """`(key, strategy) -> Placement` for Stage 2: each key's predicted compile placement, computed
    once (thread-safe: the compile threads ask concurrently).

    `summaries`: Stage 1's summary per key; a key without one (and every key in `jax_default`, e.g.
    the expert deployments, baselines as deployed) compiles over its first placement.
    """

    def __init__(self, space: StrategySpace, topology: Topology, summaries: Mapping[str, Mapping[str, Any] | None],
                 options: Q2Options | None = None, jax_default: Iterable[str] = ()) -> None:
        self.space, self.topology = space, topology
        self.summaries = dict(summaries)
        self.jax_default = set(jax_default)
        self.model = CostModel(topology, options)
        self._lock = threading.Lock()
        self._chosen: dict[str, Placement] = {}

    def __call__(self, key: str, strategy: Any) -> Placement:
        with self._lock:
            if key not in self._chosen:
                summary = None if key in self.jax_default else self.summaries.get(key)
                self._chosen[key] = predicted_compile_placement(self.space, self.topology, strategy, summary,
                                                                self.model)
            return self._chosen[key]
