"""What a splash call's blocks cost in scoped VMEM, per generation, measured by compiling.

    .venv/bin/python benchmarks/hardware/splash_vmem_rule.py [--generations v6e tpu7x ...] [--core]
        [--out benchmarks/hardware/data/splash_vmem_rule.json]

(the committed data: `--generations v6e tpu7x`, then `--core --generations v5e v5p v4`, which
adds to the file; each probe compiles an 81,920-long call in seconds, and the two runs take
about 35 and 15 minutes of compiles on one core)

libtpu gives a Pallas kernel's VMEM buffers from its scoped VMEM, whose size is the flag
`--xla_tpu_scoped_vmem_limit_kib` (a compiler option of one compile here), and refuses a program
whose kernel needs more ("CompileTimeScopedVmemOom ... Scoped allocation with size X and limit Y",
or, past the chip's VMEM, "Used X of Y vmem" with the kernel's whole use). The kernel's request
is made of allocations stacked in turn (for the splash call: the pipeline's buffers, a fixed
0.72 MiB, the body's temporaries), and the refusal names the stack's height when the first one
overflowed, so one refusal is a lower bound of what the kernel needs; compiling again with the
limit raised to that figure reaches the next allocation, until the program compiles. The last
figure is the call's working set: the smallest limit at which it compiles (to the refusal's
0.01M rounding).

For each generation this script compiles the model's own `splash_attention` (log-sum-exp
residuals, 4 heads of 128, bf16, `SPLASH_LIMIT_LENGTH` queries and keys, on one compile-only
device of the slice in `splash_vmem.SLICES`) and records:

1. libtpu's default scoped VMEM limit (the "limit Y" of a refusal at the default flags);
2. the working set of a design of blocks at local batch 1 and 2 (`FIT_BLOCKS`: block_q, block_kv
   and block_kv_compute varied one at a time around MaxDiffusion's 2048/1024 K/V blocks), from
   which `aoizora.models.wan.kernels.vmem` fits its rule;
3. held out from the fit: whether the splash tiles of MaxDiffusion's Wan deployments
   (`HELD_OUT_BLOCKS`) compile at the default limit and at 32,768 and 65,536 KiB, at local batch
   1 and 2, and the figure of each refusal.

`--core` measures six of the design's ten tiles and holds out three tiles at local batch 1 only.
The coefficients for `src/aoizora/data/hardware.json` are printed at the end (`hardware_entries`).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Callable
from pathlib import Path

from aoizora.models.wan.kernels.splash_tiles import SPLASH_LIMIT_LENGTH, compile_splash_call
from aoizora.models.wan.transformer.strategy import SplashBlocks
from aoizora.toolchain import toolchain_versions

sys.path.insert(0, str(Path(__file__).parent))
from splash_vmem import HEAD_DIM, HEADS, SLICES  # noqa: E402  (the same slices and call shape)

DATA = Path(__file__).parent / "data" / "splash_vmem_rule.json"
#: (block_q, block_kv, block_kv_compute) whose working set the rule is fitted to: around
#: MaxDiffusion's 2048/1024 K/V blocks, one dimension moved at a time
FIT_BLOCKS = (
    (1024, 2048, 1024), (1536, 2048, 1024), (2048, 2048, 1024), (4096, 2048, 1024),
    (1024, 2048, 512), (4096, 2048, 512), (2048, 2048, 2048),
    (2048, 1024, 1024), (2048, 4096, 1024), (2048, 1024, 256),
)
#: MaxDiffusion's Wan splash tiles, held out from the fit:
#: (6400, 2048, 2048) and (9472, 1024, 1024): AI-Hypercomputer/maxdiffusion
#: end_to_end/tpu/run_wan_fast_inference.sh @ 7cfb8801 (with --xla_tpu_scoped_vmem_limit_kib=65536);
#: (3328, 2816, 256): AI-Hypercomputer/tpu-recipes PR #262, v6e (with a 32,768 KiB limit);
#: block_q 3024 and 8448 (other expert block_q values), here with the 2048/1024 K/V blocks
HELD_OUT_BLOCKS = ((6400, 2048, 2048), (9472, 1024, 1024), (3328, 2816, 256), (3024, 2048, 1024),
                   (8448, 2048, 1024))
#: a smaller design (six points, still one dimension moved at a time) for a shorter run
CORE_FIT_BLOCKS = ((1024, 2048, 1024), (2048, 2048, 1024), (4096, 2048, 1024), (2048, 2048, 2048),
                   (2048, 1024, 1024), (2048, 1024, 256))
RAISED_LIMITS_KIB = (32768, 65536)
DEFAULT_PROBE_BLOCKS = (4096, 2048, 1024)
#: the first limit of a working-set measurement: below every measured working set, above the
#: small allocations a kernel's request starts with
START_KIB = 8192
#: no limit above this is tried (the largest VMEM of any generation, 128 MiB on v5e and v6e)
MAX_KIB = 131072
_UNIT_KIB = {"K": 1, "M": 1024, "G": 1024 ** 2}
_ROUNDING_KIB = 6  # the refusal states MiB to two decimals: +-5.12 KiB


def _kib(figure: str) -> float:
    return float(figure[:-1]) * _UNIT_KIB[figure[-1]] if figure[-1] in _UNIT_KIB else float(figure) / 1024


def compile_probe(compile_at_limit: Callable[[], object], limit_kib: int | None) -> dict:
    """Run one compile at `limit_kib`: whether it compiles, and a refusal's stack height and limit
    in KiB (any other error is raised)."""
    try:
        compile_at_limit()
    except Exception as exc:  # libtpu's refusal: a RESOURCE_EXHAUSTED XlaRuntimeError
        text = str(exc)
        found = re.search(r"Scoped allocation with size (\S+) and limit (\S+)", text)
        form = "scoped"
        if found is None:
            found, form = re.search(r"Used (\S+) of (\S+) vmem", text), "used"
        if found is None:
            raise
        return {"limit_kib": limit_kib, "compiles": False, "used_kib": round(_kib(found.group(1)), 2),
                "of_kib": round(_kib(found.group(2)), 2), "form": form}
    return {"limit_kib": limit_kib, "compiles": True}


def probe(topology: str, batch: int, blocks: tuple[int, int, int], limit_kib: int | None) -> dict:
    """Compile the splash call once: whether it compiles, and a refusal's stack height and limit in KiB."""
    return compile_probe(lambda: compile_splash_call(topology, batch, SPLASH_LIMIT_LENGTH, SPLASH_LIMIT_LENGTH,
                                                     SplashBlocks(*blocks), HEADS, HEAD_DIM,
                                                     scoped_vmem_limit_kib=limit_kib), limit_kib)


def working_set(topology: str, batch: int, blocks: tuple[int, int, int]) -> dict:
    """The smallest scoped VMEM limit (KiB) at which the call compiles (`working_set_of`)."""
    return working_set_of(lambda limit: probe(topology, batch, blocks, limit))


def working_set_of(compile_at: Callable[[int | None], dict]) -> dict:
    """The smallest scoped VMEM limit (KiB) at which `compile_at(limit)` (a `compile_probe`)
    compiles, by raising the limit to each refusal's figure (see the module docstring)."""
    limit, steps = START_KIB, []
    while limit <= MAX_KIB:
        step = compile_at(limit)
        steps.append(step)
        if step["compiles"]:
            break
        if step["of_kib"] < limit - _ROUNDING_KIB:
            # libtpu capped the limit at the VMEM it has ("Used X of Y vmem", v4): X is the whole
            # kernel's use, as no raised limit can reach a further allocation
            return {"working_set_kib": step["used_kib"], "note": f"limit capped at {step['of_kib']} KiB",
                    "steps": steps}
        limit = math.ceil(step["used_kib"]) + _ROUNDING_KIB
    last_refusal = next((s for s in reversed(steps) if not s["compiles"]), None)
    known = steps[-1]["compiles"] and last_refusal is not None
    return {"working_set_kib": last_refusal["used_kib"] if known else None,
            "note": "" if known else
                    ("compiles at the first limit" if steps[-1]["compiles"] else f"refused up to {MAX_KIB} KiB"),
            "steps": steps}


def applied_limits(held_out: list[dict]) -> dict[str, dict[str, float]]:
    """Per generation and raised limit, the limit its refusals state: the limit itself, or the
    chip's VMEM where the kernel's whole use overflows that ("Used X of Y vmem")."""
    out: dict[str, dict[str, float]] = {}
    for r in held_out:
        if not r["compiles"] and r["limit_kib"] is not None:
            out.setdefault(r["generation"], {})[str(r["limit_kib"])] = r["of_kib"]
    return out


def vmem_kib(data: dict, generation: str) -> float | None:
    """The VMEM a generation's refusals past it state ("Used X of Y vmem": Y), the most any limit
    can give a kernel; None when no probe reached it."""
    stated = [s["of_kib"] for r in data["fit"] if r["generation"] == generation for s in r["steps"]
              if s.get("form") == "used"]
    stated += [r["of_kib"] for r in data["held_out"] if r["generation"] == generation and r.get("form") == "used"]
    return min(stated) if stated else None


def hardware_entries(data: dict) -> dict[str, dict]:
    """The fields of `src/aoizora/data/hardware.json` this data gives each generation: the default
    limit, the most a raised one gives (the VMEM; None: not reached) and the rule's coefficients
    per local batch."""
    from aoizora.models.wan.kernels.vmem import COEFFICIENTS, coefficients_from_data

    out = {}
    for gen, default in data["default_limit_kib"].items():
        vmem = vmem_kib(data, gen)
        coef = coefficients_from_data(data["fit"], gen)
        out[gen] = {"scoped_vmem_default_kib": int(default),
                    "scoped_vmem_max_kib": int(vmem) if vmem else None,
                    "splash_vmem": {str(b): [round(c[n], 6) for n in COEFFICIENTS] for b, c in coef.items()}}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DATA)
    ap.add_argument("--generations", nargs="*", default=list(SLICES))
    ap.add_argument("--core", action="store_true", help="fit only CORE_FIT_BLOCKS and hold out MaxDiffusion's "
                    "first three tiles at local batch 1 (about a third of the compiles)")
    args = ap.parse_args()
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    defaults, fit, held_out = dict(old.get("default_limit_kib", {})), [], []
    design = {**{g: "full" for g in defaults}, **old.get("design", {})}
    keep = [r for r in old.get("fit", []) if r["generation"] not in args.generations]
    keep_held = [r for r in old.get("held_out", []) if r["generation"] not in args.generations]
    for gen in args.generations:
        topo = SLICES[gen]
        # overflows every generation's default limit, not its VMEM (whose refusal states the VMEM)
        refusal = probe(topo, 1, DEFAULT_PROBE_BLOCKS, None)
        defaults[gen] = refusal["of_kib"]
        design[gen] = "core" if args.core else "full"
        print(json.dumps({"generation": gen, "default_limit_kib": defaults[gen]}), flush=True)
        for batch in (1, 2):
            for blocks in CORE_FIT_BLOCKS if args.core else FIT_BLOCKS:
                row = {"generation": gen, "batch": batch, "blocks": list(blocks), **working_set(topo, batch, blocks)}
                print(json.dumps({k: v for k, v in row.items() if k != "steps"}), flush=True)
                fit.append(row)
        for batch in (1,) if args.core else (1, 2):
            for blocks in HELD_OUT_BLOCKS[:3] if args.core else HELD_OUT_BLOCKS:
                for limit in (None, *RAISED_LIMITS_KIB):
                    row = {"generation": gen, "batch": batch, "blocks": list(blocks),
                           **probe(topo, batch, blocks, limit)}
                    print(json.dumps(row), flush=True)
                    held_out.append(row)
        out = {"_about": " ".join(__doc__.split("\n\n")[3:6]).replace("\n", " "),
               "kernel": {"length": SPLASH_LIMIT_LENGTH, "heads": HEADS, "head_dim": HEAD_DIM, "dtype": "bf16",
                          "residuals": True},
               "slices": {g: SLICES[g] for g in defaults},
               "toolchain": toolchain_versions(), "default_limit_kib": defaults, "design": design,
               "fit": keep + fit, "held_out": keep_held + held_out}
        out["applied_limit_kib"] = applied_limits(out["held_out"])
        args.out.write_text(json.dumps(out, indent=1) + "\n")  # after each generation: a partial run keeps its data
    for gen, entry in hardware_entries(json.loads(args.out.read_text())).items():
        print(gen, json.dumps(entry))


if __name__ == "__main__":
    main()
