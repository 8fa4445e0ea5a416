"""A plan: the chosen logical strategy and physical placement, as a file and as a `jax.sharding.Mesh`."""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from aoizora.errors import ArgumentError, OutputPathError, PlanFormatError, PlanMismatchError
from aoizora.placement import DeviceMismatch, arrange_devices
from aoizora.plan.consistency import check_consistency, check_plain_strings, check_strategy_mesh
from aoizora.plan.replicas import Split
from aoizora.plan.schema import validate_plan_json
from aoizora.store import write_json_atomic
from aoizora.toolchain import CompilerFlags
from aoizora.topology.slice import slice_name

#: Largest plan file read. A plan of a 14B model with its Stage 1 table is under 1 MiB; the cap
#: keeps a wrong path (a device such as /dev/zero, a video) from being read whole into memory.
MAX_PLAN_BYTES = 64 * 2**20


@dataclass
class Plan:
    """A validated plan file. `data` is the JSON document; the properties read it."""

    data: dict[str, Any]

    def __post_init__(self) -> None:
        check_plan(self.data)

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

    @property
    def replicas(self) -> dict[str, Any] | None:
        """A throughput plan's replicas (the full slice, each replica's chips, ...); None for a plan of
        one replica on the whole slice."""
        return self.data.get("replicas")

    @property
    def replica_count(self) -> int:
        return int(self.replicas["count"]) if self.replicas else 1

    # --- applying it ----------------------------------------------------------------------------
    def mesh(self, devices: Any = None, replica: int | None = None) -> Any:
        """The `jax.sharding.Mesh` of this plan over `devices` (default: `jax.devices()`).

        Devices are matched by their ICI coordinates (and core on chip), so the mesh lands on the
        planned chips whatever order the runtime lists them in. Refuses devices of another kind,
        another count or another slice shape.

        `replica`: for a throughput plan (`replicas`), the mesh of that replica (0-based) over the
        devices of the full slice; without it, the plan's own slice (a replica's process that sees its
        sub-slice alone, as the MaxDiffusion export runs it).
        """
        import jax
        from jax.sharding import Mesh

        devices = list(jax.devices() if devices is None else devices)
        topo = self.data["topology"]
        try:
            if replica is None:
                arr = arrange_devices(devices, slice_name=topo["name"], device_kinds=topo["device_kinds"],
                                      shape=topo["shape"], cores_per_chip=self.cores_per_chip,
                                      device_coords=self.device_coords)
            else:
                arr = self._replica_devices(devices, replica)
        except DeviceMismatch as exc:
            raise PlanMismatchError(str(exc)) from None
        return Mesh(arr, self.axis_names)

    def replica_meshes(self, devices: Any = None) -> list[Any]:
        """Every replica's mesh over the full slice's `devices` (default `jax.devices()`); one mesh, the
        plan's, for a plan without replicas."""
        if self.replicas is None:
            return [self.mesh(devices)]
        return [self.mesh(devices, replica=i) for i in range(self.replica_count)]

    def _replica_devices(self, devices: list[Any], replica: int) -> np.ndarray:
        """The replica's devices at its mesh positions, matched among the full slice's devices: the
        replica's planned coordinates moved to its block, then every other device of the full slice,
        so `arrange_devices` checks the whole slice and places each device once."""
        block = self.replicas
        if block is None:
            raise ArgumentError(f"replica={replica!r}: this plan has no replicas (made for one video's time on "
                                f"{self.topology_name}); call mesh() without replica")
        if isinstance(replica, bool) or not isinstance(replica, int) or not 0 <= replica < block["count"]:
            raise ArgumentError(f"replica must be a replica index 0..{block['count'] - 1} of this plan's "
                                f"{block['count']} replicas, not {replica!r}")
        from aoizora.topology.slice import parse_topology_name

        generation, full = parse_topology_name(block["slice"])
        split = Split(tuple(full), tuple(self.data["topology"]["shape"]))
        dims, cores = len(full), self.cores_per_chip
        offset = np.array([*split.offsets[replica], *([0] if cores > 1 else [])])
        mine = (self.device_coords + offset).reshape(-1, dims + (cores > 1))
        taken = {tuple(row) for row in mine.tolist()}
        chips = [c for i in range(split.count) for c in split.chips(i)]
        per_chip: list[tuple[int, ...]] = [(k,) for k in range(cores)] if cores > 1 else [()]
        rest = [(*c, *core) for c in chips for core in per_chip if (*c, *core) not in taken]
        arr = arrange_devices(devices, slice_name=slice_name(generation, full),
                              device_kinds=self.data["topology"]["device_kinds"], shape=full, cores_per_chip=cores,
                              device_coords=np.array([*mine.tolist(), *rest]))
        return arr[:len(mine)].reshape(self.axis_sizes)

    # --- files ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write atomically (`aoizora.store.write_json_atomic`): never a half-written plan. The file
        gets the mode a new file takes under the process umask; a path that names anything but a
        regular file (a directory, a device, a FIFO) is refused, never replaced."""
        path = Path(path)
        if path.exists() and not path.is_file():
            raise OutputPathError(f"{path} exists and is not a regular file; pass a file path for the plan")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json_atomic(path, self.data, indent=2, newline=True, prefix=".plan-")
        return path


def load_plan(path: str | os.PathLike[str]) -> Plan:
    """Read and validate a plan file; PlanFormatError says what is wrong with a bad one."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_PLAN_BYTES + 1)  # capped: /dev/zero or a huge file is not read whole
    except OSError as exc:
        raise PlanFormatError(
            f"cannot read plan {path}: {exc.strerror}; pass the path `aoizora plan --out` wrote") from None
    except MemoryError:
        raise PlanFormatError(f"plan {path} does not fit in memory; pass the path `aoizora plan --out` wrote") from None
    if len(raw) > MAX_PLAN_BYTES:
        raise PlanFormatError(f"plan {path} is larger than {MAX_PLAN_BYTES // 2**20} MiB, far more than a plan; "
                              "pass the path `aoizora plan --out` wrote")
    return plan_from_bytes(raw, source=f"plan {path}")


def plan_from_bytes(raw: bytes, source: str = "plan") -> Plan:
    """A plan from the bytes of a plan file (UTF-8 strict JSON); PlanFormatError names `source` if bad."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise PlanFormatError(
            f"{source} is not UTF-8 text (byte {exc.start}); it is not a plan file, re-run `aoizora plan`"
        ) from None
    try:
        data = strict_json_loads(text)
    except json.JSONDecodeError as exc:
        raise PlanFormatError(
            f"{source} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); re-run `aoizora plan`"
        ) from None
    except (ValueError, RecursionError) as exc:
        raise PlanFormatError(f"{source} is not valid JSON ({exc}); re-run `aoizora plan`") from None
    check_plan(data, source=source)
    return Plan(data)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def strict_json_loads(text: str) -> Any:
    """`json.loads` that refuses NaN and Infinity (which Python's json accepts but JSON does not)."""
    return json.loads(text, parse_constant=_reject_constant)


def _non_finite(value: Any, where: str = "") -> str | None:
    """The path of the first non-finite number in a JSON document, None if all are finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "(top level)"
    items: Iterable[tuple[Any, Any]]
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return None
    for k, v in items:
        found = _non_finite(v, f"{where}/{k}" if where else str(k))
        if found:
            return found
    return None


def check_plan(data: Any, source: str = "plan") -> None:
    """Raise PlanFormatError unless `data` is a valid plan whose parts agree with each other.

    Beyond the schema: finite numbers; axis names distinct and as many as the sizes; the mesh uses
    every device of the slice; the slice name, generation, shape and device kinds describe the same
    slice; the device coordinates are integers inside the slice, one per device; every field that
    restates another agrees with it (`aoizora.plan.consistency`).
    """
    fix = "re-run `aoizora plan` to write a new one"
    check_plain_strings(data, source, fix)  # first: no message below echoes a control character
    validate_plan_json(data, source=source)
    bad_number = _non_finite(data)
    if bad_number:
        raise PlanFormatError(f"{source} has a non-finite number at {bad_number}; {fix}")
    names, sizes = data["mesh"]["axis_names"], data["mesh"]["axis_sizes"]
    if len(names) != len(sizes):
        raise PlanFormatError(f"{source} field mesh.axis_names names {len(names)} mesh axes but gives "
                              f"{len(sizes)} sizes (mesh.axis_sizes); {fix}")
    if len(set(names)) != len(names):
        raise PlanFormatError(f"{source} field mesh.axis_names repeats a mesh axis name in {names}; {fix}")
    check_strategy_mesh(data, source, fix)
    topo = data["topology"]
    _check_slice(topo, source, fix)
    cores = int(topo["cores_per_chip"])
    n_devices = math.prod(topo["shape"]) * cores
    if math.prod(sizes) != n_devices:
        raise PlanFormatError(
            f"{source} field mesh.axis_sizes is {sizes} ({math.prod(sizes)} devices) but topology {topo['name']} "
            f"has {n_devices} (shape x cores_per_chip); {fix}"
        )
    _check_coords(data["placement"]["device_coords"], tuple(sizes), topo, f"{source} placement.device_coords", fix)
    same = data.get("baselines", {}).get("same_strategy_jax_default", {})
    if isinstance(same, dict) and "device_coords" in same:
        _check_coords(same["device_coords"], tuple(sizes), topo,
                      f"{source} baselines.same_strategy_jax_default.device_coords", fix)
    check_consistency(data, source, fix)


def _check_slice(topo: dict[str, Any], source: str, fix: str) -> None:
    from aoizora.errors import TopologyError
    from aoizora.topology.hardware import hardware_profile
    from aoizora.topology.slice import parse_topology_name

    try:
        generation, shape = parse_topology_name(topo["name"])
        profile = hardware_profile(topo["generation"])
    except TopologyError as exc:
        raise PlanFormatError(f"{source} field topology names a slice aoizora does not know ({exc}); {fix}") from None
    if generation != profile.generation:
        raise PlanFormatError(
            f"{source} field topology.name {topo['name']} disagrees with topology.generation "
            f"{topo['generation']}; {fix}"
        )
    if list(shape) != list(topo["shape"]):
        raise PlanFormatError(
            f"{source} field topology.shape gives shape {'x'.join(map(str, topo['shape']))} but topology.name is "
            f"{topo['name']}; {fix}"
        )
    foreign = sorted(set(topo["device_kinds"]) - set(profile.device_kinds))
    if foreign:
        raise PlanFormatError(
            f"{source} field topology.device_kinds lists for {topo['name']} device kind(s) {', '.join(foreign)} "
            f"(a {profile.generation} chip is {' or '.join(profile.device_kinds)}); {fix}"
        )


def _check_coords(value: Any, sizes: tuple[int, ...], topo: dict[str, Any], what: str, fix: str) -> None:
    cores = int(topo["cores_per_chip"])
    dims = len(topo["shape"])
    expected = (*sizes, dims + (cores > 1))
    try:
        coords = np.asarray(value)
    except ValueError:  # ragged nesting
        coords = np.asarray([], dtype=object)
    if coords.shape != expected:
        raise PlanFormatError(
            f"{what} is nested as {coords.shape}, expected {expected} (one coordinate list of "
            f"{expected[-1]} per mesh position of {sizes}); {fix}"
        )
    if coords.dtype.kind not in "iu":
        raise PlanFormatError(f"{what} holds non-integer coordinates (dtype {coords.dtype}); {fix}")
    limits = np.array([*topo["shape"], *([cores] if cores > 1 else [])])
    flat = coords.reshape(-1, coords.shape[-1])
    outside = (flat < 0) | (flat >= limits)
    if outside.any():
        row = flat[np.nonzero(outside.any(axis=1))[0][0]].tolist()
        raise PlanFormatError(
            f"{what} has coordinates {row} outside the {'x'.join(map(str, topo['shape']))} slice; {fix}"
        )
    if len({tuple(c) for c in flat.tolist()}) != len(flat):
        raise PlanFormatError(f"{what} does not list every device of the slice exactly once; {fix}")
