"""The order libtpu scheduled a compiled Wan strategy in: its collectives (start and done of each
asynchronous one), kernels and larger fusions inside the loop over the transformer blocks, as the
cost model reads them, with the compute time Q2 gives each (a collective's transfer is not in it:
that depends on the placement).

    .venv/bin/python benchmarks/compiled_schedule.py --model wan2.1-t2v-1.3b --topology v5e:2x4 --resolution 480p \\
        --frames 81 --strategy "context=8 | weights=replicated | attn=ring | blocks=1024/2048/1024"

What Q1 can hide behind compute is what a schedule may run beside it; this shows what libtpu's
does (e.g. whether a ring's rotations run beside its kernels). The strategy is compiled over JAX's
default order, splash blocks fitted to the slice as `aoizora plan` searches (compile cache used).
"""

from __future__ import annotations

import argparse

from strategy_args import add_cell_and_strategy, chosen_strategy


def main() -> None:
    from aoizora.hlo.program import NodeKind
    from aoizora.placement import enumerate_placements
    from aoizora.stage2 import compile_strategy, default_compile_cache

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_cell_and_strategy(ap)
    ap.add_argument("--min-ms", type=float, default=0.2, help="list compute instructions of at least this many ms")
    ap.add_argument("--rows", type=int, default=80, help="stop after this many rows")
    args = ap.parse_args()

    topo, space, strategy = chosen_strategy(args)
    placement = enumerate_placements(topo, space.mesh_spec(strategy)).placements[0]
    program = compile_strategy(space, strategy, args.strategy, topo, placement, None, default_compile_cache()).program
    blocks = max(n.multiplicity for n in program.nodes)  # the loop over the transformer blocks
    listed = (NodeKind.COLLECTIVE_START, NodeKind.COLLECTIVE_DONE, NodeKind.COLLECTIVE, NodeKind.OPAQUE)
    print(f"{args.strategy} on {topo.name} over {placement.name}: instructions run {blocks} times per step")
    rows = 0
    for node in program.nodes:
        seconds = node.compute_seconds(topo.hardware)
        if node.multiplicity != blocks or (node.kind not in listed and seconds * 1e3 < args.min_ms):
            continue
        kind = program.collectives[node.collective].kind.value if node.collective is not None else ""
        print(f"{node.index:6d} {node.kind.value:17s} {node.opcode[:28]:28s} {kind:18s} "
              f"{seconds * 1e3:7.3f} ms  {str(node.shape)[:64]}")
        rows += 1
        if rows >= args.rows:
            break


if __name__ == "__main__":
    main()
