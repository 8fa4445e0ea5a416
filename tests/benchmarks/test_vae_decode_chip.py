"""`benchmarks/chip/vae_decode_chip.py`: the decode a plan costs, run with random weights; on CPU the
program runs (a tiny video), and the chip measurement refuses a host without a TPU."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks" / "chip"))
import vae_decode_chip  # noqa: E402


def test_a_video_is_height_width_frames():
    assert vae_decode_chip.parse_video("480x832x21") == (480, 832, 21)
    with pytest.raises(argparse.ArgumentTypeError, match="HEIGHTxWIDTHxFRAMES"):
        vae_decode_chip.parse_video("480p")


def test_the_decode_a_plan_costs_runs_and_is_timed():
    import jax

    rec = vae_decode_chip.measure_video(32, 32, 5, runs=2, devices=jax.devices()[:1])
    assert rec["latent"] == [1, 16, 2, 4, 4] and rec["mesh"] == [1, 1]
    assert len(rec["seconds"]) == 2 and rec["median_seconds"] > 0 and rec["compile_seconds"] > 0


def test_measuring_without_a_tpu_is_refused(tmp_path, capsys):
    assert vae_decode_chip.main(["measure", "--video", "32x32x5", "--out", str(tmp_path / "x.json")]) == 2
    assert "needs a TPU host" in capsys.readouterr().err and not (tmp_path / "x.json").exists()
