"""Compile time of the Wan 2.1 denoise_step next to the reference "bare" 14B block, with where
libtpu spends it (HLO passes vs backend/LLO code generation) and the generated code size.

    .venv/bin/python benchmarks/bench_compile.py [--repeat 3] [--topology v5e:2x4] [--layers 2]
        [--model 14b] [--frames 81] [--size 720p] [--variant allgather] [--what step] [--no-bare]

Each compile runs in a fresh process (libtpu reads its flags when it loads) with
`--xla_jf_print_compilation_stats=true`, which only adds log lines: the compiled program is the
same. Prints the median wall/CPU seconds per program side by side with libtpu's own stage
durations and the final program bundle count (a deterministic measure of generated code size,
useful on a shared host where timings are noisy). The bare block is the program of
`benchmarks/bench_hlo_parse.py` (40 layers, 14B dims, v5e:4x4, splash, tensor=4, no
modulation/RoPE/scheduler), the reference a ~5.5 s expectation was stated for
(docs/notebook/planning-time.md, "Compile time of the Wan program").
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STAGES = {
    "hlo_passes_s": r"HLO_PASSES stage duration: ([\d.]+ms|(?:\d+m)?[\d.]+s)",
    "backend_s": r"BACKEND_PASSES stage duration: ([\d.]+ms|(?:\d+m)?[\d.]+s)",
    "codegen_s": r"CODE_GENERATION stage duration: ([\d.]+ms|(?:\d+m)?[\d.]+s)",
}


def _seconds(text: str) -> float:
    """libtpu's durations: "440.8ms", "30.09s", "1m36.9s"."""
    if text.endswith("ms"):
        return float(text[:-2]) / 1e3
    m = re.match(r"(?:(\d+)m)?([\d.]+)s", text)
    return int(m.group(1) or 0) * 60 + float(m.group(2))


def child(args: argparse.Namespace) -> None:
    import jax  # noqa: F401  (libtpu loads here, with the parent's flags)

    if args.child == "bare":
        sys.path.insert(0, str(HERE))
        import bench_hlo_parse

        c0, t0 = time.process_time(), time.perf_counter()
        bench_hlo_parse.compile_program()
        print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}), flush=True)
        return
    from aoizora.models.wan.transformer.config import WAN_T2V_1_3B, WAN_T2V_14B, VideoShape
    from aoizora.models.wan.transformer.strategy import Strategy, make_mesh
    from aoizora.models.wan.video.sampling import lower_denoise_step, lower_forward
    from aoizora.models.wan.video.schedulers import UniPCScheduler
    from aoizora.toolchain import compile_only_devices

    cfg = (WAN_T2V_14B if args.model == "14b" else WAN_T2V_1_3B).replace(num_layers=args.layers)
    h, w = {"720p": (720, 1280), "480p": (480, 832)}[args.size]
    video = VideoShape(args.frames, h, w)
    devs = compile_only_devices(args.topology)
    s = Strategy(data=2, context=len(devs) // 2, attention=args.variant, weights="gathered")
    mesh = make_mesh(s, devs)
    if args.what == "step":
        lowered = lower_denoise_step(cfg, video, s, mesh, UniPCScheduler(50, shift=5.0))
    else:
        lowered = lower_forward(cfg, video, s, mesh)
    c0, t0 = time.process_time(), time.perf_counter()
    lowered.compile()
    print(json.dumps({"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}), flush=True)


def measure(kind: str, args: argparse.Namespace) -> dict:
    env = dict(os.environ, TPU_STDERR_LOG_LEVEL="0", TPU_MIN_LOG_LEVEL="0",
               LIBTPU_INIT_ARGS=(os.environ.get("LIBTPU_INIT_ARGS", "")
                                 + " --xla_jf_print_compilation_stats=true").strip())
    cmd = [sys.executable, __file__, "--child", kind] + [
        f"--{k}={v}" for k, v in (("topology", args.topology), ("layers", args.layers), ("model", args.model),
                                  ("frames", args.frames), ("size", args.size), ("variant", args.variant),
                                  ("what", args.what))]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    lines = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not lines:
        raise SystemExit(f"{kind} compile failed:\n{p.stderr[-2000:]}")
    rec = json.loads(lines[-1])
    for key, pat in STAGES.items():
        m = re.search(pat, p.stderr)
        rec[key] = _seconds(m.group(1)) if m else None
    m = re.search(r"final program bundle count: ([\d,]+)", p.stderr)
    rec["bundles"] = int(m.group(1).replace(",", "")) if m else None
    return rec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--child", default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--topology", default="v5e:2x4")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--model", default="14b")
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--size", default="720p")
    ap.add_argument("--variant", default="allgather")
    ap.add_argument("--what", default="step")
    ap.add_argument("--no-bare", action="store_true")
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    kinds = ["wan"] + ([] if args.no_bare else ["bare"])
    runs: dict[str, list[dict]] = {k: [] for k in kinds}
    for _ in range(args.repeat):
        for k in kinds:
            runs[k].append(measure(k, args))
    keys = ["wall_s", "cpu_s", "hlo_passes_s", "backend_s", "codegen_s", "bundles"]
    label = {"wan": f"wan {args.model} {args.what} L={args.layers} {args.frames}f {args.size} {args.topology} "
                    f"{args.variant}",
             "bare": "bare 14B block (bench_hlo_parse) v5e:4x4"}
    print(f"median of {args.repeat}; load average {os.getloadavg()[0]:.1f}")
    print(f"{'program':<62}" + "".join(f"{k:>14}" for k in keys))
    for k in kinds:
        med = {key: statistics.median([r[key] for r in runs[k] if r[key] is not None] or [float('nan')])
               for key in keys}
        print(f"{label[k]:<62}"
              + "".join(f"{med[key]:>14,.1f}" if key != "bundles" else f"{med[key]:>14,.0f}" for key in keys))


if __name__ == "__main__":
    main()
