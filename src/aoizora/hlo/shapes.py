"""HLO shapes: element type, dimensions, TPU layout, tuples — and their size in bytes.

Byte counts ignore TPU tiling padding on purpose: payloads of collectives and HBM traffic are
reported in logical bytes (what the program moves), which is what hand-computed expectations
and the textbook collective costs use. The raw layout text is kept for whoever needs padding.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

# Bits per element of every HLO primitive type libtpu prints.
_BITS: dict[str, int] = {
    "pred": 8,
    "s2": 2, "u2": 2, "s4": 4, "u4": 4, "s8": 8, "u8": 8,
    "s16": 16, "u16": 16, "s32": 32, "u32": 32, "s64": 64, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f8e5m2": 8, "f8e4m3fn": 8, "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8,
    "f8e4m3": 8, "f8e3m4": 8, "f8e8m0fnu": 8, "f4e2m1fn": 4,
    "token": 0, "opaque": 0,
}


def element_bits(dtype: str) -> int | None:
    """Bits per element of an HLO primitive type, None when the type is unknown."""
    return _BITS.get(dtype)


@dataclass(frozen=True, slots=True)
class Shape:
    """An array shape (``dtype``, ``dims``, raw ``layout``) or a tuple of shapes."""

    dtype: str  # "tuple" for tuples
    dims: tuple[int, ...] = ()
    layout: str | None = None  # text between the braces, e.g. "1,0:T(8,128)(2,1)S(1)"
    tuple_shapes: tuple[Shape, ...] = ()

    @property
    def is_tuple(self) -> bool:
        """True for tuple shapes."""
        return self.dtype == "tuple"

    @property
    def num_elements(self) -> int:
        """Elements of an array shape (0 for tuples)."""
        return 0 if self.is_tuple else prod(self.dims)

    @property
    def byte_size(self) -> int:
        """Logical bytes (sum over tuple elements; sub-byte types rounded up per array)."""
        if self.is_tuple:
            return sum(s.byte_size for s in self.tuple_shapes)
        bits = _BITS.get(self.dtype, 0)
        return (prod(self.dims) * bits + 7) // 8

    @property
    def memory_space(self) -> int:
        """TPU memory space from the layout's ``S(n)`` suffix (0 = HBM, 1 = VMEM, ...)."""
        if not self.layout:
            return 0
        i = self.layout.rfind("S(")
        if i < 0:
            return 0
        j = self.layout.find(")", i)
        try:
            return int(self.layout[i + 2 : j])
        except ValueError:
            return 0

    def leaves(self) -> list[Shape]:
        """Array shapes in tuple order (the shape itself when it is an array)."""
        if not self.is_tuple:
            return [self]
        out: list[Shape] = []
        for s in self.tuple_shapes:
            out.extend(s.leaves())
        return out

    def __str__(self) -> str:
        if self.is_tuple:
            return "(" + ", ".join(str(s) for s in self.tuple_shapes) + ")"
        return f"{self.dtype}[{','.join(map(str, self.dims))}]"
