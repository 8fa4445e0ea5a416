"""Probe what the TPU compiler spends time on in the Wan program (bisection helper).

    .venv/bin/python experiments/compile_probe.py --topology v5e:2x4 --layers 2 --frames 81 --size 720p \
        [--model 14b|1.3b] [--what step|forward] [--variant allgather] [--kernel auto|xla] [--patch NAME ...]

Prints one JSON line: lower/compile seconds, instruction/fusion counts of the compiled HLO.
`--patch` swaps one model component for an experiment (see PATCHES); results with patches are
NOT the deployed program, they only localise compile time.
"""
from __future__ import annotations

import argparse
import json
import re
import time

import jax.numpy as jnp

from aoizora.models.wan.transformer import model as wm
from aoizora.models.wan.transformer.config import WAN_T2V_1_3B, WAN_T2V_14B, VideoShape
from aoizora.models.wan.transformer.strategy import Strategy, make_mesh
from aoizora.models.wan.video.sampling import lower_denoise_step, lower_forward
from aoizora.models.wan.video.schedulers import UniPCScheduler
from aoizora.toolchain import compile_only_devices


def _norope(x, cos, sin):
    return x


# Source edits of the model module (old text, new text), each matching exactly once.
SOURCE_EDITS = {
    # patchify/unpatchify become plain reshapes (no 8-D transposes)
    "nopatchify": [
        ("x = x.transpose(0, 2, 4, 6, 1, 3, 5, 7).reshape(b, t * hh * ww, -1)",
         "x = x.reshape(b, t * hh * ww, -1)"),
        ("x = x.transpose(0, 7, 1, 4, 2, 5, 3, 6).reshape(b, config.out_channels, t * pt, hh * ph, ww * pw)",
         "x = x.reshape(b, config.out_channels, t * pt, hh * ph, ww * pw)"),
    ],
    # the normalised (modulated) activations feeding the projections are materialised once
    # (optimization_barrier) instead of being fused into every dot
    "barrier_ln": [
        ("h = (layer_norm(x, eps) * (1 + scale) + shift).astype(dt)",
         "h = jax.lax.optimization_barrier((layer_norm(x, eps) * (1 + scale) + shift).astype(dt))"),
        ('h = layer_norm(x, eps, p["norm2"]["scale"], p["norm2"]["bias"]).astype(dt)',
         'h = jax.lax.optimization_barrier(layer_norm(x, eps, p["norm2"]["scale"], p["norm2"]["bias"]).astype(dt))'),
        ("h = (layer_norm(x, eps) * (1 + c_scale) + c_shift).astype(dt)",
         "h = jax.lax.optimization_barrier((layer_norm(x, eps) * (1 + c_scale) + c_shift).astype(dt))"),
    ],
}


def _rewrite_model(edits: list[tuple[str, str]]) -> None:
    """Experiment only: run the model module again, in its own namespace, from its source text
    with `edits` applied, so every function it defines is the edited one (the probe depends on
    the model's text, not on its private names); the sampling module's `forward` follows."""
    import inspect

    import aoizora.models.wan.video.sampling as ws

    src = inspect.getsource(wm)
    for old, new in edits:
        assert src.count(old) == 1, f"the model's source does not contain exactly one {old!r}"
        src = src.replace(old, new)
    exec(compile(src, wm.__file__, "exec"), wm.__dict__)
    ws.forward = wm.forward


def _rope_roll(x, cos, sin):
    """Same rotation as rope.apply_rope without the (..., 64, 2) interleave: partner channels by
    lane rotation, per-channel tables."""
    xf = x.astype(jnp.float32)
    c = jnp.repeat(cos, 2, axis=-1)[None, :, None, :]
    s = jnp.repeat(sin, 2, axis=-1)[None, :, None, :]
    even = (jnp.arange(x.shape[-1]) % 2) == 0
    partner = jnp.where(even, -jnp.roll(xf, -1, axis=-1), jnp.roll(xf, 1, axis=-1))
    return (xf * c + partner * s).astype(x.dtype)


# Attribute swaps, applied after the source edits (rerunning the module rebinds its imports).
ATTRIBUTE_PATCHES = {
    "rope_roll": lambda: setattr(wm, "apply_rope", _rope_roll),
    "norope": lambda: setattr(wm, "apply_rope", _norope),
}
PATCHES = (*SOURCE_EDITS, *ATTRIBUTE_PATCHES)


def apply_patches(names: list[str]) -> None:
    """Swap the named model components (any order; each at most once)."""
    edits = [edit for name in names for edit in SOURCE_EDITS.get(name, [])]
    if edits:
        _rewrite_model(edits)
    for name in names:
        if name in ATTRIBUTE_PATCHES:
            ATTRIBUTE_PATCHES[name]()

SIZES = {"720p": (720, 1280), "480p": (480, 832)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--topology", default="v5e:2x4")
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--size", default="720p")
    ap.add_argument("--model", default="14b")
    ap.add_argument("--what", default="step")
    ap.add_argument("--variant", default="allgather")
    ap.add_argument("--kernel", default="auto")
    ap.add_argument("--data", type=int, default=2)
    ap.add_argument("--tensor", type=int, default=1)
    ap.add_argument("--weights", default="gathered")
    ap.add_argument("--patch", nargs="*", default=[], choices=PATCHES)
    ap.add_argument("--dump", default=None)
    a = ap.parse_args()
    apply_patches(a.patch)
    cfg = (WAN_T2V_14B if a.model == "14b" else WAN_T2V_1_3B).replace(num_layers=a.layers)
    h, w = SIZES[a.size] if a.size in SIZES else map(int, a.size.split("x"))
    video = VideoShape(a.frames, h, w)
    devs = compile_only_devices(a.topology)
    n = len(devs)
    s = Strategy(data=a.data, context=n // (a.data * a.tensor), tensor=a.tensor, attention=a.variant,
                 weights=a.weights, kernel=a.kernel)
    mesh = make_mesh(s, devs)
    t0 = time.perf_counter()
    if a.what == "step":
        lowered = lower_denoise_step(cfg, video, s, mesh, UniPCScheduler(50, shift=5.0))
    else:
        lowered = lower_forward(cfg, video, s, mesh)
    t1 = time.perf_counter()
    c1 = time.process_time()
    compiled = lowered.compile()
    t2 = time.perf_counter()
    cpu = time.process_time() - c1
    text = compiled.as_text()
    if a.dump:
        open(a.dump, "w").write(text)
    out = dict(topology=a.topology, weights=a.weights,
               libtpu_args=__import__("os").environ.get("LIBTPU_INIT_ARGS", ""), layers=a.layers,
               tokens=video.tokens(cfg), model=a.model, what=a.what,
               variant=a.variant, kernel=a.kernel, patch=a.patch, lower_s=round(t1 - t0, 2),
               compile_s=round(t2 - t1, 2), compile_cpu_s=round(cpu, 2), hlo_lines=text.count("\n"),
               fusions=len(re.findall(r"^\s*%?\S*fusion\S* = ", text, re.M)),
               collectives=len(re.findall(
                   r" (all-gather|all-reduce|reduce-scatter|all-to-all|collective-permute)(-start)?\(", text)))
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
