"""Rank a compiled program's placements by Q2, with the reference simulator beside it."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from aoizora.cost import CostModel, Q2Options, Q2Result
from aoizora.errors import MeshSpecError
from aoizora.evaluation.validation.compare import PairScore, ValidationReport, compare_scores
from aoizora.evaluation.validation.programs import NamedProgram
from aoizora.hlo.program import Program
from aoizora.placement import JAX_DEFAULT, MeshSpec, Placement
from aoizora.placement.space import prime_factors
from aoizora.topology import Topology


@dataclass
class RankedPlacement:
    placement: Placement
    q2: Q2Result
    sim: Any | None  # aoizora.sim.SimResult when simulated

    @property
    def is_jax_default(self) -> bool:
        return self.placement.name == JAX_DEFAULT

    def to_json(self, topology: Topology) -> dict[str, Any]:
        return {
            "placement": self.placement.name,
            "jax_default": self.is_jax_default,
            "device_coords": self.placement.coords(topology).tolist(),
            "q2_seconds": self.q2.step_seconds,
            "q2_exposed_comm_seconds": self.q2.exposed_comm_seconds,
            "sim_seconds": self.sim.step_seconds if self.sim is not None else None,
            "sim_exposed_comm_seconds": self.sim.exposed_comm_seconds if self.sim is not None else None,
        }


def simulator_options(options: Q2Options) -> dict[str, Any]:
    """The same compiler assumptions as the simulator's keyword arguments (the switches are shared enums)."""
    return {"ring_order": options.order, "ring_direction": options.direction}


def check_program_mesh(program: Program, mesh: MeshSpec) -> None:
    """Raise MeshSpecError unless every collective's groups are formed by axes (or sub-axes) of `mesh`.

    A program compiled for a mesh groups its devices (logical mesh positions, row-major) along
    that mesh's axes, or along parts of an axis: libtpu's program of a Wan strategy with context=4
    all-gathers over pairs {0,1},{2,3} of that axis. So groups are checked against every set of
    the mesh's axes split into prime factors; groups none forms mean the program was compiled for
    another mesh. (Meshes whose factors coincide, such as sp=4 and sp=2,tp=2, cannot be told apart
    from the compiled groups: the HLO does not name its mesh.)
    """
    if program.num_devices != mesh.size:
        raise MeshSpecError(
            f"the program was compiled for {program.num_devices} devices but mesh {mesh} has {mesh.size} "
            f"positions; pass the mesh it was compiled for (sizes multiplying to {program.num_devices}) "
            f"and a slice of {program.num_devices} devices"
        )
    digits = [f for size in mesh.axis_sizes for f in prime_factors(size)] or [1]
    ids = np.arange(mesh.size).reshape(digits)
    formed = set()
    for r in range(len(digits) + 1):
        for axes in itertools.combinations(range(len(digits)), r):
            moved = np.moveaxis(ids, list(axes), list(range(len(digits) - r, len(digits))))
            size = math.prod(digits[a] for a in axes)
            formed.add(frozenset(frozenset(int(i) for i in row) for row in moved.reshape(-1, size)))
    for coll in program.collectives:
        if not coll.groups:
            continue
        if frozenset(frozenset(g) for g in coll.groups) not in formed:
            shown = ",".join("{" + ",".join(map(str, g)) + "}" for g in coll.groups[:4])
            raise MeshSpecError(
                f"the program's {coll.kind.value} groups devices as {shown}{',...' if len(coll.groups) > 4 else ''}, "
                f"which no axes of mesh {mesh} form: it was compiled for another mesh; pass the mesh the "
                "program was compiled for (--mesh NAME=SIZE,... in the order of its device array)"
            )


def rank_placements(
    program: Program,
    topology: Topology,
    placements: Sequence[Placement],
    *,
    options: Q2Options | None = None,
    simulate: bool = True,
    progress: Callable[[], None] | None = None,
) -> list[RankedPlacement]:
    """Every placement scored by Q2 (and the simulator), best Q2 first."""
    options = options or Q2Options()
    model = CostModel(topology, options)
    from aoizora.sim import simulate as run_simulation

    sim_fn = run_simulation if simulate else None
    rows = []
    for p in placements:
        q2 = model.evaluate(program, p)
        sim = sim_fn(program, topology, p, **simulator_options(options)) if sim_fn else None
        rows.append(RankedPlacement(p, q2, sim))
        if progress:
            progress()
    rows.sort(key=lambda r: (r.q2.step_seconds, r.placement.name))
    return rows


def validate(
    programs: Sequence[NamedProgram],
    topology: Topology,
    placements: Sequence[Placement],
    *,
    options: Q2Options | None = None,
    progress: Callable[[], None] | None = None,
) -> ValidationReport:
    """Spearman/Kendall, top-1 agreement and regret of Q2 against the simulator over all pairs."""
    pairs = []
    for named in programs:
        for row in rank_placements(named.program, topology, placements, options=options, progress=progress):
            assert row.sim is not None  # rank_placements simulates by default
            pairs.append(PairScore(named.name, row.placement.name, row.q2.step_seconds, row.sim.step_seconds))
    return compare_scores(pairs)
