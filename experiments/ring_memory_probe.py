"""Ring attention's memory in libtpu against Stage 1, on small programs (full compiles, ~1 min).

    .venv/bin/python experiments/ring_memory_probe.py

1. A scanned layer whose q, k and v are computed outside a ring `shard_map` (2 steps on v5e:2x2,
   4 on v5e:2x4): libtpu's temp against Stage 1's, in activations.
2. A chain of 7 permutes of 128 MiB shards (v5e:2x4) beside an argument of growing size: how many
   shards libtpu holds at once (its scheduler hoists the chain only while the program fits), and
   what Stage 1 predicts with the chain hoisted, in place, and chosen by `predict_within_hbm`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests" / "stage1"))  # the probe programs, shared with the tests

GIB = 2**30


def ring_layer(topology: str, steps: int, seq: int) -> tuple[float, float]:
    """(libtpu temp, Stage 1 temp) in activations."""
    import probes

    from aoizora.stage1 import predict, read_module
    from aoizora.topology import get_topology

    lowered, act = probes.ring_layer(get_topology(topology), steps, seq)
    stage1 = predict(read_module(lowered)).peak_temp_bytes
    return lowered.compile().memory_analysis().temp_size_in_bytes / act, stage1 / act


def permute_chain(ballast_gib: float) -> dict[str, float]:
    """Shards held (libtpu; Stage 1 hoisted, in place, chosen), whether Stage 1 fits, argument GiB."""
    import probes

    from aoizora.stage1 import predict, read_module
    from aoizora.stage1.memory import predict_within_hbm
    from aoizora.topology import get_topology

    topo = get_topology("v5e:2x4")
    lowered, shard = probes.permute_chain(topo, int(ballast_gib * GIB))
    module = read_module(lowered)
    chosen, mem = predict_within_hbm(module, topo.hardware)
    try:
        ma = lowered.compile().memory_analysis()
        libtpu, args = ma.temp_size_in_bytes / shard, ma.argument_size_in_bytes / GIB
    except Exception:  # noqa: BLE001 - the compiler refused it (out of HBM)
        libtpu, args = float("nan"), float("nan")
    return {"libtpu": libtpu, "args": args, "hoisted": predict(module).peak_temp_bytes / shard,
            "in_place": predict(module, hoist_permutes=False).peak_temp_bytes / shard,
            "chosen": chosen.peak_temp_bytes / shard, "fits": mem.fits}


def main() -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    print("ring layer, q/k/v computed outside the shard_map (temp, activations)")
    print(f"  {'topology':9s} {'steps':>5s} {'libtpu':>7s} {'Stage 1':>8s}")
    for topology, steps, seq in (("v5e:2x2", 2, 151552), ("v5e:2x4", 4, 151552)):
        libtpu, stage1 = ring_layer(topology, steps, seq)
        print(f"  {topology:9s} {steps:5d} {libtpu:7.2f} {stage1:8.2f}", flush=True)
    print("permute chain of 7 shards (128 MiB) beside an argument, v5e:2x4 (temp, shards)")
    print(f"  {'argument GiB':>12s} {'libtpu':>7s} {'hoisted':>8s} {'in place':>9s} {'chosen':>7s} "
          f"{'Stage 1 fits':>13s}")
    for ballast in (1.0, 13.0, 13.6, 14.0, 14.2, 14.4, 14.6, 14.8, 15.0):
        r = permute_chain(ballast)
        print(f"  {r['args']:12.2f} {r['libtpu']:7.2f} {r['hoisted']:8.2f} {r['in_place']:9.2f} {r['chosen']:7.2f} "
              f"{str(r['fits']):>13s}", flush=True)


if __name__ == "__main__":
    main()
