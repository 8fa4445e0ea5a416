"""The `aoizora` command group: typed errors and bad options become one line and exit 2, Ctrl-C
130, SIGTERM 143, SIGHUP 129; the compiler environment is checked before a command that starts jax;
strict JSON output; the option types and option groups the commands share."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import sys
from typing import Any

import click

from aoizora.defaults import (
    DEFAULT_COMPILE_WORKERS,
    DEFAULT_RAY_CPUS_PER_COMPILE,
)
from aoizora.errors import AoizoraError
from aoizora.interrupts import Terminated, interrupts_not_lost, start_resource_tracker_deaf_to_hangups

EXIT_BAD_INPUT = 2


EXIT_INTERRUPTED = 130  # 128 + SIGINT, what shells report for a command stopped by Ctrl-C


EXIT_TERMINATED = 143  # 128 + SIGTERM, what a job scheduler's stop reports


EXIT_HUNG_UP = 129  # 128 + SIGHUP: the terminal closed (treated as SIGTERM: unwound, nothing written)


def _one_line(text: str) -> str:
    """`text` with its line breaks (and the spaces around them) made one space: a message is one line."""
    return re.sub(r"\s*[\r\n\v\f\x1c-\x1e\x85\u2028\u2029]+\s*", " ", text).strip()


def _usage_line(exc: click.UsageError) -> str:
    """A click usage error as one line that says where to look (click writes a choice's values on
    lines of their own)."""
    command = exc.ctx.command_path if exc.ctx is not None else "aoizora"
    message = _one_line(exc.format_message()).rstrip(".")
    return f"aoizora: error: {message}; see `{_one_line(command)} --help`"


class _Group(click.Group):
    """Turns aoizora's typed errors and bad options into one-line messages with exit code 2; Ctrl-C
    into 130, SIGTERM into 143, SIGHUP into 129."""

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        try:
            return super().make_context(*args, **kwargs)
        except click.UsageError as exc:  # the group's own options
            click.echo(_usage_line(exc), err=True)
            raise click.exceptions.Exit(EXIT_BAD_INPUT) from None

    def resolve_command(self, ctx: click.Context, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        if name in _COMMANDS_THAT_START_JAX and not {"--help", "-h"} & set(rest):
            _check_environment()
            start_resource_tracker_deaf_to_hangups()
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            with interrupts_not_lost():
                return super().invoke(ctx)
        except AoizoraError as exc:
            click.echo(f"aoizora: error: {_one_line(str(exc))}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except RuntimeError as exc:
            if "Unable to initialize backend" not in str(exc):
                raise
            # JAX_PLATFORMS names a platform this host does not have, or none jax knows
            from aoizora.store import one_line

            platforms = os.environ.get("JAX_PLATFORMS")
            what, fix = ((f"JAX_PLATFORMS={platforms!r}", "unset JAX_PLATFORMS or name a platform this host has")
                         if platforms else ("its backend", "check that this host's accelerators are free"))
            reason = one_line(str(exc).split(" (set JAX_PLATFORMS")[0], 300)
            click.echo(f"aoizora: error: jax cannot start {what} ({reason}); {fix}", err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except click.UsageError as exc:  # a subcommand's options or arguments
            click.echo(_usage_line(exc), err=True)
            ctx.exit(EXIT_BAD_INPUT)
        except KeyboardInterrupt as exc:  # Terminated too
            ctx.exit(_stopped(exc))


# the commands that start jax's backends or libtpu (and so read XLA_FLAGS and LIBTPU_INIT_ARGS): every
# one that builds a slice's topology; `hlo` only parses text and `export` only reads the plan
_COMMANDS_THAT_START_JAX = frozenset({"plan", "compare", "run", "measure", "bench", "demo", "validate", "topology",
                                      "placements", "rank", "explain"})


def _check_environment() -> None:
    """Refuse in one line (CompilerFlagError) compiler environment variables that XLA or libtpu would
    end the process on, with exit 1 and no message, once they start; before any work."""
    from aoizora.defaults import cache_root
    from aoizora.store import unusable_dir
    from aoizora.toolchain import check_compiler_environment

    verdicts = cache_root() / "environment"
    check_compiler_environment(None if unusable_dir(verdicts) else verdicts)


def _stopped(exc: KeyboardInterrupt) -> int:
    """Say in one line that a stop signal ended the command; its exit code."""
    if not isinstance(exc, Terminated):
        click.echo("aoizora: interrupted", err=True)
        return EXIT_INTERRUPTED
    hung_up = exc.signum == signal.SIGHUP
    click.echo("aoizora: terminated (SIGHUP)" if hung_up else "aoizora: terminated", err=True)
    return EXIT_HUNG_UP if hung_up else EXIT_TERMINATED


def _finite(obj: Any) -> Any:
    """`obj` with every NaN or infinity replaced by None: JSON has no such numbers."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_finite(v) for v in obj]
    return obj


def print_json(obj: Any) -> None:
    """Strict JSON on stdout (no NaN or Infinity: producers say why a number is undefined)."""
    click.echo(json.dumps(_finite(obj), indent=2, allow_nan=False))


class _Seconds(click.ParamType):
    """A positive, finite number of seconds."""

    name = "SECONDS"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds; use e.g. 900", param, ctx)
        if not math.isfinite(seconds) or seconds <= 0:
            self.fail(f"{value!r} is not a positive number of seconds; use e.g. 900", param, ctx)
        return seconds


class _PositiveFinite(click.ParamType):
    """A positive, finite number (click's FloatRange lets NaN and infinity through)."""

    name = "NUMBER"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> float:
        try:
            number = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number; use e.g. 1", param, ctx)
        if not math.isfinite(number) or number <= 0:
            self.fail(f"{value!r} is not a positive finite number; use e.g. 1", param, ctx)
        return number


#: Most denoising steps `run`, `measure` and `bench --measure` time: Wan samples with 50 (40 for
#: Wan 2.2), and the scheduler holds a table of every step, so an absurd count fails inside JAX.
MAX_STEPS = 10_000


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="aoizora")
def cli() -> None:
    """Topology-aware planning of diffusion-transformer inference on TPU slices."""


_RING_OPTIONS = [
    click.option(
        "--ring-order",
        type=click.Choice(["reordering-map", "listed", "best"]),  # `aoizora.hlo.RingOrder`'s values
        default="reordering-map",
        show_default=True,
        help="Ring order the compiler uses: the group's listed order, the best order over its chips, "
        "or the best where the compiled config reports a reordering map and the listed elsewhere.",
    ),
    click.option(
        "--ring-direction",
        type=click.Choice(["auto", "uni", "bi"]),
        default="auto",
        show_default=True,
        help="Ring direction: from the compiled algorithm config, or forced.",
    ),
]


def _ring_options(fn):
    for option in reversed(_RING_OPTIONS):
        fn = option(fn)
    return fn


_EXECUTOR_OPTIONS = [
    click.option(
        "--workers", type=click.IntRange(min=1), default=DEFAULT_COMPILE_WORKERS, show_default=True,
        help="Compiles run at once, each in its own process (default: the host's cores). The plan is the "
        "one a sequential run makes.",
    ),
    click.option(
        "--executor", default="local", show_default=True, metavar="local|ray|ray://HOST:PORT",
        help="Where compiles run: child processes of this one, a Ray cluster on this machine, or a Ray cluster "
        "through its client server (needs pip install 'aoizora[ray]'; its workers must have the same jax, jaxlib, "
        "libtpu, aoizora and LIBTPU_INIT_ARGS/XLA_FLAGS, which is checked).",
    ),
    click.option(
        "--ray-cpus-per-compile", type=_PositiveFinite(), default=None,
        help=f"CPUs a compile reserves on a Ray cluster (default {DEFAULT_RAY_CPUS_PER_COMPILE:g}: a libtpu "
        "compile keeps about one core busy).",
    ),
]


def _workers_option(fn):
    for option in reversed(_EXECUTOR_OPTIONS):
        fn = option(fn)
    return fn


_libtpu_args_option = click.option(
    "--libtpu-args",
    metavar="FLAGS",
    default=None,
    help="libtpu/XLA flags every compile uses, written as LIBTPU_INIT_ARGS writes them (e.g. "
    "'--xla_tpu_enable_async_collective_fusion=true'), on top of those in LIBTPU_INIT_ARGS; recorded in the "
    "plan. Default: only LIBTPU_INIT_ARGS (empty: libtpu's defaults).",
)


def main() -> None:
    """Console entry point."""
    from aoizora.stderr_filter import StderrFilter
    from aoizora.toolchain import allow_multiple_libtpu_loads

    allow_multiple_libtpu_loads()  # before any command loads libtpu, inherited by its children
    code: Any = 0
    try:
        # from here on a stop signal is one line, also outside a command (setting up the filter,
        # reading the options) where the group's own handling does not reach
        with interrupts_not_lost(), StderrFilter():
            try:
                cli.main(standalone_mode=True)
            except SystemExit as exc:
                code = exc.code
    except KeyboardInterrupt as exc:
        code = _stopped(exc)
    sys.exit(code)
