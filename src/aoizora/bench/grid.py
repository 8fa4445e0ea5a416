"""The evaluation grid: slices x resolutions x frame counts, and the `--quick` subset."""

from __future__ import annotations

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


def quick_grid(model: str = MODEL) -> list[Cell]:
    """The smallest cell: one 4-chip slice, 480p, 21 frames."""
    return [Cell("v5e:2x2", "480p", 21, model)]


def parse_cell(text: str, model: str = MODEL) -> Cell:
    """`v5e:2x4/720p/81` -> Cell (for `--cell`)."""
    from aoizora.errors import BenchError

    parts = text.split("/")
    if len(parts) != 3 or not parts[2].isdigit():
        raise BenchError(f"cell {text!r} is not TOPOLOGY/RESOLUTION/FRAMES, e.g. v5e:2x4/720p/81")
    return Cell(parts[0], parts[1], int(parts[2]), model)
