"""Where a splash call's segment ids live, and what that does to its scoped VMEM, measured by compiling.

    .venv/bin/python benchmarks/hardware/splash_vmem_operands.py [--topology v6e:4x4] [--batch 2] [--block-q N]

`splash_max_block_q` (`splash_vmem.py`) is the largest Q block of the model's splash call compiled
alone. The call's segment ids are arrays the program builds (the queries' are a constant
broadcast to block_q x 128 int32 lanes per block); libtpu's memory-space assignment decides
whether each lives in VMEM or in HBM, and the call's scoped VMEM allocation differs with that.
This compiles, for one device of `--topology` at local batch `--batch` (default: v6e, batch 2,
its limit of 2,816 rows; 10 heads of 128, 18,944 queries and keys padded to the blocks, as in
Wan 14B's ring steps on v6e:4x4 at 720p/81):

1. the call alone, and the memory space of its segment-id operands in the compiled program
   (`S(1)`: VMEM; otherwise HBM);
2. the call alone under a scoped VMEM limit 2 MiB below the default, so that the compiler's
   refusal states the call's scoped allocation;
3. two calls merged by log-sum-exp as a ring step merges them, the second on keys the program
   computes: the compiler's refusal, or that it compiles;
4. the same two calls at 256 rows fewer, and where each call's segment ids live.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys

from aoizora.models.wan.kernels.splash_tiles import LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE

HEADS, HEAD_DIM, TOKENS = 10, 128, 18944


def _program(topology: str, batch: int, block_q: int, merged: bool):
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    from aoizora.models.wan.transformer.attention import splash_attention
    from aoizora.toolchain import compile_only_devices

    sharding = NamedSharding(Mesh(np.array(compile_only_devices(topology)[:1]), ("x",)), PartitionSpec())

    def call(q, k, v):
        return splash_attention(q, k, v, None, residuals=True, block_q=block_q, block_kv=LARGE_BLOCK_KV,
                                block_kv_compute=LARGE_BLOCK_KV_COMPUTE)

    def merge(q, k, v):
        o1, l1 = call(q, k, v)
        o2, l2 = call(q, k * 2, v)
        both = jnp.logaddexp(l1, l2)
        w1 = jnp.exp(l1 - both).swapaxes(1, 2)[..., None]
        w2 = jnp.exp(l2 - both).swapaxes(1, 2)[..., None]
        return o1.astype(jnp.float32) * w1 + o2.astype(jnp.float32) * w2

    shape = jax.ShapeDtypeStruct((batch, TOKENS, HEADS, HEAD_DIM), jnp.bfloat16)
    return jax.jit(merge if merged else call, in_shardings=(sharding,) * 3).lower(shape, shape, shape)


def _refusal(exc: Exception) -> str:
    found = re.search(r"Scoped allocation with size (\S+) and limit (\S+)", str(exc))
    if found is None:
        raise exc
    return f"refused: scoped allocation {found.group(1)} against a limit of {found.group(2)}"


def _segment_id_placements(hlo: str) -> list[str]:
    """For each splash call of a compiled program, where its two segment-id operands live."""
    definitions = {}
    for line in hlo.splitlines():
        m = re.match(r"\s*(?:ROOT )?(%\S+) = ", line)
        if m:
            definitions[m.group(1)] = line
    out = []
    for line in hlo.splitlines():
        if "tpu_custom_call" not in line or " = " not in line:
            continue
        name = line.split(" = ")[0].strip()
        operands = re.search(r"custom-call\(([^)]*)\)", line).group(1)
        operands = [o.strip() for o in re.sub(r"/\*index=\d+\*/", "", operands).split(",")]
        placed = []
        for which, operand in (("queries'", operands[5]), ("keys'", operands[6])):
            definition = definitions.get(operand, "")
            space = "VMEM" if re.search(r"^\s*\S+ = \S+?\{[^}]*S\(1\)\}", definition) else "HBM"
            placed.append(f"{which} segment ids {operand} in {space}")
        out.append(f"{name}: " + "; ".join(placed))
    return out


#: the four steps of the module docstring: (what is compiled, two calls merged, scoped VMEM limit
#: lowered by 2 MiB, Q block rows below --block-q)
STEPS = {
    1: ("the call alone", False, False, 0),
    2: ("the call alone", False, True, 0),
    3: ("two calls merged", True, False, 0),
    4: ("two calls merged", True, False, 256),
}


def _run(step: int, topology: str, batch: int, block_q: int) -> None:
    """One step, in this process (the scoped VMEM limit is a process-wide libtpu flag)."""
    what, merged, lowered, _ = STEPS[step]
    label = f"{step}. {what}, {block_q}-row Q blocks" + (", limit lowered by 2 MiB" if lowered else "")
    try:
        hlo = _program(topology, batch, block_q, merged).compile().as_text()
    except Exception as exc:  # libtpu's refusal
        print(f"{label}: {_refusal(exc)}")
        return
    print(f"{label}: compiles; " + " | ".join(_segment_id_placements(hlo)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--topology", default="v6e:4x4")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--block-q", type=int, help="default: the generation's splash_max_block_q at --batch")
    ap.add_argument("--default-limit-mib", type=int, default=32, help="the generation's default scoped VMEM limit")
    ap.add_argument("--step", type=int, choices=tuple(STEPS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.block_q is None:
        from aoizora.topology import get_topology
        args.block_q = get_topology(args.topology).hardware.splash_max_block_q[args.batch]
    if args.step:
        _run(args.step, args.topology, args.batch, args.block_q)
        return
    print(f"{args.topology}, local batch {args.batch}, {HEADS} heads of {HEAD_DIM}, {TOKENS} queries and keys",
          flush=True)
    for step, (_, _, lowered, fewer_rows) in STEPS.items():
        flags = f"--xla_tpu_scoped_vmem_limit_kib={(args.default_limit_mib - 2) * 1024}" if lowered else ""
        env = {**os.environ, "LIBTPU_INIT_ARGS": f"{os.environ.get('LIBTPU_INIT_ARGS', '')} {flags}".strip()}
        child = subprocess.run([sys.executable, __file__, "--topology", args.topology, "--batch", str(args.batch),
                                "--block-q", str(args.block_q - fewer_rows), "--step", str(step)],
                               env=env, capture_output=True, text=True)
        if child.returncode:
            raise SystemExit(child.stderr.strip().splitlines()[-1])
        print(child.stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
