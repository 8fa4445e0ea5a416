"""A logical device mesh: ordered named axes and their sizes, as given to `jax.sharding.Mesh`."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from aoizora.errors import MeshSpecError

_AXIS = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)=([0-9]{1,9})")


@dataclass(frozen=True)
class MeshSpec:
    """Ordered logical mesh axes. The last axis varies fastest in the device array (row-major)."""

    axis_names: tuple[str, ...]
    axis_sizes: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.axis_names) != len(self.axis_sizes) or not self.axis_names:
            raise MeshSpecError("a mesh needs at least one axis, each with a name and a size")
        if len(set(self.axis_names)) != len(self.axis_names):
            raise MeshSpecError(f"mesh axis names repeat in {self}; give each axis its own name")
        if any(n < 1 for n in self.axis_sizes):
            raise MeshSpecError(f"mesh axis sizes must be positive in {self}")

    @property
    def size(self) -> int:
        return math.prod(self.axis_sizes)

    @property
    def shape(self) -> tuple[int, ...]:
        return self.axis_sizes

    @classmethod
    def parse(cls, text: str) -> MeshSpec:
        """Parse `NAME=SIZE,NAME=SIZE,...` (e.g. `sp=2,tp=4`)."""
        names, sizes = [], []
        for part in (p.strip() for p in text.split(",")):
            m = _AXIS.fullmatch(part)
            if not m:
                raise MeshSpecError(
                    f"malformed mesh axis {part!r} in {text!r}; write NAME=SIZE,... e.g. --mesh sp=2,tp=4"
                )
            names.append(m.group(1))
            sizes.append(int(m.group(2)))
        return cls(tuple(names), tuple(sizes))

    def check_fits(self, num_devices: int, where: str) -> None:
        """Raise MeshSpecError unless the mesh uses exactly `num_devices` devices."""
        if self.size != num_devices:
            raise MeshSpecError(
                f"mesh {self} has {self.size} positions but {where} has {num_devices} devices; "
                f"make the axis sizes multiply to {num_devices}"
            )

    def __str__(self) -> str:
        return ",".join(f"{n}={s}" for n, s in zip(self.axis_names, self.axis_sizes, strict=True))


def same_mesh(names_a: list[str], sizes_a: list[int], names: list[str], sizes: list[int]) -> bool:
    """Whether mesh (`names`, `sizes`) is mesh a, up to axes of size 1 left out (a plan's mesh may
    drop a strategy's unused axes): the same axes larger than 1 in the same order, and no other axis."""
    full = dict(zip(names_a, sizes_a, strict=True))
    big = [(n, s) for n, s in zip(names_a, sizes_a, strict=True) if s > 1]
    return (all(n in full and full[n] == s for n, s in zip(names, sizes, strict=True))
            and [(n, s) for n, s in zip(names, sizes, strict=True) if s > 1] == big
            and [n for n in names_a if n in names] == names)
