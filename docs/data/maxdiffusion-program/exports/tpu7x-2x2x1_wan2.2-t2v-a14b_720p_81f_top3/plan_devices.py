"""The runtime's devices arranged as a plan places them: matched by ICI coordinates and core on chip.

This module imports nothing of aoizora (numpy only): `aoizora.plan.Plan.mesh` uses it, and
`aoizora export --to maxdiffusion` copies it beside the launcher it writes, so a MaxDiffusion
installation without aoizora arranges its devices by the same rule.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np


class DeviceMismatch(ValueError):
    """The devices present are not the slice the plan was made for."""


def arrange_devices(devices: Sequence[Any], *, slice_name: str, device_kinds: Sequence[str], shape: Sequence[int],
                    cores_per_chip: int, device_coords: Any) -> np.ndarray:
    """`devices` as an object array shaped like `device_coords` without its last axis: the device
    at each planned coordinate (x, y[, z][, core]).

    Refuses (DeviceMismatch) devices of another kind, another count or another slice shape, and
    devices without TPU coordinates.
    """
    coords = np.asarray(device_coords)
    kinds = {str(getattr(d, "device_kind", "?")) for d in devices}
    if not kinds <= set(device_kinds):
        raise DeviceMismatch(
            f"the plan is for {slice_name} ({', '.join(device_kinds)}) but the devices are "
            f"{', '.join(sorted(kinds))}; run on the planned slice or re-plan for these devices"
        )
    expected = math.prod(shape) * cores_per_chip
    if len(devices) != expected:
        raise DeviceMismatch(
            f"the plan is for {expected} devices of {slice_name} but {len(devices)} are present; "
            "run on the planned slice or re-plan for this one"
        )
    dims = len(shape)
    by_coords: dict[tuple[int, ...], Any] = {}
    for d in devices:
        where = getattr(d, "coords", None)
        if where is None:
            raise DeviceMismatch(f"device {d} has no TPU coordinates; pass TPU devices of {slice_name}")
        core = (int(getattr(d, "core_on_chip", 0)),) if cores_per_chip > 1 else ()
        key = tuple(int(c) for c in where[:dims]) + core
        by_coords[key] = d
    extent = tuple(max(k[i] for k in by_coords) + 1 for i in range(dims))
    if list(extent) != list(shape):
        raise DeviceMismatch(
            f"the plan is for a {'x'.join(map(str, shape))} slice but the devices form "
            f"{'x'.join(map(str, extent))}; run on the planned slice or re-plan for this one"
        )
    if len(by_coords) != len(devices):
        raise DeviceMismatch(f"two of the {len(devices)} devices share TPU coordinates; run on the planned slice")
    arr = np.empty(coords.shape[:-1], dtype=object)
    if arr.size != len(devices):
        raise DeviceMismatch(f"the plan places {arr.size} mesh positions on {len(devices)} devices; export the plan "
                             "again")
    used: set[tuple[int, ...]] = set()
    for idx in np.ndindex(*arr.shape):
        key = tuple(int(v) for v in coords[idx])
        if key not in by_coords:
            raise DeviceMismatch(f"no device at planned coordinates {key}; run on the planned slice")
        if key in used:
            raise DeviceMismatch(f"the plan places two mesh positions on the device at {key}; export the plan again")
        used.add(key)
        arr[idx] = by_coords[key]
    return arr
