"""Command line: `aoizora plan`, `compare`, `run`, `measure`, `explain`, `export`, `bench`, `demo`, and the
inspection commands `topology`, `placements`, `hlo`, `rank`, `validate`.

Library code raises `AoizoraError`s; here they become one line on stderr and exit code 2.
libtpu's no-TPU host-detection noise is filtered from stderr (see `stderr_filter`).
`base` holds the command group and what the commands share, `paths` what they read and write; each
other module registers its commands on the group when imported.
"""

from __future__ import annotations

from aoizora.cli import execution, inspection, planning, slices  # noqa: F401 - registers the commands
from aoizora.cli.base import cli, main, print_json
from aoizora.cli.planning import plan

__all__ = ["cli", "main", "plan", "print_json"]
