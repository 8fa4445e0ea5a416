"""Can a plan cost the VAE decode without compiling it? Stage 1's bound of the decode's lowered
program (`aoizora.stage1.search.analyse`: no compile) beside the compiled decode's Q2 that the
committed plans record, for every distinct (slice, latent) among them.

    .venv/bin/python benchmarks/vae_decode_bound.py [--json OUT]

`docs/data/planning/vae_decode_bound.json` holds the committed run.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
LABEL = re.compile(r"vae decode \(([\d, ]+)\) / (\S+)")


def compiled_decodes() -> dict[tuple[str, tuple[int, ...]], float]:
    """(slice, latent) -> the compiled decode's Q2 seconds, from every committed plan that has one."""
    out: dict[tuple[str, tuple[int, ...]], float] = {}
    for path in sorted((ROOT / "docs" / "data").rglob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        for plan in doc if isinstance(doc, list) else [doc]:
            vt = plan.get("video_time") if isinstance(plan, dict) else None
            cost = (vt or {}).get("vae_decode", {}).get("cost") if isinstance(vt, dict) else None
            if not isinstance(cost, dict) or "seconds" not in cost:
                continue
            m = LABEL.search(cost.get("label", ""))
            if m:
                latent = tuple(int(x) for x in m.group(1).split(","))
                out.setdefault((m.group(2), latent), float(cost["seconds"]))
    return out


def main() -> None:
    from aoizora.models.wan.vae.program import decode_program
    from aoizora.stage1.search import analyse
    from aoizora.topology import get_topology

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    for (name, latent), q2 in sorted(compiled_decodes().items()):
        topology = get_topology(name)
        program = decode_program(topology, latent)
        _, bound, _, _, _ = analyse(program.space, program.strategy, topology)
        rows.append({"topology": name, "latent": list(latent), "compiled_q2_s": q2,
                     "stage1_q1_s": bound.seconds, "ratio": q2 / bound.seconds})
        print(f"{name:12s} {str(latent):24s} compiled Q2 {q2:8.3f} s  Stage 1 Q1 {bound.seconds:8.4f} s  "
              f"ratio {q2 / bound.seconds:6.1f}", flush=True)
    if args.json:
        args.json.write_text(json.dumps({"command": "python benchmarks/vae_decode_bound.py --json OUT",
                                         "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    main()
