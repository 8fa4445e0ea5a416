"""Arguments the battery found accepted or crashing: each is refused with one line and exit 2,
before any work, leaving nothing behind."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from aoizora.cli import cli

# without the VAE decode's compile (minutes at 480p), which is not what these tests check
PLAN = ("plan", "--no-vae-decode", "--model", "wan2.1-t2v-1.3b", "--topology", "v5e:2x2", "--resolution", "480p",
        "--frames", "5")


def refused(args, fragment: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.exit_code == 2, result.output
    assert len(lines) == 1 and fragment in lines[0], result.stderr
    return lines[0]


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "0", "-1", "NaN"])
def test_ray_cpus_per_compile_must_be_positive_and_finite(tmp_path, value):
    refused([*PLAN, "--ray-cpus-per-compile", value, "--out", str(tmp_path / "p.json")],
            "--ray-cpus-per-compile")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [
    ["run", "--plan", "{plan}", "--steps", "100000000000"],
    ["measure", "--plan", "{plan}", "--steps", "100000000000"],
    ["bench", "--measure", "--measure-steps", "100000000000", "--cell", "v5e:2x2/480p/21", "--out", "{tmp}/b"],
])
def test_an_absurd_step_count_is_refused(tmp_path, args):
    from tests.plan.test_plan_consistency import V5E

    args = [a.replace("{plan}", str(V5E)).replace("{tmp}", str(tmp_path)) for a in args]
    refused(args, "100000000000")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("topology", ["v5e:32x32", "v5e:1x32", "v6e:16x32", "v5p:16x20x32", "v4:32x32x32"])
def test_a_slice_beyond_the_generations_largest_is_refused(topology):
    refused(["topology", topology], "larger than the largest")


@pytest.mark.parametrize("topology", ["v5e:16x16", "v5p:16x20x28"])
def test_the_largest_slice_is_accepted(topology):
    from aoizora.topology.slice import parse_topology_name

    assert parse_topology_name(topology)[1] == tuple(int(n) for n in topology.split(":")[1].split("x"))


# --- bench cells: all checked before the first runs, nothing left behind --------------------------------
@pytest.mark.parametrize("cell, fragment", [
    ("v5e:2x2/480p/2\u00b9", "is not TOPOLOGY/RESOLUTION/FRAMES"),  # superscript one: int() raises
    ("v5e:2x2/480p/\u0662\u0661", "is not TOPOLOGY/RESOLUTION/FRAMES"),  # Arabic-Indic digits
    ("v5e:2x2/999p/21", "malformed resolution"),
    ("v5e:2x2/480p/20", "not 4n+1"),
    ("v5e:2x2/480p/21/wan9", "unknown model"),
    ("v5e:32x32/480p/21", "larger than the largest"),
])
def test_a_bad_cell_is_refused_before_the_first_cell_runs_and_leaves_nothing(tmp_path, monkeypatch, cell, fragment):
    import aoizora.evaluation.bench.grid_run as bench_run

    def never(*args, **kwargs):
        raise AssertionError("a cell ran before every cell was checked")

    monkeypatch.setattr(bench_run, "run_cell_with_fallback", never)
    out = tmp_path / "bench"
    refused(["bench", "--cell", "v5e:2x2/480p/21", "--cell", cell, "--out", str(out)], fragment)
    assert not out.exists()


# --- files read with a size cap -------------------------------------------------------------------------
def test_dev_zero_as_a_plan_is_refused_with_one_line(tmp_path, monkeypatch):
    import aoizora.plan.plan as plan_module

    monkeypatch.setattr(plan_module, "MAX_PLAN_BYTES", 1 << 20)
    for command in (["explain", "/dev/zero", "--out", str(tmp_path / "out")],
                    ["run", "--plan", "/dev/zero"]):
        refused(command, "larger than 1 MiB")


def test_dev_zero_as_hlo_is_refused_with_one_line(monkeypatch):
    import aoizora.cli.paths as paths

    monkeypatch.setattr(paths, "MAX_HLO_BYTES", 1 << 20)
    refused(["hlo", "/dev/zero"], "larger than 1 MiB")


def test_hlo_that_does_not_fit_in_memory_is_refused_with_one_line(tmp_path, monkeypatch):
    path = tmp_path / "m.hlo"
    path.write_text("HloModule m\n")

    class Exhausted:
        def __init__(self, *args, **kwargs):
            pass

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def read(self, *args):
            raise MemoryError

    monkeypatch.setattr("builtins.open", lambda *a, **k: Exhausted())
    refused(["hlo", str(path)], "does not fit in memory")


def test_a_missing_choice_option_is_one_line(tmp_path):
    """click writes the choices of a missing option on lines of their own."""
    from tests.plan.test_plan_consistency import V5E

    line = refused(["export", str(V5E), "--out", str(tmp_path / "x")], "Missing option '--to'")
    assert "Choose from: maxdiffusion" in line
    assert list(tmp_path.iterdir()) == []


def _required(command) -> list[str]:
    return [p.opts[0] if p.opts else p.name for p in command.params if p.required]


@pytest.mark.parametrize("name", sorted(n for n, c in cli.commands.items() if _required(c)))
def test_every_usage_error_is_one_line(name):
    """Each command called without its required arguments, and with an unknown option and a bad choice."""
    refused([name], "Missing")
    refused([name, "--no-such-option"], "No such option")


def test_a_typed_error_with_a_line_break_is_printed_on_one_line(tmp_path):
    refused(["export", str(tmp_path / "no\nplan.json"), "--to", "maxdiffusion", "--out", str(tmp_path / "x")],
            "no plan.json")
