"""The command-line arguments that name one strategy of a Wan cell, shared by the benchmarks that
study a single compiled strategy (`compiled_schedule.py`, `memory_peak.py`, `q1_compute_gap.py`)."""

from __future__ import annotations

import argparse
from typing import Any


def add_cell_and_strategy(ap: argparse.ArgumentParser) -> None:
    """--model, --topology, --resolution, --frames, --strategy (a Stage 1 key) and
    --no-splash-cost-estimate (the program form without the kernels' cost estimate)."""
    ap.add_argument("--model", default="wan2.1-t2v-14b")
    ap.add_argument("--topology", required=True)
    ap.add_argument("--resolution", required=True)
    ap.add_argument("--frames", type=int, required=True)
    ap.add_argument("--strategy", required=True, help="a strategy key, as `aoizora plan --stage1-only` prints it")
    ap.add_argument("--no-splash-cost-estimate", dest="splash_cost_estimate", action="store_false",
                    help="compile the splash calls without their cost estimate (WanConfig.splash_cost_estimate)")


def chosen_strategy(args: argparse.Namespace) -> tuple[Any, Any, Any]:
    """(topology, space, strategy) the arguments name: the space `aoizora plan` searches, splash
    blocks fitted to each strategy and the chip's VMEM. Exits with a message for an unknown key."""
    from aoizora.models.registry import wan_space
    from aoizora.topology import get_topology

    topo = get_topology(args.topology)
    space = wan_space(args.model, args.resolution, args.frames, generation=topo.generation,
                      splash_cost_estimate=args.splash_cost_estimate)
    return topo, space, strategy_named(space, topo, args.strategy)


def strategy_named(space: Any, topo: Any, key: str) -> Any:
    """The strategy of `space` on `topo` whose Stage 1 key is `key`; exits with a message if none."""
    strategy = next((c.strategy for c in space.candidates(topo.num_devices) if c.key == key), None)
    if strategy is None:
        raise SystemExit(f"no strategy {key!r} on {topo.name}")
    return strategy
