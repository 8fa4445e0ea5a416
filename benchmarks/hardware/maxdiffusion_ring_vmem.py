"""What MaxDiffusion's ring kernel costs in scoped VMEM per splash tile, measured by compiling.

    MAXDIFFUSION_DIR=<checkout> .venv/bin/python benchmarks/hardware/maxdiffusion_ring_vmem.py \
        [--generations v6e tpu7x] [--batch 1] [--core] [--out benchmarks/hardware/data/maxdiffusion_ring_vmem.json]
    .venv/bin/python benchmarks/hardware/maxdiffusion_ring_vmem.py --rule  # no compile: fit the data

(`MAXDIFFUSION_DIR` needs only `src/maxdiffusion/kernels` at the commit recorded, e.g. from
`git archive COMMIT src/maxdiffusion/kernels`; the kernels import nothing beyond JAX and NumPy, and
MaxDiffusion's package `__init__`, which does, is not run. The committed data: both generations at
local batch 1, about 30 minutes of compiles on one core, then `--batch 2 --core`, which adds to the
file.)

aoizora exports a plan's ring attention as MaxDiffusion's `tokamax_ring` and its 2D context as
`ulysses_ring` (`aoizora.export.maxdiffusion`). Both run MaxDiffusion's own ring kernel
(`kernels/splash_attention/ring_attention_kernel.make_ring_attention`, called from
`models/attention_flax.py`'s `_tpu_flash_attention` and `_ulysses_ring_attention`), not JAX's
splash kernel whose scoped VMEM `splash_vmem_rule.py` measures: each ring step runs MaxDiffusion's
splash forward (`_splash_attention_forward_ring_raw`), which returns its max and sum beside the
output. libtpu refuses a program whose kernel needs more scoped VMEM than the limit, so a tile that
JAX's splash rule admits may not run in MaxDiffusion.

For each generation this script compiles that kernel as `_ulysses_ring_attention` calls it, for
one ring of `RING` compile-only devices of the slice in `splash_vmem.SLICES`: Wan 2.1 14B at
720p/81 (75,600 tokens, 40 heads of 128, bf16) under ring 2 × Ulysses 2, the longest per-device
calls MaxDiffusion's ring kernel gets on these slices (37,800 queries against two K/V shards of
37,800 keys, 20 heads), at local batch 1 (data 2, as tpu7x:2x2x1's committed plans) or 2, padded
to the blocks with padding segment ids, vmapped over the batch, with the forward config
MaxDiffusion's Wan 14B config gives
(`configs/base_wan_14b.yml`: base-2 exponent and experimental scheduler on; the tokamax forward
reads block_q/block_kv/block_kv_compute). `tokamax_ring` makes the same kernel with ring axis
`context`. Per tile it records the working set: the smallest scoped VMEM limit at which the program
compiles, found as `splash_vmem_rule.working_set_of` finds it (raise the limit to each refusal's
figure until it compiles). `FIT_BLOCKS` are the rule's design (`--core`: `CORE_FIT_BLOCKS`), and
`HELD_OUT_BLOCKS` check it (`--core`: the first).

`--rule` fits `aoizora.models.wan.kernels.vmem`'s rule (`fit_splash_vmem`: least squares over the four
terms, margin the largest error on a fitted tile) to each generation's `FIT_BLOCKS` (a local batch
whose measured tiles all need what they need at batch 1 takes batch 1's fit), checks it on
the held-out tiles (admitted by working set plus margin only where they measured no more) and
writes `src/aoizora/data/maxdiffusion_ring_vmem.json`, which the planner reads.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import types
from pathlib import Path
from typing import Any

from aoizora.toolchain import SCOPED_VMEM_FLAG, compile_only_devices, toolchain_versions

sys.path.insert(0, str(Path(__file__).parent))
from splash_vmem import SLICES  # noqa: E402  (the same compile-only slices)
from splash_vmem_rule import compile_probe, working_set_of  # noqa: E402  (the same probe)

DATA = Path(__file__).parent / "data" / "maxdiffusion_ring_vmem.json"
RULE = Path(__file__).parents[2] / "src" / "aoizora" / "data" / "maxdiffusion_ring_vmem.json"
#: the MaxDiffusion commit whose kernel the committed data measure
COMMIT = "7cfb8801d41d1728f0232cd7ee59e900a151fecf"
#: Wan 2.1 14B at 720p/81: 21 latent frames of 45 x 80 patches, 40 heads of 128
TOKENS, HEADS, HEAD_DIM = 75600, 40, 128
#: the 2D context measured: ring 2 x Ulysses 2 (the batch is the CFG pair over data 2 or 1)
RING, ULYSSES = 2, 2
#: (block_q, block_kv, block_kv_compute) the rule is fitted to: `splash_vmem_rule.FIT_BLOCKS`'s
#: design (one dimension moved at a time around MaxDiffusion's 2048/1024 K/V blocks)
FIT_BLOCKS = (
    (1024, 2048, 1024), (1536, 2048, 1024), (2048, 2048, 1024), (4096, 2048, 1024),
    (1024, 2048, 512), (4096, 2048, 512), (2048, 2048, 2048),
    (2048, 1024, 1024), (2048, 4096, 1024), (2048, 1024, 256),
)
#: held out: the 2D-context tiles of the committed plans (2944/2048/1024), a raised-limit tile
#: (4736/2048/1024) and MaxDiffusion's own v6e tile (6400/1024/1024, whose MaxDiffusion program
#: libtpu refused with about 68.7 MiB)
HELD_OUT_BLOCKS = ((2944, 2048, 1024), (4736, 2048, 1024), (6400, 1024, 1024))
#: a smaller design for a shorter run (splash_vmem_rule.CORE_FIT_BLOCKS): six points, one dimension moved at a time
CORE_FIT_BLOCKS = ((1024, 2048, 1024), (2048, 2048, 1024), (4096, 2048, 1024), (2048, 2048, 2048),
                   (2048, 1024, 1024), (2048, 1024, 256))


def ring_kernel_module(checkout: str) -> types.ModuleType:
    """MaxDiffusion's ring kernel module from the checkout, under a stub `maxdiffusion` package so
    that the package's own `__init__` (which imports its whole pipeline) does not run."""
    package = Path(checkout) / "src" / "maxdiffusion"
    if not (package / "kernels" / "splash_attention" / "ring_attention_kernel.py").is_file():
        raise SystemExit(f"MAXDIFFUSION_DIR={checkout} holds no src/maxdiffusion/kernels")
    stub = types.ModuleType("maxdiffusion")
    stub.__path__ = [str(package)]
    sys.modules["maxdiffusion"] = stub
    return importlib.import_module("maxdiffusion.kernels.splash_attention.ring_attention_kernel")


def _pad(n: int, unit: int) -> int:
    return -(-n // unit) * unit


def ring_program(ring: types.ModuleType, topology: str, blocks: tuple[int, int, int], batch: int) -> Any:
    """The lowered program: the ring kernel over one ring of `RING` devices, at the per-device
    shapes of the module docstring, padded and masked as `_ulysses_ring_attention` pads them."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    splash = importlib.import_module("maxdiffusion.kernels.splash_attention.splash_attention_kernel")
    mask_lib = importlib.import_module("maxdiffusion.kernels.splash_attention.splash_attention_mask")
    base = importlib.import_module("maxdiffusion.kernels.splash_attention.base")
    bq, bkv, bkvc = blocks
    seq = TOKENS // RING  # one device's queries and one K/V shard after the Ulysses exchange
    heads = HEADS // ULYSSES
    q_len, kv_len = _pad(seq, bq), _pad(seq, bkv)
    # MaxDiffusion's convert_to_tokamax_splash_config of the exported flash_block_sizes (the
    # export writes the tile into the forward and dkv fields alike), with base_wan_14b.yml's flags
    config = splash.SplashConfig(block_q=bq, block_kv=bkv, block_kv_compute=bkvc, block_q_dkv=bq,
                                 block_kv_dkv=bkv, block_kv_dkv_compute=bkvc, use_fused_bwd_kernel=True,
                                 fuse_reciprocal=True, use_base2_exp=True, use_experimental_scheduler=True)
    kernel = ring.make_ring_attention(mask=mask_lib.FullMask(_shape=(q_len, kv_len * RING)), is_mqa=False,
                                      config=config, save_residuals=False, ring_axis="ring",
                                      kv_seq_shards=RING, rotate_segment_ids=False)

    def local(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        q = jnp.pad(q, ((0, 0), (0, 0), (0, q_len - seq), (0, 0)))
        k = jnp.pad(k, ((0, 0), (0, 0), (0, kv_len - seq), (0, 0)))
        v = jnp.pad(v, ((0, 0), (0, 0), (0, kv_len - seq), (0, 0)))
        segment_ids = base.SegmentIds((jax.lax.broadcasted_iota(jnp.int32, (q_len,), 0) < seq).astype(jnp.int32),
                                      (jax.lax.broadcasted_iota(jnp.int32, (kv_len,), 0) < seq).astype(jnp.int32))
        out = jax.vmap(kernel, in_axes=(0, 0, 0, None))(q, k, v, segment_ids)
        return out[:, :, :seq, :]

    mesh = Mesh(np.array(compile_only_devices(topology)[:RING]), ("ring",))
    spec = PartitionSpec(None, None, "ring", None)
    fn = jax.jit(jax.shard_map(local, mesh=mesh, in_specs=(spec,) * 3, out_specs=spec, check_vma=False),
                 in_shardings=(NamedSharding(mesh, spec),) * 3)
    shape = jax.ShapeDtypeStruct((batch, heads, seq * RING, HEAD_DIM), jnp.bfloat16)
    return fn.lower(shape, shape, shape)


def probe(lowered: Any, limit_kib: int | None) -> dict:
    """Compile once at the limit: whether it compiles, and a refusal's stack height and limit (KiB)."""
    options = {} if limit_kib is None else {SCOPED_VMEM_FLAG: str(int(limit_kib))}
    return compile_probe(lambda: lowered.compile(compiler_options=options), limit_kib)


def rule(data: dict) -> dict:
    """The ring kernel's rule from the measured data (see the module docstring): per generation and
    local batch the coefficients (`vmem.COEFFICIENTS`, bytes), and each held-out tile's check."""
    from aoizora.models.wan.kernels.vmem import COEFFICIENTS, coefficients_from_data, working_set_bytes
    from aoizora.models.wan.transformer.strategy import SplashBlocks

    fit_rows = [r for r in data["rows"] if r["role"] == "fit"]
    coefficients: dict[str, dict[str, list[float]]] = {}
    held_out = []
    for gen in sorted({r["generation"] for r in fit_rows}):
        fitted = coefficients_from_data([r for r in fit_rows if r["batch"] == 1], gen)
        # the kernel is vmapped over the batch, a grid axis of its own: where every tile measured at
        # another local batch needs what it needs at batch 1, that batch takes batch 1's full fit
        # rather than a fit of its smaller design
        for batch in sorted({r["batch"] for r in data["rows"] if r["generation"] == gen} - {1}):
            at_one = {tuple(r["blocks"]): r["working_set_kib"] for r in data["rows"]
                      if r["generation"] == gen and r["batch"] == 1}
            rows = [r for r in data["rows"] if r["generation"] == gen and r["batch"] == batch]
            same = bool(fitted) and all(at_one.get(tuple(r["blocks"])) == r["working_set_kib"] for r in rows)
            own = coefficients_from_data([r for r in fit_rows if r["batch"] == batch], gen)
            fitted[batch] = fitted[1] if same else own[batch]
        for batch, coef in sorted(fitted.items()):
            coefficients.setdefault(gen, {})[str(batch)] = [round(coef[n], 6) for n in COEFFICIENTS]
            for r in data["rows"]:
                if r["role"] != "held_out" or r["generation"] != gen or r["batch"] != batch:
                    continue
                blocks = SplashBlocks(*r["blocks"])
                predicted = working_set_bytes([coef[n] for n in COEFFICIENTS], blocks)
                measured = r["working_set_kib"]
                held_out.append({"generation": gen, "batch": batch, "blocks": blocks.describe(),
                                 "measured_kib": measured, "predicted_kib": round(predicted / 1024, 1),
                                 "with_margin_kib": round((predicted + coef["margin"]) / 1024, 1),
                                 "bounded": measured is not None
                                 and measured * 1024 <= predicted + coef["margin"]})
    return {"_about": "MaxDiffusion's ring kernel's scoped VMEM working set per splash tile, the rule of "
                      "aoizora.models.wan.kernels.vmem with kernel='maxdiffusion_ring': per generation and local batch "
                      f"{list(COEFFICIENTS)} in bytes (working set = per_q_row*bq + per_kv_row*bkv + "
                      "per_score*bq*bkv_compute + per_block_score*bq*bkv; a tile fits a limit when it plus margin, "
                      "the fit's largest error on a measured tile, is at most the limit; a local batch whose measured "
                      "tiles all need what they need at batch 1 takes batch 1's fit). Fitted by "
                      "benchmarks/hardware/maxdiffusion_ring_vmem.py --rule to "
                      "benchmarks/hardware/data/maxdiffusion_ring_vmem.json, measured by compiling the kernel "
                      "of the MaxDiffusion commit below.",
            "source": {**data["maxdiffusion"], "measured": "benchmarks/hardware/data/maxdiffusion_ring_vmem.json",
                       "call": data["call"], "toolchain": data["toolchain"]},
            "coefficients": coefficients, "held_out": held_out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DATA)
    ap.add_argument("--generations", nargs="*", default=["v6e", "tpu7x"])
    ap.add_argument("--commit", default=COMMIT, help="the MaxDiffusion commit MAXDIFFUSION_DIR holds")
    ap.add_argument("--batch", type=int, default=1, help="local batch (1: data 2; 2: the CFG pair on one device)")
    ap.add_argument("--core", action="store_true", help="fit CORE_FIT_BLOCKS, hold out HELD_OUT_BLOCKS[:1]")
    ap.add_argument("--rule", action="store_true", help=f"fit the rule to --out's data and write {RULE.name} "
                    "under src/aoizora/data (no compile)")
    args = ap.parse_args()
    if args.rule:
        fitted = rule(json.loads(args.out.read_text()))
        RULE.write_text(json.dumps(fitted, indent=1) + "\n")
        for row in fitted["held_out"]:
            print(json.dumps(row))
        return
    checkout = os.environ.get("MAXDIFFUSION_DIR")
    if not checkout:
        raise SystemExit("set MAXDIFFUSION_DIR to a MaxDiffusion checkout (its src/maxdiffusion/kernels suffice)")
    ring = ring_kernel_module(checkout)
    old = json.loads(args.out.read_text()) if args.out.exists() else {}
    rows = [r for r in old.get("rows", []) if r["generation"] not in args.generations or r["batch"] != args.batch]
    designs = ((("fit", CORE_FIT_BLOCKS), ("held_out", HELD_OUT_BLOCKS[:1])) if args.core else
               (("fit", FIT_BLOCKS), ("held_out", HELD_OUT_BLOCKS)))
    for gen in args.generations:
        for role, design in designs:
            for blocks in design:
                lowered = ring_program(ring, SLICES[gen], blocks, args.batch)
                row = {"generation": gen, "batch": args.batch, "blocks": list(blocks), "role": role,
                       **working_set_of(lambda limit, lowered=lowered: probe(lowered, limit))}
                print(json.dumps({k: v for k, v in row.items() if k != "steps"}), flush=True)
                rows.append(row)
        out = {"_about": " ".join(__doc__.split("\n\n")[2:4]).replace("\n", " "),
               "maxdiffusion": {"repository": "github.com/AI-Hypercomputer/maxdiffusion", "commit": args.commit,
                                "kernel": "src/maxdiffusion/kernels/splash_attention/ring_attention_kernel.py"},
               "call": {"tokens": TOKENS, "heads": HEADS // ULYSSES, "head_dim": HEAD_DIM, "dtype": "bf16",
                        "queries": TOKENS // RING, "kv_shard": TOKENS // RING, "ring": RING, "ulysses": ULYSSES,
                        "batches": sorted({r["batch"] for r in rows}), "use_base2_exp": True,
                        "use_experimental_scheduler": True, "segment_ids": True},
               "slices": {g: SLICES[g] for g in sorted({r["generation"] for r in rows} | set(args.generations))},
               "toolchain": toolchain_versions(), "rows": rows}
        args.out.write_text(json.dumps(out, indent=1) + "\n")  # after each generation: a partial run keeps its data


if __name__ == "__main__":
    main()
