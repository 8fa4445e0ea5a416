"""The evaluation grids: the tuning grid (slices x resolutions x frame counts), the held-out grid,
and the `--quick` subset.

The tuning grid is where the planner's defaults (Top-K) and the memory model's rules were chosen;
the held-out grid is a second set of cells none of them was tuned on (another TPU generation, other
frame counts, the smaller model), so its recall and memory accuracy are out of sample.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

TOPOLOGIES = ("v5e:2x2", "v5e:2x4", "v5e:4x4")
RESOLUTIONS = ("480p", "720p")
FRAMES = (21, 41, 81)
MODEL = "wan2.1-t2v-14b"
FALLBACK_MODEL = "wan2.1-t2v-1.3b"  # used in a cell where no 14B strategy fits in HBM


@dataclass(frozen=True)
class Cell:
    """One scenario of the grid (the model may fall back to 1.3B when 14B cannot fit)."""

    topology: str
    resolution: str
    frames: int
    model: str = MODEL

    @property
    def id(self) -> str:
        return f"{self.topology.replace(':', '-')}_{self.resolution}_{self.frames}f_{self.model}"

    def label(self) -> str:
        return f"{self.topology} {self.resolution} {self.frames}f"


def full_grid(model: str = MODEL) -> list[Cell]:
    return [Cell(t, r, f, model) for t in TOPOLOGIES for r in RESOLUTIONS for f in FRAMES]


def held_out_grid() -> list[Cell]:
    """Cells no default or rule was tuned on: Wan 14B on v6e at 720p/81 and 480p/21 frames, Wan
    1.3B on v5e at 480p/81."""
    v6e = [Cell(t, r, f, MODEL) for t in ("v6e:2x4", "v6e:4x4") for r, f in (("720p", 81), ("480p", 21))]
    return v6e + [Cell(t, "480p", 81, FALLBACK_MODEL) for t in ("v5e:2x4", "v5e:4x4")]


GRIDS: dict[str, Callable[[], list[Cell]]] = {"tuning": full_grid, "held-out": held_out_grid}


def quick_grid(model: str = MODEL) -> list[Cell]:
    """The smallest cell: one 4-chip slice, 480p, 21 frames."""
    return [Cell("v5e:2x2", "480p", 21, model)]


def parse_cell(text: str, model: str = MODEL) -> Cell:
    """`v5e:2x4/720p/81` or `v5e:2x4/480p/81/wan2.1-t2v-1.3b` -> Cell (for `--cell`).

    The whole cell is checked here (slice name, model, resolution, frame count), so that a bench of
    several cells refuses a bad one before it runs the first.
    """
    from aoizora.errors import AoizoraError, BenchError
    from aoizora.models.registry import model_config, model_key, video_shape
    from aoizora.topology.slice import parse_topology_name, slice_name

    parts = text.split("/")
    if len(parts) not in (3, 4) or not re.fullmatch(r"[0-9]{1,6}", parts[2]):
        raise BenchError(f"cell {text!r} is not TOPOLOGY/RESOLUTION/FRAMES[/MODEL], e.g. v5e:2x4/720p/81")
    cell = Cell(parts[0], parts[1], int(parts[2]), parts[3] if len(parts) == 4 else model)
    try:
        generation, shape = parse_topology_name(cell.topology)
        name = model_key(cell.model)
        video_shape(model_config(name), cell.resolution, cell.frames)
    except AoizoraError as exc:
        raise BenchError(f"cell {text!r}: {exc}") from None
    return Cell(slice_name(generation, shape), cell.resolution, cell.frames, name)
