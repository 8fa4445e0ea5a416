"""A plan: the chosen logical strategy and physical placement, as a file and as a `jax.sharding.Mesh`."""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aoizora.errors import PlanFormatError, PlanMismatchError
from aoizora.plan.schema import validate_plan_json
from aoizora.toolchain import CompilerFlags


@dataclass
class Plan:
    """A validated plan file. `data` is the JSON document; the properties read it."""

    data: dict[str, Any]

    def __post_init__(self) -> None:
        validate_plan_json(self.data)
        coords = np.asarray(self.data["placement"]["device_coords"])
        expected = tuple(self.axis_sizes) + (len(self.data["topology"]["shape"]) + (self.cores_per_chip > 1),)
        if coords.dtype.kind not in "iu" or coords.shape != expected:
            raise PlanFormatError(
                f"plan placement.device_coords has shape {coords.shape}, expected {expected} for mesh "
                f"{self.axis_sizes}; re-run `aoizora plan`"
            )
        n_chips = math.prod(self.data["topology"]["shape"]) * self.cores_per_chip
        flat = [tuple(c) for c in coords.reshape(-1, coords.shape[-1]).tolist()]
        if len(set(flat)) != len(flat) or len(flat) != n_chips:
            raise PlanFormatError("plan placement.device_coords does not list every device of the slice exactly once")

    # --- what the plan says -------------------------------------------------------------------
    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(self.data["mesh"]["axis_names"])

    @property
    def axis_sizes(self) -> tuple[int, ...]:
        return tuple(self.data["mesh"]["axis_sizes"])

    @property
    def topology_name(self) -> str:
        return self.data["topology"]["name"]

    @property
    def cores_per_chip(self) -> int:
        return int(self.data["topology"]["cores_per_chip"])

    @property
    def strategy(self) -> dict[str, Any]:
        """The logical strategy: axis roles, attention variant, weight sharding (workload-defined keys)."""
        return dict(self.data["strategy"])

    @property
    def device_coords(self) -> np.ndarray:
        return np.asarray(self.data["placement"]["device_coords"])

    @property
    def predicted_step_seconds(self) -> float:
        return float(self.data["prediction"]["step_seconds"])

    @property
    def compiler_flags(self) -> CompilerFlags:
        """The libtpu/XLA flags the plan's program was compiled with (none in plans that record none)."""
        return CompilerFlags.parse(self.data.get("compiler", {}).get("libtpu_args", ""))

    def compiler_options(self) -> dict[str, str]:
        """The plan's flags as `jax.jit(..., compiler_options=...)` takes them; run the plan with these."""
        return self.compiler_flags.compiler_options()

    # --- applying it ----------------------------------------------------------------------------
    def mesh(self, devices: Any = None) -> Any:
        """The `jax.sharding.Mesh` of this plan over `devices` (default: `jax.devices()`).

        Devices are matched by their ICI coordinates (and core on chip), so the mesh lands on the
        planned chips whatever order the runtime lists them in. Refuses devices of another kind,
        another count or another slice shape.
        """
        import jax
        from jax.sharding import Mesh

        devices = list(jax.devices() if devices is None else devices)
        topo = self.data["topology"]
        kinds = {str(getattr(d, "device_kind", "?")) for d in devices}
        if not kinds <= set(topo["device_kinds"]):
            raise PlanMismatchError(
                f"the plan is for {topo['name']} ({', '.join(topo['device_kinds'])}) but the devices are "
                f"{', '.join(sorted(kinds))}; run on the planned slice or re-plan for these devices"
            )
        expected = math.prod(topo["shape"]) * self.cores_per_chip
        if len(devices) != expected:
            raise PlanMismatchError(
                f"the plan is for {expected} devices of {topo['name']} but {len(devices)} are present; "
                "run on the planned slice or re-plan for this one"
            )
        dims = len(topo["shape"])
        by_coords: dict[tuple[int, ...], Any] = {}
        for d in devices:
            coords = getattr(d, "coords", None)
            if coords is None:
                raise PlanMismatchError(f"device {d} has no TPU coordinates; pass TPU devices of {topo['name']}")
            key = tuple(int(c) for c in coords[:dims]) + ((int(getattr(d, "core_on_chip", 0)),) if self.cores_per_chip > 1 else ())
            by_coords[key] = d
        extent = tuple(max(k[i] for k in by_coords) + 1 for i in range(dims))
        if list(extent) != list(topo["shape"]):
            raise PlanMismatchError(
                f"the plan is for a {'x'.join(map(str, topo['shape']))} slice but the devices form "
                f"{'x'.join(map(str, extent))}; run on the planned slice or re-plan for this one"
            )
        coords = self.device_coords
        arr = np.empty(self.axis_sizes, dtype=object)
        for idx in np.ndindex(*self.axis_sizes):
            key = tuple(int(v) for v in coords[idx])
            if key not in by_coords:
                raise PlanMismatchError(f"no device at planned coordinates {key}; run on the planned slice")
            arr[idx] = by_coords[key]
        return Mesh(arr, self.axis_names)

    # --- files ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (temp file, then rename): never a half-written plan."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".plan-", suffix=".json", dir=path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(self.data, fh, indent=2)
                fh.write("\n")
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return path


def load_plan(path: str | os.PathLike[str]) -> Plan:
    """Read and validate a plan file; PlanFormatError says what is wrong with a bad one."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise PlanFormatError(f"cannot read plan {path}: {exc.strerror}; pass the path `aoizora plan --out` wrote") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise PlanFormatError(
            f"plan {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); re-run `aoizora plan`"
        ) from None
    if isinstance(data, dict):
        validate_plan_json(data, source=f"plan {path}")
    return Plan(data)
