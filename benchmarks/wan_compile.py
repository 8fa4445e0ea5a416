"""Full-size Wan 2.1 14B (720p, 81 frames) denoise_step: lower + compile for TPU slices from
abstract inputs (no weights), through libtpu's compile-only devices.

    .venv/bin/python benchmarks/wan_compile.py [--topologies v5e:2x4 v5e:4x4] [--variants allgather ulysses ring]
        [--out benchmarks/wan_compile.md]

Records lower/compile seconds, `memory_analysis()` per device and the opaque (splash) kernels'
FLOPs/bytes, and rewrites its section of a markdown file (default benchmarks/wan_compile.md; a
JSON of the same results goes next to it).
"""

from __future__ import annotations

import argparse
import json
import platform
import re
import time
from pathlib import Path

import jax

from aoizora.models.wan.transformer.config import WAN_T2V_14B, VideoShape
from aoizora.models.wan.transformer.strategy import Strategy, make_mesh
from aoizora.models.wan.video.sampling import lower_denoise_step, opaque_kernel_costs
from aoizora.models.wan.video.schedulers import UniPCScheduler
from aoizora.toolchain import compile_only_devices

GiB = 1024**3
BEGIN, END = "<!-- wan-compile:begin -->", "<!-- wan-compile:end -->"


def run_one(topology: str, variant: str, video: VideoShape) -> dict:
    devs = compile_only_devices(topology)
    n = len(devs)
    strategy = Strategy(data=2, context=n // 2, attention=variant, weights="gathered")
    mesh = make_mesh(strategy, devs)
    cfg = WAN_T2V_14B
    t0 = time.perf_counter()
    lowered = lower_denoise_step(cfg, video, strategy, mesh, UniPCScheduler(50, shift=5.0))
    t1 = time.perf_counter()
    rec: dict = {"topology": topology, "strategy": strategy.describe(), "variant": variant,
                 "lower_s": round(t1 - t0, 2)}
    try:
        compiled = lowered.compile()
    except Exception as exc:  # e.g. RESOURCE_EXHAUSTED: record, don't hide
        rec["error"] = str(exc).splitlines()[0][:300]
        rec["compile_s"] = round(time.perf_counter() - t1, 2)
        return rec
    rec["compile_s"] = round(time.perf_counter() - t1, 2)
    m = compiled.memory_analysis()
    rec["memory"] = {k: int(getattr(m, k)) for k in (
        "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
        "generated_code_size_in_bytes")}
    rec["per_device_total_GiB"] = round(
        (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes + m.temp_size_in_bytes) / GiB, 3)
    text = compiled.as_text()
    rec["tpu_custom_calls_in_hlo"] = len(re.findall(r'custom_call_target="tpu_custom_call"', text))
    ca = compiled.cost_analysis()
    ca = ca[0] if isinstance(ca, (list, tuple)) else ca
    rec["xla_cost_flops_loop_body_once"] = float(ca.get("flops", 0.0))
    rec["opaque_kernels"] = [
        {"name": k.name, "q_shape": k.q_shape, "kv_shape": k.kv_shape, "block_q": k.block_q, "block_kv": k.block_kv,
         "calls": k.calls, "flops_per_call": k.flops, "bytes_per_call": k.bytes_accessed}
        for k in opaque_kernel_costs(cfg, video, strategy, mesh)
    ]
    return rec


def to_markdown(results: list[dict], video: VideoShape) -> str:
    lines = [
        BEGIN,
        "## Wan 2.1 T2V-14B denoise_step, 720p (1280×720), 81 frames — lower + compile (libtpu compile-only)",
        "",
        f"75,600 tokens (padded to a multiple of context×128 for splash), CFG batch 2, UniPC step, bf16. "
        f"Inputs are `jax.ShapeDtypeStruct`s; no weights are materialised. Host: {platform.machine()}, "
        f"jax {jax.__version__}. Produced by `benchmarks/wan_compile.py`.",
        "",
        "| topology | strategy | lower s | compile s | args GiB/dev | temp GiB/dev | total GiB/dev "
        "| splash calls in HLO | splash TFLOP/dev/step |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['topology']} | {r['strategy']} | {r['lower_s']} | {r['compile_s']} | – | – | "
                         f"**failed**: {r['error']} | – | – |")
            continue
        m = r["memory"]
        tf = sum(k["flops_per_call"] * k["calls"] for k in r["opaque_kernels"]) / 1e12
        lines.append(
            f"| {r['topology']} | {r['strategy']} | {r['lower_s']} | {r['compile_s']} | "
            f"{m['argument_size_in_bytes'] / GiB:.2f} | {m['temp_size_in_bytes'] / GiB:.2f} | "
            f"{r['per_device_total_GiB']:.2f} | {r['tpu_custom_calls_in_hlo']} | {tf:.1f} |")
    lines += ["", "Opaque kernels per device (one transformer forward = one step):", ""]
    for r in results:
        for k in r.get("opaque_kernels", []):
            lines.append(
                f"- {r['topology']} {r['variant']}: `{k['name']}` q{tuple(k['q_shape'])} kv{tuple(k['kv_shape'])} "
                f"blocks {k['block_q']}/{k['block_kv']}, ×{k['calls']}: {k['flops_per_call'] / 1e12:.2f} TFLOP, "
                f"{k['bytes_per_call'] / 1e9:.2f} GB per call")
    lines.append(END)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topologies", nargs="+", default=["v5e:2x4", "v5e:4x4"])
    ap.add_argument("--variants", nargs="+", default=["allgather", "ulysses", "ring"])
    ap.add_argument("--out", default=str(Path(__file__).with_name("wan_compile.md")))
    args = ap.parse_args()
    video = VideoShape(81, 720, 1280)
    results = []
    for topo in args.topologies:
        for v in args.variants:
            r = run_one(topo, v, video)
            print(json.dumps({k: r[k] for k in r if k != "opaque_kernels"}), flush=True)
            results.append(r)
    out = Path(args.out)
    md = to_markdown(results, video)
    old = out.read_text() if out.exists() else "# Benchmarks\n\n"
    if BEGIN in old and END in old:
        new = old[: old.index(BEGIN)] + md + old[old.index(END) + len(END) + 1:]
    else:
        new = old.rstrip("\n") + "\n\n" + md
    out.write_text(new)
    out.with_name("wan_compile.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
