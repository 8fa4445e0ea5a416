"""How large a splash block each TPU generation's compiler accepts (its scoped VMEM), measured by compiling.

    .venv/bin/python benchmarks/hardware/splash_vmem.py [--out benchmarks/hardware/data/splash_vmem.json]

A splash call keeps one query block's working set in VMEM: the block of Q, the running output,
max and sum in float32 (block_q x 128 lanes each), and the score tile (block_q x block_kv_compute
in float32), double-buffered K/V blocks beside them; the model vmaps the kernel over its local
batch (as MaxDiffusion's wrapper does), which adds to it, and the compiler's scoped allocation
also grows with the call's query and key lengths (on v6e at block_q 4,608, in the compiler's
report against its 32.00M limit: 32.67M at 8,192 queries x 8,192 keys, 36.05M at 8,192 x 65,536,
43.92M at 65,536 x 8,192). libtpu refuses a program
whose kernels overflow the scoped VMEM ("CompileTimeScopedVmemOom"), so the limit is a fact of the
compiler, not of a data sheet: for each generation this script compiles the model's own
`splash_attention` (with log-sum-exp residuals, the ring variant's larger working set; head_dim
128, bf16, block_kv 2048 and block_kv_compute 1024, MaxDiffusion's large blocks; queries and keys
`SPLASH_LIMIT_LENGTH` long, the longest call the limit is used for) on one compile-only device and
bisects the largest block_q, a multiple of 128, that compiles at local batch 1 and 2 (what Wan's
CFG batch of 2 leaves a device). They are `splash_max_block_q` in `src/aoizora/data/hardware.json`.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

from aoizora.models.wan.kernels.splash_tiles import (
    LARGE_BLOCK_KV,
    LARGE_BLOCK_KV_COMPUTE,
    SPLASH_LIMIT_LENGTH,
    compile_splash_call,
)
from aoizora.models.wan.transformer.strategy import SplashBlocks
from aoizora.toolchain import toolchain_versions

DATA = Path(__file__).parent / "data" / "splash_vmem.json"
SLICES = {"v4": "v4:2x2x1", "v5e": "v5e:2x2", "v5p": "v5p:2x2x1", "v6e": "v6e:2x2", "tpu7x": "tpu7x:2x2x1"}
ROW = 128  # block_q steps (lanes)
MAX_ROWS = 8192
HEADS, HEAD_DIM = 4, 128


def compiles(topology: str, batch: int, block_q: int) -> tuple[bool, str]:
    """Whether the splash call with these blocks compiles for one device of `topology`, and the
    compiler's VMEM figure when it does not."""
    try:
        compile_splash_call(topology, batch, SPLASH_LIMIT_LENGTH, SPLASH_LIMIT_LENGTH,
                            SplashBlocks(block_q, LARGE_BLOCK_KV, LARGE_BLOCK_KV_COMPUTE), HEADS, HEAD_DIM)
    except Exception as exc:  # libtpu's refusal: a RESOURCE_EXHAUSTED XlaRuntimeError
        text = str(exc)
        if "vmem" not in text.lower():
            raise
        used = re.search(r"Used ([0-9.]+[KMG]) of ([0-9.]+[KMG]) vmem", text)
        return False, f"used {used.group(1)} of {used.group(2)}" if used else text.splitlines()[0][:160]
    return True, ""


def largest_block_q(topology: str, batch: int) -> dict:
    """Bisect the largest block_q (a multiple of `ROW`, at most `MAX_ROWS`) that compiles."""
    lo, hi, refusal = 0, MAX_ROWS // ROW + 1, ""  # lo rows compile (0: none known), hi rows do not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        ok, why = compiles(topology, batch, mid * ROW)
        if ok:
            lo = mid
        else:
            hi, refusal = mid, why
    return {"batch": batch, "largest_block_q": lo * ROW, "refused_block_q": hi * ROW if hi * ROW <= MAX_ROWS else None,
            "refusal": refusal}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DATA)
    ap.add_argument("--generations", nargs="*", default=list(SLICES))
    args = ap.parse_args()
    rows = []
    for gen in args.generations:
        for batch in (1, 2):
            row = {"generation": gen, "topology": SLICES[gen], **largest_block_q(SLICES[gen], batch)}
            print(json.dumps(row), flush=True)
            rows.append(row)
    out = {"_about": __doc__.split("\n\n")[2].replace("\n", " "),
           "kernel": {"length": SPLASH_LIMIT_LENGTH, "block_kv": LARGE_BLOCK_KV,
                      "block_kv_compute": LARGE_BLOCK_KV_COMPUTE, "heads": HEADS,
                      "head_dim": HEAD_DIM, "dtype": "bf16", "residuals": True},
           "toolchain": toolchain_versions(), "rows": rows}
    args.out.write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
