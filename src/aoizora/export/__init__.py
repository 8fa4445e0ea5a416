"""Plans carried into other frameworks: MaxDiffusion's Wan command, flags and device order, and back."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path
from typing import Any

from aoizora.errors import OutputPathError
from aoizora.export.maxdiffusion import (
    DEVICES_MODULE,
    LAUNCHER,
    SPEC_FILE,
    MaxDiffusionRun,
    export_plan,
    maxdiffusion_config,
    maxdiffusion_source,
    shell_safe,
)
from aoizora.export.maxdiffusion_command import MaxDiffusionCommand, read_command

__all__ = ["MaxDiffusionCommand", "MaxDiffusionRun", "export_plan", "exported_files", "maxdiffusion_config",
           "maxdiffusion_source", "read_command", "write_maxdiffusion_export"]

COMMAND_SCRIPT = "command.sh"


def generation_time_comment(plan: dict[str, Any]) -> list[str]:
    """What the plan predicts generate_wan.py prints as `generation_time`, and what that leaves out
    (none for a plan without a `video_time`)."""
    vt = plan.get("video_time")
    if vt is None:
        return []
    sec = lambda s: "unknown" if s is None else f"{float(s):.1f} s"  # noqa: E731
    d, text = vt["denoise"], vt["text_encode"]
    out = [f"Predicted generation_time (printed by generate_wan.py): {sec(vt['maxdiffusion_generation_seconds'])} "
           f"= {int(d['steps'])} steps x {float(d['step_seconds']) * 1e3:.1f} ms + expert swap "
           f"{sec(vt['expert_swap']['seconds'])} + VAE decode {sec(vt['vae_decode']['seconds'])}."]
    if not text.get("in_generation_time", True):
        out.append(f"It leaves out the text encoding (about {sec(text['seconds'])} on the host CPU for a new "
                   "prompt): the warmup encodes the same prompts and the timed run reads them from its cache.")
    out.append(f"End to end for a new prompt: {sec(vt['total_seconds'])}. Not predicted: the decoded video's copy "
               "to the host, which generation_time also counts.")
    if plan.get("prediction", {}).get("basis") == "q1":
        out.append("Not compiled: the plan's time budget ran out before any compile finished; its step is Stage 1's "
                   "Q1 lower bound for its best strategy, not checked by Q2 (re-plan with a larger --time-budget).")
    return out


def exported_files(out_dir: str | Path) -> list[Path]:
    """The files `write_maxdiffusion_export` writes into `out_dir`."""
    return [Path(out_dir, name) for name in (LAUNCHER, DEVICES_MODULE, SPEC_FILE, COMMAND_SCRIPT)]


def _write_files(plan: Any, run: MaxDiffusionRun, out: Path) -> None:
    """The export's four files, with the permissions of files the user's umask gives."""
    package = resources.files("aoizora")
    shutil.copyfile(str(package.joinpath("export/run_with_plan.py")), out / LAUNCHER)
    shutil.copyfile(str(package.joinpath("placement/slice_devices.py")), out / DEVICES_MODULE)
    (out / SPEC_FILE).write_text(json.dumps(run.to_json(), indent=1) + "\n")
    # every value below is checked (`shell_safe`) and shell-quoted where it is code, not a comment
    lines = ["#!/bin/sh", f"# {run.plan_summary['strategy']} on {run.slice['name']}",
             f"# MaxDiffusion {maxdiffusion_source()}: run this from its checkout.",
             *(f"# differs: {note}" for note in run.differences),
             *(f"# {line}" for line in generation_time_comment(plan.data)), "#",
             "# Without the plan's device order (MaxDiffusion builds its own mesh):",
             "# " + run.generate_wan_line(), "", "# With it:",
             *_launch_lines(plan, run), ""]
    (out / COMMAND_SCRIPT).write_text("\n".join(lines))
    umask = os.umask(0)
    os.umask(umask)
    for path in out.iterdir():
        path.chmod((0o777 if path.name == COMMAND_SCRIPT else 0o666) & ~umask)


def _launch_lines(plan: Any, run: MaxDiffusionRun) -> list[str]:
    """The launch: one process on the plan's slice, or one per replica of a throughput plan."""
    line = run.launcher_line('"$(dirname "$0")"')
    if getattr(plan, "replica_count", 1) > 1:
        from aoizora.export.replicas import replica_lines

        return replica_lines(plan, line)
    return [line + ' "$@"']


def write_maxdiffusion_export(plan: Any, out_dir: str | Path) -> MaxDiffusionRun:
    """Write a plan's MaxDiffusion run into `out_dir`: the launcher, the device module it imports,
    the run's JSON and `command.sh`. Nothing is written when the plan cannot be exported."""
    run = shell_safe(export_plan(plan))  # raises before anything is written
    if getattr(plan, "replica_count", 1) > 1:
        from aoizora.export.replicas import replica_environments

        replica_environments(plan)  # a slice it cannot split on one host: refused before anything is written
    out = Path(out_dir)
    if not str(out_dir):
        raise OutputPathError("the export folder is empty; pass a directory path (`.` for this one)")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputPathError(f"cannot make the export folder {out_dir} ({exc.strerror or exc}); pass a directory "
                              "path that can be made (not a dangling link)") from None
    # written into a staging folder inside `out_dir` (same file system), then moved in with
    # command.sh last: an error or Ctrl-C leaves no half-written export
    staging = Path(tempfile.mkdtemp(prefix=".aoizora-export-", dir=out))
    try:
        _write_files(plan, run, staging)
        for path in sorted(staging.iterdir(), key=lambda f: f.name == COMMAND_SCRIPT):
            os.replace(path, out / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return run
