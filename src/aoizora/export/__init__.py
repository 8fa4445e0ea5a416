"""Plans carried into other frameworks: MaxDiffusion's Wan command, flags and device order, and back."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path
from typing import Any

from aoizora.export.maxdiffusion import (
    DEVICES_MODULE, LAUNCHER, SPEC_FILE, MaxDiffusionRun, export_plan, maxdiffusion_config, maxdiffusion_source,
)
from aoizora.export.maxdiffusion_command import MaxDiffusionCommand, read_command

__all__ = ["MaxDiffusionCommand", "MaxDiffusionRun", "export_plan", "exported_files", "maxdiffusion_config",
           "maxdiffusion_source", "read_command", "write_maxdiffusion_export"]

COMMAND_SCRIPT = "command.sh"


def exported_files(out_dir: str | Path) -> list[Path]:
    """The files `write_maxdiffusion_export` writes into `out_dir`."""
    return [Path(out_dir, name) for name in (LAUNCHER, DEVICES_MODULE, SPEC_FILE, COMMAND_SCRIPT)]


def write_maxdiffusion_export(plan: Any, out_dir: str | Path) -> MaxDiffusionRun:
    """Write a plan's MaxDiffusion run into `out_dir`: the launcher, the device module it imports,
    the run's JSON and `command.sh`. Nothing is written when the plan cannot be exported."""
    import json

    run = export_plan(plan)  # raises before anything is written
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    package = resources.files("aoizora")
    shutil.copyfile(str(package.joinpath("export/run_with_plan.py")), out / LAUNCHER)
    shutil.copyfile(str(package.joinpath("placement/slice_devices.py")), out / DEVICES_MODULE)
    (out / SPEC_FILE).write_text(json.dumps(run.to_json(), indent=1) + "\n")
    lines = ["#!/bin/sh", f"# {plan.data['strategy'].get('key', '')} on {run.slice['name']}",
             f"# MaxDiffusion {maxdiffusion_source()}: run this from its checkout.",
             *(f"# differs: {note}" for note in run.differences), "#",
             "# Without the plan's device order (MaxDiffusion builds its own mesh):",
             "# " + run.generate_wan_line(), "", "# With it:",
             run.launcher_line('"$(dirname "$0")"') + ' "$@"', ""]
    script = out / COMMAND_SCRIPT
    script.write_text("\n".join(lines))
    script.chmod(0o755)
    return run
