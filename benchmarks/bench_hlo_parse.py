"""Benchmark: parse + build the program graph of a 40-layer scanned 14B-sized DiT block.

The program stands in for the compiled Wan 2.1 14B transformer until that exists: dim 5120,
FFN 13824, 40 heads x 128, 40 layers under `lax.scan`, self-attention with Pallas splash
attention (Q sequence-sharded, K/V all-gathered), cross-attention to 512 text tokens, FFN with
GELU, RMSNorm; mesh (fsdp=4, tensor=4) on v5e:4x4: tokens and weights' embed dim over fsdp,
heads / mlp over tensor. Tokens: 76,800 (75,600 rounded up so each of the 4 sequence shards
is a multiple of the 128-token splash block).

Usage::

    .venv/bin/python benchmarks/bench_hlo_parse.py [--repeat 15] [--hlo cached.txt]

Compiles once (cached in $TMPDIR), then times `parse_hlo` + `build_program` and prints the
median wall time.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

LAYERS, DIM, FFN, HEADS, HEAD_DIM, TOKENS, TEXT = 40, 5120, 13824, 40, 128, 76800, 512


def compile_program() -> str:
    """The compiled HLO text of the 40-layer block on v5e:4x4."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.experimental.pallas.ops.tpu import splash_attention as sa
    from jax.sharding import Mesh, NamedSharding
    from jax.sharding import PartitionSpec as P

    from aoizora.toolchain import compile_only_devices

    mesh = Mesh(np.array(compile_only_devices("v5e:4x4")).reshape(4, 4), ("fsdp", "tensor"))
    local_heads = HEADS // 4
    q_len = TOKENS // 4
    mask = sa.MultiHeadMask([sa.FullMask((q_len, TOKENS)) for _ in range(local_heads)])
    self_kernel = sa.make_splash_mha(mask, head_shards=1, q_seq_shards=1)
    xmask = sa.MultiHeadMask([sa.FullMask((q_len, TEXT)) for _ in range(local_heads)])
    cross_kernel = sa.make_splash_mha(xmask, head_shards=1, q_seq_shards=1)
    bf = jnp.bfloat16

    def rms(x):
        x32 = x.astype(jnp.float32)
        return (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + 1e-6)).astype(bf)

    def heads(x):  # [T, H*D] -> [H, T, D]
        return x.reshape(x.shape[0], -1, HEAD_DIM).transpose(1, 0, 2)

    def attn_body(q, k, v, kernel, gather):
        if gather:
            k = jax.lax.all_gather(k, "fsdp", axis=1, tiled=True)
            v = jax.lax.all_gather(v, "fsdp", axis=1, tiled=True)
        return kernel(q, k, v)

    def attention(q, k, v, kernel, gather):
        spec_q = P("tensor", "fsdp", None)
        spec_kv = spec_q if gather else P("tensor", None, None)
        return jax.shard_map(
            lambda a, b, c: attn_body(a, b, c, kernel, gather), mesh=mesh,
            in_specs=(spec_q, spec_kv, spec_kv), out_specs=spec_q, check_vma=False,
        )(q, k, v)

    def layer(x, w, ctx):
        h = rms(x)
        q, k, v = (heads(rms(h @ w["q"])), heads(rms(h @ w["k"])), heads(h @ w["v"]))
        a = attention(q, k, v, self_kernel, True).transpose(1, 0, 2).reshape(x.shape)
        x = x + a @ w["o"]
        h = rms(x)
        cq = heads(h @ w["cq"])
        ck, cv = heads(ctx @ w["ck"]), heads(ctx @ w["cv"])
        c = attention(cq, ck, cv, cross_kernel, False).transpose(1, 0, 2).reshape(x.shape)
        x = x + c @ w["co"]
        h = rms(x)
        return x + jax.nn.gelu(h @ w["f1"]) @ w["f2"]

    def model(x, ctx, weights):
        def step(carry, w):
            return layer(carry, w, ctx), None
        out, _ = jax.lax.scan(step, x, weights)
        return out

    S = jax.ShapeDtypeStruct
    sq = (LAYERS, DIM, DIM)
    wshapes = {k: S(sq, bf) for k in ("q", "k", "v", "o", "cq", "ck", "cv", "co")}
    wshapes["f1"] = S((LAYERS, DIM, FFN), bf)
    wshapes["f2"] = S((LAYERS, FFN, DIM), bf)
    col = NamedSharding(mesh, P(None, "fsdp", "tensor"))
    row = NamedSharding(mesh, P(None, "tensor", "fsdp"))
    wshard = {k: (row if k in ("o", "co", "f2") else col) for k in wshapes}
    xs = NamedSharding(mesh, P("fsdp", None))
    cs = NamedSharding(mesh, P(None, None))
    jitted = jax.jit(model, in_shardings=(xs, cs, wshard), out_shardings=xs)
    lowered = jitted.lower(S((TOKENS, DIM), bf), S((TEXT, DIM), bf), wshapes)
    return lowered.compile().as_text()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--hlo", type=Path, default=Path(tempfile.gettempdir()) / "aoizora_bench_14b.hlo")
    args = ap.parse_args()
    if not args.hlo.exists():
        t0 = time.perf_counter()
        args.hlo.write_text(compile_program())
        print(f"compiled in {time.perf_counter() - t0:.1f} s -> {args.hlo}")
    text = args.hlo.read_text()

    from aoizora.hlo import build_program, parse_hlo, summarize

    times, cpu = [], []
    for _ in range(args.repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        prog = build_program(parse_hlo(text))
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    rep = summarize(prog)
    print(f"HLO text: {len(text):,} chars, {text.count(chr(10)):,} lines; "
          f"{len(prog.nodes)} nodes, {len(prog.collectives)} collectives, "
          f"loops {[lp.trip_count for lp in prog.loops]}, opaque {len(rep['opaque'])}")
    print(f"parse+build median {statistics.median(times) * 1e3:.1f} ms "
          f"(min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f}, n={args.repeat}); "
          f"CPU median {statistics.median(cpu) * 1e3:.1f} ms; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
