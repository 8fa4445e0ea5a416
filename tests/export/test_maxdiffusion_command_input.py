"""`--from-maxdiffusion` refuses malformed values in one short line, and fails fast on a huge command."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from aoizora.errors import AoizoraError, ExportError
from aoizora.export import read_command

BASE = "src/maxdiffusion/configs/base_wan_14b.yml "
BLOCKS = '"block_kv":1024,"block_kv_compute":1024'


@pytest.mark.parametrize("override, fragment", [
    ("flash_block_sizes='[1,2]'", "flash_block_sizes='[1,2]': not a dict"),
    ("flash_block_sizes='\"abc\"'", "not a dict"),
    (f"flash_block_sizes='{{\"block_q\":\"x\",{BLOCKS}}}'", "block_q='x': not a positive whole number"),
    (f"flash_block_sizes='{{\"block_q\":1e999,{BLOCKS}}}'", "block_q=inf: not a positive whole number"),
    (f"flash_block_sizes='{{\"block_q\":2048.5,{BLOCKS}}}'", "block_q=2048.5: not a positive whole number"),
    (f"flash_block_sizes='{{\"block_q\":true,{BLOCKS}}}'", "block_q=True: not a positive whole number"),
    ("per_device_batch_size=nan", "per_device_batch_size='nan': not a float"),
    ("per_device_batch_size=inf", "per_device_batch_size='inf': not a float"),
    ("logical_axis_rules=[1,2]", "logical_axis_rules=[1, 2]: not a list of [logical name, mesh axes] pairs"),
    ("logical_axis_rules=\"[['embed', 3]]\"", "not a list of [logical name, mesh axes] pairs"),
    ("logical_axis_rules=\"{'a': 1}\"", "not a list"),
])
def test_malformed_values_are_refused_in_one_line(override, fragment):
    with pytest.raises(ExportError) as info:
        cmd = read_command(BASE + override)
        cmd.strategy(8)
        cmd.videos(8)
    assert fragment in str(info.value) and "\n" not in str(info.value)


@pytest.mark.parametrize("text", [
    BASE + "k" * 20_000 + "=1",  # an unknown key
    BASE + "height=" + "9x" * 10_000,  # a bad value
    BASE + "'" + "u" * 20_000,  # an unclosed quote
    "z" * 20_000 + ".yml",  # an unknown config
    BASE + "attention=flash x" * 1_500,  # not key=value
])
def test_messages_echo_at_most_about_200_characters(text):
    with pytest.raises(ExportError) as info:
        read_command(text).strategy(8)
    assert len(str(info.value)) < 500 and "\n" not in str(info.value)


def test_control_characters_are_echoed_escaped():
    with pytest.raises(ExportError) as info:
        read_command(BASE + "'bad\nkey=1'")
    assert "\n" not in str(info.value) and "bad\\nkey" in str(info.value)


def test_a_megabyte_command_fails_fast():
    start = time.perf_counter()
    with pytest.raises(ExportError, match="characters, more than a generate_wan.py command") as info:
        read_command(BASE + "prompt=" + "a " * 500_000)
    assert time.perf_counter() - start < 1 and len(str(info.value)) < 300


@pytest.mark.slow
def test_cli_refuses_a_malformed_command_in_one_line(tmp_path):
    r = subprocess.run([sys.executable, "-c", "from aoizora.cli import main; main()", "plan", "--topology", "v5e:2x2",
                        "--from-maxdiffusion", BASE + "logical_axis_rules=[1,2]"], capture_output=True, text=True,
                       timeout=300, cwd=tmp_path)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "logical_axis_rules" in r.stderr, r.stderr


@pytest.mark.parametrize("text", [
    BASE + "attention=" + "a" * 20_000,  # an attention aoizora cannot read
    "LIBTPU_INIT_ARGS=" + "b" * 20_000 + " " + BASE,  # a malformed flag
])
def test_long_names_and_flags_are_echoed_cut_short(text):
    with pytest.raises(AoizoraError) as info:
        read_command(text).strategy(8)
    assert len(str(info.value)) < 500
