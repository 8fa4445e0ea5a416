"""The JSON report of ``aoizora hlo``: collectives grouped, totals scaled by loop trip counts.

Shape of the report::

    {"module", "num_devices",
     "collectives": [{kind, mode, groups, dtype, bytes_per_device, send_bytes_per_device,
                      recv_bytes_per_device, count, algorithm, names}],
     "totals": {collective_bytes_per_device, collective_send_bytes_per_device, flops,
                hbm_bytes, estimated_cycles, collectives, loops},
     "loops": [{name, trip_count, trip_count_source}],
     "opaque": [{name, target, kernel_name, count, operand_shapes, result_shape}],
     "unknown_ops": [...]}

``bytes_per_device`` is the collective's payload on one device (its input buffer: the shard
for an all-gather, the full buffer for an all-reduce / reduce-scatter, see
`aoizora.hlo.program`); ``count`` is how many times it runs per program execution
(the multiplicities of identical collectives, loop trip counts included), and the totals are
``sum(bytes × count)``.
"""

from __future__ import annotations

from typing import Any

from aoizora.hlo.program import NodeKind, Program


def summarize(program: Program) -> dict[str, Any]:
    """The ``aoizora hlo --json`` report of a program."""
    collectives = _collective_groups(program)
    return {
        "module": program.module_name,
        "num_devices": program.num_devices,
        "collectives": collectives,
        "totals": {
            "collective_bytes_per_device": sum(e["bytes_per_device"] * e["count"] for e in collectives),
            "collective_send_bytes_per_device": sum(
                e["send_bytes_per_device"] * e["count"] for e in collectives
            ),
            "flops": program.total_flops(),
            "hbm_bytes": sum(n.hbm_bytes * n.multiplicity for n in program.nodes),
            "estimated_cycles": program.total_estimated_cycles(),
            "collectives": sum(e["count"] for e in collectives),
            "loops": len(program.loops),
        },
        "loops": [
            {"name": lp.name, "trip_count": lp.trip_count, "trip_count_source": lp.trip_count_source}
            for lp in program.loops
        ],
        "opaque": _opaque_kernels(program),
        "unknown_ops": list(program.unknown_ops),
    }


def _collective_groups(program: Program) -> list[dict[str, Any]]:
    """One entry per distinct collective (kind, mode, devices, dtype, traffic, algorithm), in first-seen
    order, with how many times it runs and the names of its instances."""
    groups: dict[tuple[Any, ...], dict[str, Any]] = {}
    for c in program.collectives:
        algo = c.algorithm.to_json() if c.algorithm else None
        key = (c.kind.value, c.mode.value, c.groups, c.source_target_pairs, c.dtype, c.payload_bytes, c.send_bytes,
               c.recv_bytes, repr(algo))
        entry = groups.get(key)
        if entry is None:
            entry = {
                "kind": c.kind.value,
                "mode": c.mode.value,
                "groups": [list(g) for g in c.groups],
                "source_target_pairs": [list(p) for p in c.source_target_pairs],
                "dtype": c.dtype,
                "bytes_per_device": c.payload_bytes,
                "send_bytes_per_device": c.send_bytes,
                "recv_bytes_per_device": c.recv_bytes,
                "result_bytes_per_device": c.result_bytes,
                "count": 0,
                "algorithm": algo,
                "names": [],
            }
            groups[key] = entry
        entry["count"] += c.multiplicity
        entry["names"].append(c.name)
    return list(groups.values())


def _opaque_kernels(program: Program) -> list[dict[str, Any]]:
    """One entry per opaque kernel call site (target and name), with how many times it runs."""
    opaque: dict[tuple[str, str], dict[str, Any]] = {}
    for n in program.nodes:
        if n.kind is not NodeKind.OPAQUE:
            continue
        op = program.opaque_op(n)
        key = (op.target, op.name)
        if key not in opaque:
            opaque[key] = {
                "name": op.name,
                "target": op.target,
                "kernel_name": op.kernel_name,
                "count": 0,
                "operand_shapes": [str(s) for s in op.operand_shapes],
                "result_shape": str(op.result_shape),
                "flops": n.flops,
                "seconds": n.seconds,
            }
        opaque[key]["count"] += n.multiplicity
    return list(opaque.values())
