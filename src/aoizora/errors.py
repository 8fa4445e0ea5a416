"""Typed exceptions. Library code raises these; the CLI turns them into one-line messages.

Every message says what is wrong and what to do about it.
"""

from __future__ import annotations

from typing import Any


def clipped(value: Any, limit: int = 200) -> str:
    """`value` as Python writes it, cut to about `limit` characters (an ellipsis says so): a value
    read from a file, quoted in a message that must stay one line of reasonable length."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


class AoizoraError(Exception):
    """Base class of every error aoizora raises on bad input or a missing toolchain."""


class ToolchainError(AoizoraError):
    """The TPU compile-only toolchain (jax + libtpu) is missing or unusable."""


class CompilerFlagError(AoizoraError):
    """Compiler (libtpu/XLA) flags that are malformed or that the compiler does not accept."""


class TopologyError(AoizoraError):
    """A TPU slice name or description that aoizora cannot use."""


class MeshSpecError(AoizoraError):
    """A logical mesh that is malformed or does not fit the slice."""


class PlacementError(AoizoraError):
    """A physical placement that cannot be built or does not match its slice."""


class HloParseError(AoizoraError):
    """Text that is not (complete) HLO; ``line`` and ``column`` locate the problem (1-based)."""

    def __init__(self, message: str, line: int = 0, column: int = 0) -> None:
        super().__init__(message)
        self.line = line
        self.column = column


class HloModelError(AoizoraError):
    """Parsed HLO whose structure cannot form a program (missing computation, bad operand)."""


class SimulationError(AoizoraError):
    """A program, placement and topology that the reference simulator cannot run together."""


class BufferDumpError(AoizoraError):
    """A compile dump without a readable buffer assignment."""


class PlanFormatError(AoizoraError):
    """A plan file that is missing, not JSON, or not a valid plan of this schema version."""


class PlanMismatchError(AoizoraError):
    """A plan applied to devices of another kind, count or slice shape."""


class PlanningError(AoizoraError):
    """Planning could not produce a plan (e.g. no strategy fits or compiles)."""


class OutputPathError(AoizoraError):
    """An output path (--out, --report) that cannot be written."""


class CheckpointError(AoizoraError):
    """A model checkpoint that is missing a tensor, has a wrongly shaped one, or cannot be read."""


class StrategyError(AoizoraError):
    """A parallel strategy that is illegal for the model, the input shapes or the mesh."""


class ShapeError(AoizoraError):
    """A video resolution, frame count or input array shape the model cannot take."""


class BenchError(AoizoraError):
    """A benchmark request that cannot run (unknown cell, unreadable results)."""


class CostModelOptionError(AoizoraError):
    """An option of the cost model or simulator that is not one of its choices (e.g. a ring order)."""


class ExecutorError(AoizoraError):
    """A compile executor (e.g. a Ray cluster) that cannot be reached, is not installed, or whose
    workers would compile differently from this process."""


class ExportError(AoizoraError):
    """A plan another framework cannot run as planned, or its command that aoizora cannot read."""


class PriceFileError(AoizoraError):
    """A price file (`aoizora compare --prices`) that is missing, not JSON, or not of the price format."""


class MaxDiffusionUnavailable(AoizoraError):
    """MaxDiffusion's own program was asked for (`--program maxdiffusion`) where MaxDiffusion cannot be
    imported: neither installed in this Python nor named by `MAXDIFFUSION_DIR` with its requirements."""


class MeasureError(AoizoraError):
    """A chip measurement (`aoizora measure --per-device` or `--splash`) asked for where it cannot
    run: no TPU attached, or a program that the attached chip cannot hold."""


class LocalizeError(AoizoraError):
    """A partitioned module holds an operation that `aoizora.measure.local_program.localize` cannot
    replace by a local one of the same output shape."""


class ArgumentError(AoizoraError, ValueError):
    """A Python API argument out of its range or not one of its choices; the message names it."""


class ArgumentTypeError(ArgumentError, TypeError):
    """A Python API argument of the wrong type; the message names it."""
