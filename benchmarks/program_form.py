"""aoizora's Wan program and MaxDiffusion's own, side by side, per attention variant on a slice.

For each attention variant (all-gather, Ulysses, ring, 2D context) one strategy of Wan 2.1 14B
(720p/81 by default; data=2 × context, replicated weights, the splash blocks and flags aoizora fits
for the slice) is compiled twice by libtpu for the slice, over the same device order (the
strategy's first placement): as aoizora's Wan step, and as MaxDiffusion's own step built through its
classes with the overrides the export writes (`aoizora plan --program maxdiffusion`,
`aoizora.models.maxdiffusion.program`). Both go through the compile cache and are costed by Q2 and
the simulator. Per program it records the collectives by kind (count and payload bytes per step,
loop trips counted), the fusions executed per step, the bytes the SparseCore data-format calls
relayout per step (TPU7x offloads relayouts to its SparseCores; 0 elsewhere), what Q2 charges for
them and how many of those bytes move once a step, outside the layer loop, the predicted step
and its compute and exposed-collective parts, and the per-device HBM libtpu reports. Needs MaxDiffusion importable
(CONTRIBUTING.md, "MaxDiffusion's own program"); one compile runs at a time.

    MAXDIFFUSION_DIR=... python benchmarks/program_form.py [--topology v6e:2x4] [--model wan2.1-t2v-14b]
        [--resolution 720p] [--frames 81] [--variants allgather,ulysses,ring,ulysses_ring] [--json OUT]

`--json` writes every record as it comes (`docs/data/program-form/` holds the committed runs).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent / "hardware"))
from step_breakdown import relayout_computations  # noqa: E402

VARIANTS = ("allgather", "ulysses", "ring", "ulysses_ring")


def pick(space: Any, devices: int, variant: str) -> Any:
    """The variant's strategy: data=2 × context (2D context: Ulysses 2 × ring), replicated weights,
    one Ulysses pass, as the space enumerates it (its blocks fitted to the slice)."""
    for cand in space.candidates(devices):
        s = cand.strategy
        if (cand.legal and s.attention == variant and s.data == 2 and s.context == devices // 2
                and s.weights == "replicated" and s.ulysses_chunks == 1 and s.tensor == 1
                and (variant != "ulysses_ring" or s.context_ulysses == 2)):
            return s
    raise SystemExit(f"no legal {variant} strategy with data=2 on {devices} devices")


def describe(program: Any) -> dict[str, Any]:
    """Collectives by kind (count and payload bytes per step), fusions and custom calls per step."""
    kinds: Counter[str] = Counter()
    payload: Counter[str] = Counter()
    for c in program.collectives:
        kinds[c.kind.value] += c.multiplicity
        payload[c.kind.value] += c.payload_bytes * c.multiplicity
    fusions = sum(n.multiplicity for n in program.nodes if n.opcode == "fusion")
    calls = sum(n.multiplicity for n in program.nodes if n.opcode == "custom-call")
    return {"collectives": dict(kinds), "collective_bytes": dict(payload),
            "collective_bytes_total": int(sum(payload.values())), "fusions": fusions, "custom_calls": calls}


def relayout_copies(program: Any, module: Any) -> list[Any]:
    """The copies the SparseCore data-format calls run (TPU7x offloads relayouts to its SparseCores)."""
    inside = relayout_computations(module)
    return [n for n in program.nodes if n.computation in inside and n.opcode == "copy"]


def relayout_bytes(program: Any, module: Any) -> int:
    """Bytes the SparseCore data-format calls relayout per step: each copy they run reads and
    writes its array once (loop trips counted)."""
    return int(sum(n.hbm_bytes // 2 * n.multiplicity for n in relayout_copies(program, module)))


def relayout_parts(program: Any, module: Any, hardware: Any) -> dict[str, Any]:
    """What Q2 charges for those copies per step (each costed as Q2 costs a copy), and the bytes of
    those run once a step, outside the layer loop (in MaxDiffusion's TPU7x programs, its weights)."""
    copies = relayout_copies(program, module)
    return {"sparsecore_relayout_q2_seconds": sum(n.compute_seconds(hardware) * n.multiplicity for n in copies),
            "sparsecore_relayout_bytes_once_per_step": int(sum(n.hbm_bytes // 2 for n in copies if n.loop is None))}


def compiled_module(space: Any, strategy: Any, topology: Any, placement: Any, cache: Any, flags: Any) -> Any:
    """The compiled module `compile_strategy` stored in `cache` for this program, parsed."""
    from aoizora.hlo.parser import parse_hlo
    from aoizora.stage2.compiling import form_flags
    from aoizora.toolchain import toolchain_versions

    mesh = placement.jax_mesh(topology)
    form = space.compiled_form(strategy)  # what `compile_strategy` compiles, at the flags it compiles with
    text = space.compile_inputs(form, mesh).lower().as_text()
    key_flags = form_flags(space, form, flags)
    record = cache.get(cache.key(text, topology.name, [d.id for d in mesh.devices.flat], toolchain_versions(),
                                 key_flags))
    return parse_hlo(record.hlo_text)


def run(space: Any, strategy: Any, topology: Any, cache: Any) -> dict[str, Any]:
    from aoizora.cost import CostModel
    from aoizora.sim import simulate
    from aoizora.stage2.compiling import compile_strategy, shared_compile_placement

    placement = shared_compile_placement(space, topology, strategy)
    t0 = time.perf_counter()
    # as Stage 2 compiles it: its compiled form, at the flags that form needs (none of the plan's)
    compiled = compile_strategy(space, strategy, strategy.key(), topology, placement, 3600, cache, None)
    module = compiled_module(space, strategy, topology, placement, cache, None)
    q2 = CostModel(topology).evaluate(compiled.program, placement)
    return {"program": space.program, "module": compiled.program.module_name, "step_seconds": q2.step_seconds,
            "sim_step_seconds": simulate(compiled.program, topology, placement).step_seconds,
            "compute_seconds": q2.compute_seconds, "exposed_comm_seconds": q2.exposed_comm_seconds,
            "comm_seconds": q2.comm_seconds, "memory_bytes": compiled.memory_bytes,
            **describe(compiled.program), "sparsecore_relayout_bytes": relayout_bytes(compiled.program, module),
            **relayout_parts(compiled.program, module, topology.hardware),
            "compile_seconds": compiled.compile_seconds,
            "cached": compiled.from_cache, "wall_seconds": time.perf_counter() - t0,
            "load_average": os.getloadavg()[0]}


def line(variant: str, rec: dict[str, Any]) -> str:
    if "error" in rec:
        return f"{variant:<13}{rec['program']:<13}error: {rec['error'][:200]}"
    c = rec["collectives"]
    return (f"{variant:<13}{rec['program']:<13}step {rec['step_seconds'] * 1e3:9.1f} ms  sim "
            f"{rec['sim_step_seconds'] * 1e3:9.1f} ms  exposed comm {rec['exposed_comm_seconds'] * 1e3:7.1f} ms  "
            f"collectives {sum(c.values()):5d} ({rec['collective_bytes_total'] / 2**30:6.2f} GiB)  "
            f"fusions {rec['fusions']:6d}  SparseCore relayouts {rec['sparsecore_relayout_bytes'] / 2**30:6.2f} GiB"
            + ("  (cached)" if rec["cached"] else ""))


def add_workload_arguments(ap: argparse.ArgumentParser, topology: str) -> None:
    """The request a side-by-side run compiles: slice, model, video, attention variants, output."""
    ap.add_argument("--topology", default=topology)
    ap.add_argument("--model", default="wan2.1-t2v-14b")
    ap.add_argument("--resolution", default="720p")
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--json", type=Path, default=None)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_workload_arguments(ap, "v6e:2x4")
    args = ap.parse_args()
    from aoizora.models import registry
    from aoizora.models.maxdiffusion.overrides import facts
    from aoizora.stage2.compile_cache import default_compile_cache
    from aoizora.topology import get_topology

    topo = get_topology(args.topology)
    cache = default_compile_cache()
    spaces = {p: registry.wan_space(args.model, args.resolution, args.frames, generation=topo.generation, program=p)
              for p in args.programs.split(",")}
    runs: list[dict[str, Any]] = []
    for variant in args.variants.split(","):
        strategy = pick(next(iter(spaces.values())), topo.num_devices, variant)
        for name, space in spaces.items():
            try:
                rec = run(space, strategy, topo, cache)
            except Exception as exc:  # one compile's failure is a record, not the end of the run
                rec = {"program": name, "error": f"{type(exc).__name__}: {exc}"}
            rec = {"variant": variant, "strategy": strategy.key(), **rec}
            runs.append(rec)
            print(line(variant, rec), flush=True)
            if args.json:
                doc = {"what": f"aoizora's and MaxDiffusion's Wan programs per attention variant on {topo.name}",
                       "maxdiffusion": {"repository": facts()["repository"], "facts_commit": facts()["commit"],
                                        **({"commit": spaces["maxdiffusion"].program_source.commit}
                                           if "maxdiffusion" in spaces else {})},
                       "command": " ".join(["benchmarks/program_form.py", *sys.argv[1:]]), "runs": runs}
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(doc, indent=1) + "\n")


if __name__ == "__main__":
    main()
