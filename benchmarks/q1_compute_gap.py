"""Where a compiled Wan program's compute exceeds Stage 1's: Q1's compute per op kind beside Q2's
per compiled instruction kind, for one strategy of the space `aoizora plan` searches (splash
blocks fitted to the strategy and the chip), compiled over JAX's default order.

Q1 charges every op at its roofline with only the HBM bytes no fusion can avoid, and layout or
elementwise ops nothing; Q2 costs each compiled instruction by libtpu's cycle estimate (or the
kernel model), including the compute libtpu fuses into asynchronous collectives (its own row).
The difference between the two tables is what Q1 does not see.

    .venv/bin/python benchmarks/q1_compute_gap.py --model wan2.1-t2v-14b --topology v6e:2x4 --resolution 480p \\
        --frames 21 --strategy "data=2,context=4 | weights=replicated | attn=ulysses | blocks=2432/2048/1024"

`--shapes N` also lists, by opcode and result shape, the N largest groups of the instructions
outside matmul fusions, kernels and collectives (elementwise and layout fusions, copies, slices):
what Q1 takes to be fused away.

`--expert NAME` takes an expert deployment of the slice instead (e.g. `maxdiffusion-readme`),
compiled with its own libtpu flags as the planner compiles it.

Uses the compile cache (a miss compiles the strategy, minutes for Wan 14B).
"""

from __future__ import annotations

import argparse
import collections

from strategy_args import strategy_named


def main() -> None:
    from aoizora.models.registry import wan_space
    from aoizora.placement import enumerate_placements
    from aoizora.stage1.q1 import op_seconds
    from aoizora.stage1.search import analyse
    from aoizora.stage2 import compile_strategy, default_compile_cache
    from aoizora.topology import get_topology

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="wan2.1-t2v-14b")
    ap.add_argument("--topology", default="v6e:2x4")
    ap.add_argument("--resolution", default="480p")
    ap.add_argument("--frames", type=int, default=21)
    which = ap.add_mutually_exclusive_group(required=True)
    which.add_argument("--strategy", help="a strategy key, as `aoizora plan --stage1-only` prints it")
    which.add_argument("--expert", help="an expert deployment's name, as `aoizora plan --json` records it")
    ap.add_argument("--shapes", type=int, default=0, metavar="N",
                    help="also list the N largest groups, by opcode and result shape, of the compiled "
                         "instructions that are neither matmul fusions, kernels nor collectives")
    args = ap.parse_args()

    topo = get_topology(args.topology)
    # the space `aoizora plan` searches: splash blocks fitted to each strategy and the chip's VMEM
    space = wan_space(args.model, args.resolution, args.frames, generation=topo.generation)
    key, strategy, flags = _chosen(space, topo, args.strategy, args.expert)
    prediction, bound, *_ = analyse(space, strategy, topo)
    stage1: collections.Counter[str] = collections.Counter()
    for op in prediction.ops:
        stage1[("kernel " if op.opaque else "") + op.op] += op_seconds(op, topo) * op.multiplicity
    placement = enumerate_placements(topo, space.mesh_spec(strategy)).placements[0]
    program = compile_strategy(space, strategy, key, topo, placement, None, default_compile_cache(),
                               flags=flags).program

    print(f"Q1 {bound.seconds * 1e3:.1f} ms: compute {bound.compute_seconds * 1e3:.1f}, "
          f"communication {bound.comm_seconds * 1e3:.1f}")
    _print_table(f"Stage 1 compute by op ({sum(stage1.values()) * 1e3:.1f} ms):", stage1, 8)
    compiled = _compiled_by_kind(program, topo.hardware)
    _print_table(f"compiled compute by instruction, as Q2 costs it ({sum(compiled.values()) * 1e3:.1f} ms, "
                 f"over {placement.name}):", compiled, 8)
    if args.shapes:
        other, count = _other_by_shape(program, topo.hardware)
        _print_table(f"largest of the other compiled instructions ({sum(other.values()) * 1e3:.1f} ms), "
                     "by opcode, result shape and count per step:", other, args.shapes, count)


def _compiled_by_kind(program, hardware) -> collections.Counter:
    """Q2's compute seconds per step by compiled instruction kind."""
    compiled: collections.Counter[str] = collections.Counter()
    for node in program.nodes:
        if node.collective is None:
            kind = node.custom_call_target or node.opcode + (f" ({node.fusion_kind})" if node.fusion_kind else "")
        elif node.flops:  # libtpu fuses consumers (e.g. the dots after a weight all-gather) into the collective
            kind = "compute inside collective fusions"
        else:
            continue
        compiled[kind] += node.compute_seconds(hardware) * node.multiplicity
    return compiled


def _other_by_shape(program, hardware) -> tuple[collections.Counter, collections.Counter]:
    """Q2's compute seconds per step, and executions per step, of the instructions outside matmul
    output fusions (kOutput), custom-call kernels and collectives, by opcode and result shape."""
    seconds: collections.Counter[str] = collections.Counter()
    count: collections.Counter[str] = collections.Counter()
    for node in program.nodes:
        if node.collective is not None or node.custom_call_target or node.fusion_kind == "kOutput":
            continue
        kind = f"{node.opcode}{f' ({node.fusion_kind})' if node.fusion_kind else ''} {node.shape}"
        seconds[kind] += node.compute_seconds(hardware) * node.multiplicity
        count[kind] += node.multiplicity
    return seconds, count


def _print_table(title: str, seconds: collections.Counter, rows: int, count: collections.Counter | None = None) -> None:
    print(title)
    for kind, s in seconds.most_common(rows):
        times = f"  x{count[kind]}" if count is not None else ""
        print(f"  {kind[:72]:72s} {s * 1e3:9.2f} ms{times}")


def _chosen(space, topo, strategy_key: str | None, expert_name: str | None):
    """(key, strategy, compiler flags) of the strategy or expert deployment the command names."""
    from aoizora.plan.planner import expert_entries
    from aoizora.toolchain import environment_flags

    if expert_name is not None:
        entries = expert_entries(space, topo, environment_flags())
        entry = next((e for e in entries if e.deployment.name == expert_name), None)
        if entry is None:
            names = ", ".join(e.deployment.name for e in entries) or "none"
            raise SystemExit(f"no expert deployment {expert_name!r} on {topo.name} (there: {names})")
        return entry.key, entry.deployment.strategy, entry.flags
    return strategy_key, strategy_named(space, topo, strategy_key), None


if __name__ == "__main__":
    main()
