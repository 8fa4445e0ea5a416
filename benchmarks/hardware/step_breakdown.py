"""Where one configuration's predicted step goes: one layer of the compiled program, as Q2 schedules it.

    PYTHONPATH=src python benchmarks/hardware/step_breakdown.py ENTRY_KEY [CONFIG ...] [--json OUT]

For each configuration of a hardware-suite entry (all of them when none is named) it compiles the
program (or reads the compile cache, as `run.py` does), and prints, for the loop with the most
trips (the scanned transformer layers):

* the compute of one trip by kind: the attention kernel calls (opaque custom calls, costed by the
  kernel profile), fusions, copies, and the SparseCore data-format calls (relayouts libtpu
  offloads on TPU7x) with their bytes;
* each collective of one trip: its time alone (Q2's link model) and how long the compute stream
  waited for it (its exposed share in Q2's schedule).

This is the evidence for statements such as "Q2 charges all of flash's K/V all-gather": it reads
the compiled schedule, not the model's assumptions.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from common import compile_config, entry_configs  # noqa: E402
from run import MODULES  # noqa: E402


def _entry(key: str) -> Any:
    for name in MODULES:
        for entry in importlib.import_module(name).entries():
            if entry.key == key:
                return entry
    raise SystemExit(f"no hardware-suite entry {key!r}; `python benchmarks/hardware/run.py` lists them")


def relayout_computations(module: Any) -> set[str]:
    """The computations a TPU7x SparseCore data-format call runs (a relayout libtpu offloads to the
    SparseCores), with the computations they call in turn, in a parsed module."""
    def callees(comp: Any, only_data_format: bool) -> list[str]:
        return [module.computation(inst.attr("to_apply")).name for inst in comp.instructions
                if inst.opcode == "call-start" and inst.attr("to_apply")
                and (not only_data_format or inst.name.startswith("sparse-core-data-format-call"))]

    todo = [name for comp in module.computations.values() for name in callees(comp, True)]
    found: set[str] = set()
    while todo:
        name = todo.pop()
        if name not in found:
            found.add(name)
            todo.extend(callees(module.computation(name), False))
    return found


def _kind(node: Any, relayouts: set[str]) -> str:
    if node.computation in relayouts:
        return "SparseCore data-format calls (relayouts)"
    if node.kind.value == "opaque":
        return f"kernel {node.custom_call_target or node.opcode}"
    if node.opcode == "copy" or node.opcode.startswith("copy-"):
        return "copy"
    if node.opcode == "fusion":
        return f"fusion {node.fusion_kind or ''}".strip()
    return node.opcode


def breakdown(config: Any, cache: Any) -> dict[str, Any]:
    """One trip of the longest loop of `config`'s program: compute by kind, collectives alone and exposed."""
    from aoizora.cost.model import CostModel, node_seconds

    compiled = compile_config(config, cache)
    program, topology, placement = compiled.program, compiled.topology, compiled.placement
    relayouts = relayout_computations(compiled.module)
    loop = max(program.loops, key=lambda lp: lp.trip_count or 0)
    q2 = CostModel(topology).evaluate(program, placement, timeline=True)
    compute: dict[str, float] = defaultdict(float)
    relayout_bytes = 0.0
    for node in program.nodes:
        if node.loop != loop.index:
            continue
        seconds = node_seconds(node, topology) or 0.0
        kind = _kind(node, relayouts)
        compute[kind] += seconds * node.multiplicity / (loop.multiplicity or 1)
        if kind.startswith("SparseCore") and node.opcode == "copy":
            relayout_bytes += node.hbm_bytes / 2  # read and written once
    compute_ms = {k: 1e3 * v for k, v in sorted(compute.items(), key=lambda kv: -kv[1])}
    in_loop = {n.collective for n in program.nodes if n.loop == loop.index and n.collective is not None}
    first_trip = [s for s in q2.timeline or [] if s["kind"] == "wait"]
    waited: dict[str, float] = defaultdict(float)
    body_end = next((s["start"] for s in q2.timeline or [] if s["kind"] == "loop"), float("inf"))
    for seg in first_trip:
        if seg["start"] < body_end:
            waited[seg["name"]] += seg["end"] - seg["start"]
    collectives = [{"name": est.name, "kind": est.kind, "alone_ms": 1e3 * est.seconds,
                    "exposed_ms": 1e3 * waited.get(est.name, 0.0) if coll.mode.value != "sync" else 1e3 * est.seconds,
                    "bottleneck_MB": est.bottleneck_bytes / 1e6}
                   for coll, est in zip(program.collectives, q2.collectives, strict=True) if coll.index in in_loop]
    return {"config": config.name, "loop": loop.name, "trips": loop.trip_count, "step_seconds": q2.step_seconds,
            "compute_ms": compute_ms, "relayout_MB_per_trip": relayout_bytes / 1e6,
            "collectives": sorted(collectives, key=lambda c: -c["alone_ms"])}


def _print(result: dict[str, Any]) -> None:
    print(f"== {result['config']}: step {result['step_seconds']:.3f} s; one trip of {result['loop']} "
          f"(x{result['trips']}):")
    print(f"   SparseCore relayouts: {result['relayout_MB_per_trip']:.0f} MB per trip")
    for kind, ms in result["compute_ms"].items():
        if ms >= 0.01:
            print(f"   compute {kind:<45} {ms:9.3f} ms")
    for c in result["collectives"]:
        if c["alone_ms"] >= 0.01:
            print(f"   {c['kind']:<18} {c['name'][:48]:<48} alone {c['alone_ms']:8.3f} ms, "
                  f"exposed {c['exposed_ms']:8.3f} ms"
                  f" ({c['bottleneck_MB']:.0f} MB on its busiest link)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("entry")
    parser.add_argument("configs", nargs="*")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args(argv)
    from aoizora.stage2.compile_cache import default_compile_cache

    entry = _entry(args.entry)
    configs = list(entry_configs(entry))
    chosen = [c for c in configs if not args.configs or c.name in args.configs]
    cache = default_compile_cache()
    results = [breakdown(c, cache) for c in chosen]
    for r in results:
        _print(r)
    if args.json:
        Path(args.json).write_text(json.dumps({"entry": args.entry, "configs": results}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
