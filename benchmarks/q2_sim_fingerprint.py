"""Print Q2 and simulator results, to the last bit, for every compiled program in a compile cache.

    .venv/bin/python benchmarks/q2_sim_fingerprint.py OUT [--cache DIR] [--sim-programs N]

For checking that a refactor of the cost model, the simulator or the HLO reader changes no
number: run it from two checkouts over the same cache directory (copy it first: planning adds
records to a live cache) and `diff` the two outputs (`tests/evaluation/validation/test_fingerprint.py` runs
the same functions on a few small programs against a committed output). Each real program is scored on up to four
placements of a 2 x n/2 mesh under five Q2 option sets and simulated on two placements under
three simulator option sets (default_trip_count=1 for loops of unknown trip count); a few
synthetic N-D collectives, whose configs are parsed from text libtpu 0.0.42.1 printed for
v5e:4x4, follow. Floats are printed with `repr`; arrays as a hash of their bytes.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

import numpy as np

import aoizora  # noqa: F401  (sets libtpu's multi-process switch)
from aoizora.cost import CostModel, Q2Options
from aoizora.evaluation.validation.rank import simulator_options
from aoizora.hlo import build_program
from aoizora.hlo.algorithm import parse_algorithm_config
from aoizora.hlo.synthetic import ProgramBuilder
from aoizora.placement import MeshSpec, enumerate_placements
from aoizora.sim import simulate
from aoizora.topology import get_topology

Q2_OPTIONS = [Q2Options(), Q2Options("listed", "auto"), Q2Options("best", "bi"), Q2Options("reordering-map", "uni"),
              Q2Options("listed", "bi")]
SIM_OPTIONS = [simulator_options(Q2Options()), {}, simulator_options(Q2Options("best", "uni"))]
# printed by libtpu 0.0.42.1 for 16-device collectives on v5e:4x4 (the ring one with its map set)
ND_CONFIGS = {
    "ndring": {"emitter": "RotatedPincerEmitter",
               "debug": "\nUniDirectionNDRingStrategy{colors:4 phases:2 cores:{4 4},{4 4},{4 4},{4 4} "
                        "nophase0:0 reserved_sflags:1 has_reordering_map:0 num_dims:2 active_dims:111 "
                        "dim_sizes:4,4 dim_used:{0 1},{1 0},{0 1},{1 0}}"},
    "strategynd": {"emitter": "RotatedPincerShortEmitter",
                   "debug": "\nStrategyND{colors:2 phases:2 cores:{4 4},{4 4} nophase0:0 num_dims:2 "
                            "active_dims:111 dim_sizes:4,4 dim_used:{0 1},{1 0} use_ndnway:0}"},
    "ring": {"emitter": "RotatedPincerEmitter",
             "debug": "\nUniDirection1DRingStrategy{colors:2 phases:1 cores:{16} has_reordering_map:1}"},
}


def digest(values: Any) -> str:
    """A short hash of an array's float64 bytes: equal hashes, equal arrays to the last bit."""
    return hashlib.sha256(np.asarray(values, dtype=float).tobytes()).hexdigest()[:16]


def cached_programs(cache: Path) -> Iterator[tuple[str, str, str]]:
    """(text hash, slice name, HLO text) of each distinct successful compile, smallest first."""
    seen: dict[str, tuple[str, str]] = {}
    for path in sorted(cache.glob("*.json.gz")):
        doc = json.loads(gzip.decompress(path.read_bytes()))
        record = doc.get("record", doc)
        text = record.get("hlo_text")
        if text and not record.get("error"):
            seen.setdefault(hashlib.sha256(text.encode()).hexdigest()[:12], (record["label"].split(" / ")[-1], text))
    for key, (slice_name, text) in sorted(seen.items(), key=lambda kv: (len(kv[1][1]), kv[0])):
        yield key, slice_name, text


def print_q2(out: TextIO, tag: str, program: Any, topology: Any, placements: list) -> None:
    for options in Q2_OPTIONS:
        model = CostModel(topology, options)
        for placement in placements:
            r = model.evaluate(program, placement)
            print(tag, "q2", options.ring_order, options.ring_direction, placement.name, repr(r.step_seconds),
                  repr(r.compute_seconds), repr(r.exposed_comm_seconds), digest([c.seconds for c in r.collectives]),
                  digest(r.link_bytes), "".join("b" if c.bidirectional else "u" for c in r.collectives),
                  "".join("r" if c.reordered else "l" for c in r.collectives), file=out)


def print_sim(out: TextIO, tag: str, program: Any, topology: Any, placements: list) -> None:
    for options in SIM_OPTIONS:
        for placement in placements[:2]:
            s = simulate(program, topology, placement, default_trip_count=1, **options)
            print(tag, "sim", s.options["ring_order"], s.options["ring_direction"], placement.name,
                  repr(s.step_seconds), repr(s.compute_seconds), digest(s.link_bytes),
                  digest([c.total_seconds for c in s.collectives]), "|".join(c.algorithm for c in s.collectives),
                  file=out)


def synthetic_programs() -> Iterator[tuple[str, Any]]:
    """Two all-reduces / all-gathers / reduce-scatters over 16 devices under each N-D config."""
    for name, config in ND_CONFIGS.items():
        for kind in ("all-reduce", "all-gather", "reduce-scatter"):
            b = ProgramBuilder(16)
            b.collective(kind, [list(range(16))], 3 * 2**20, algo=parse_algorithm_config(config))
            b.collective(kind, [list(range(0, 16, 2)), list(range(1, 16, 2))], 2**20,
                         algo=parse_algorithm_config(config))
            yield f"synthetic {name} {kind}", b.build()


def fingerprint_program(out: TextIO, tag: str, program: Any, topology: Any, simulated: bool = True) -> None:
    """Q2 (and, when `simulated`, the simulator) on up to four placements of a 2 x n/2 mesh."""
    n = program.num_devices
    mesh = MeshSpec(("a", "b"), (2, n // 2)) if n > 2 and n % 2 == 0 else MeshSpec(("d",), (n,))
    placements = enumerate_placements(topology, mesh).placements
    placements = placements[:3] + placements[-1:] if len(placements) > 4 else placements
    print_q2(out, tag, program, topology, placements)
    if simulated:
        print_sim(out, tag, program, topology, placements)


def fingerprint_synthetic(out: TextIO) -> None:
    """Both models on the synthetic N-D collectives, on four placements of v5e:4x4."""
    topology = get_topology("v5e:4x4")
    placements = enumerate_placements(topology, MeshSpec(("a", "b"), (4, 4))).placements[:4]
    for tag, program in synthetic_programs():
        print_q2(out, tag, program, topology, placements)
        print_sim(out, tag, program, topology, placements)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--cache", type=Path, default=None, help="compiled records (default: the compile cache)")
    ap.add_argument("--sim-programs", type=int, default=10**9, help="simulate only the N smallest programs")
    args = ap.parse_args()
    if args.cache is None:
        from aoizora.stage2.compile_cache import default_compile_cache

        args.cache = default_compile_cache().root
    with open(args.out, "w") as out:
        for k, (key, slice_name, text) in enumerate(cached_programs(args.cache)):
            topology = get_topology(slice_name)
            program = build_program(text)
            if program.num_devices != topology.num_devices:
                continue
            fingerprint_program(out, f"{key} {slice_name}", program, topology, simulated=k < args.sim_programs)
        fingerprint_synthetic(out)


if __name__ == "__main__":
    main()
