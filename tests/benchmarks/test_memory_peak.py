"""benchmarks/memory_peak.py and the strategy arguments it shares: the replay of libtpu's buffers
by Stage 1's packing rule, and the program form the arguments name."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

from memory_peak import replayed_bytes  # noqa: E402
from strategy_args import add_cell_and_strategy, chosen_strategy  # noqa: E402

from aoizora.hlo.buffer_dump import TempBuffer  # noqa: E402
from aoizora.models.registry import wan_space  # noqa: E402


def test_the_replay_packs_libtpus_buffers_best_fit_in_birth_order():
    # A (60) and B (50) born together, A dies, C (100) is born: A's hole is too small, C goes on top
    buffers = [TempBuffer(0, 60, 0, 1, ("a",)), TempBuffer(60, 50, 0, 3, ("b",)), TempBuffer(110, 100, 2, 3, ("c",))]
    assert replayed_bytes(buffers) == 210


def _args(*extra: str, strategy: str = "context=4") -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    add_cell_and_strategy(ap)
    return ap.parse_args(["--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--resolution", "480p",
                          "--frames", "21", "--strategy", strategy, *extra])


def test_the_splash_cost_estimate_is_on_unless_asked_off():
    assert _args().splash_cost_estimate is True
    assert _args("--no-splash-cost-estimate").splash_cost_estimate is False


def test_the_named_strategy_comes_from_a_space_of_the_asked_form():
    space = wan_space("wan2.1-t2v-1.3b", "480p", 21, generation="v5e")
    key = next(c.key for c in space.candidates(4) if c.legal and "attn=allgather" in c.key)
    for extra, estimate in (((), True), (("--no-splash-cost-estimate",), False)):
        _, space, strategy = chosen_strategy(_args(*extra, strategy=key))
        assert space.config.splash_cost_estimate is estimate
        assert next(c.key for c in space.candidates(4) if c.strategy == strategy) == key
