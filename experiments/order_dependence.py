"""Does libtpu's compiled program depend on the mesh's device order? Compile each legal strategy
of a small transformer over several placements of one slice and compare the programs.

Stage 2 compiles a strategy once (over its first placement), scores every placement with that
program, then recompiles the leading pair over its own device order. This probe measures when
the recompile can matter: for each strategy it prints whether the programs compiled over the
other placements equal the first one's (source locations aside), and for those that differ, the
first differing field of a collective's backend config.

    .venv/bin/python experiments/order_dependence.py --topology v5e:2x4 --placements 5
"""

from __future__ import annotations

import argparse
import difflib
import re

_METADATA = re.compile(r", metadata=\{[^}]*\}")
_LOCATION_TABLES = re.compile(r'^\s*\d+ (\{file_name_id.*|"[^"]*")$', re.M)  # the stack-frame tables


def program_text(compiled_text: str) -> str:
    """The compiled module without source locations (which name the tracing code's lines)."""
    return _LOCATION_TABLES.sub("", _METADATA.sub("", compiled_text))


def first_difference(a: str, b: str) -> str:
    """The first differing line pair, cut around where they differ."""
    for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0):
        if line.startswith("-") and not line.startswith("---"):
            old = line[1:]
        elif line.startswith("+") and not line.startswith("+++"):
            new = line[1:]
            i = next((i for i, (x, y) in enumerate(zip(old, new, strict=False)) if x != y), min(len(old), len(new)))
            return f"...{old[max(0, i - 80):i + 80]}...\n      vs ...{new[max(0, i - 80):i + 80]}..."
    return ""


def main() -> None:
    from aoizora.placement import enumerate_placements
    from aoizora.toolchain import compile_lowered
    from aoizora.topology import get_topology
    from aoizora.workloads import TransformerSpace
    from aoizora.workloads.transformer import TransformerConfig

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--topology", default="v5e:2x4")
    ap.add_argument("--placements", type=int, default=5, help="placements compiled per strategy")
    ap.add_argument("--strategies", type=int, default=8, help="strategies with at least two placements")
    args = ap.parse_args()
    topo = get_topology(args.topology)
    space = TransformerSpace(TransformerConfig(layers=2, dim=512, heads=8, head_dim=64, mlp=2048, seq=1024, batch=4))
    done = differ = 0
    for cand in (c for c in space.candidates(topo.num_devices) if c.legal):
        placements = enumerate_placements(topo, space.mesh_spec(cand.strategy)).placements[:args.placements]
        if len(placements) < 2:
            continue
        texts = {p.name: program_text(compile_lowered(space.lowering_inputs(cand.strategy, p.jax_mesh(topo)).lower(),
                                                      None).as_text()) for p in placements}
        first, base = next(iter(texts.items()))
        other = [name for name, t in texts.items() if t != base]
        print(f"{cand.key}: {len(texts) - len(other)} of {len(texts)} placements compile to {first}'s program")
        for name in other:
            print(f"  {name}: {first_difference(base, texts[name])}")
        done += 1
        differ += bool(other)
        if done >= args.strategies:
            break
    print(f"{differ} of {done} strategies compile to another program on some placement of {topo.name}")


if __name__ == "__main__":
    main()
