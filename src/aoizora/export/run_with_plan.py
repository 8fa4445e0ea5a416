"""Run MaxDiffusion's Wan generation with an aoizora plan's device order.

Written by `aoizora export --to maxdiffusion` beside `maxdiffusion_plan.json` and `plan_devices.py`.
Run it from a MaxDiffusion checkout on the planned TPU slice:

    python DIR/run_with_plan.py [key=value ...]      # extra generate_wan.py overrides, e.g. prompt=...
    python DIR/run_with_plan.py --check              # only check the devices and print the mesh

MaxDiffusion builds its mesh from `max_utils.create_device_mesh(config)` over `jax.devices()`,
which knows nothing of the plan's placement. This launcher checks that `jax.devices()` is the
planned slice (kind, count, ICI coordinates and core on chip), replaces `create_device_mesh` with
a function of the same signature that returns the plan's devices in MaxDiffusion's `mesh_axes`
order (MaxDiffusion looks it up on `max_utils` at each call), sets `LIBTPU_INIT_ARGS` to the
plan's flags unless already set, and runs `generate_wan.main` with the plan's overrides. It
imports nothing of aoizora.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

try:  # beside the exported plan
    from plan_devices import DeviceMismatch, arrange_devices
except ImportError:  # inside aoizora
    from aoizora.placement.slice_devices import DeviceMismatch, arrange_devices

SPEC = Path(__file__).with_name("maxdiffusion_plan.json")


class LaunchError(RuntimeError):
    """The launcher cannot run this plan here."""


def load_spec(path: Path = SPEC) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LaunchError(f"cannot read {path.name}: {exc}; export the plan again") from None


def plan_device_array(devices: Sequence[Any], spec: dict[str, Any]) -> Any:
    """The devices at the plan's coordinates, shaped as MaxDiffusion's mesh (`spec["mesh_axes"]`)."""
    s = spec["slice"]
    try:
        return arrange_devices(devices, slice_name=s["name"], device_kinds=s["device_kinds"], shape=s["shape"],
                               cores_per_chip=s["cores_per_chip"], device_coords=spec["device_coords"])
    except DeviceMismatch as exc:
        raise LaunchError(str(exc)) from None


def planned_create_device_mesh(spec: dict[str, Any], device_array: Any) -> Callable[..., Any]:
    """A replacement for `maxdiffusion.max_utils.create_device_mesh(config, devices=None, logging=True)`
    that returns the plan's device array when the config asks for the plan's mesh."""
    want = spec["ici_parallelism"]
    planned = {id(d) for d in device_array.flat}

    def create_device_mesh(config: Any, devices: Any = None, logging: bool = True) -> Any:
        got = {key: int(getattr(config, key)) for key in want}
        if got != want:
            raise LaunchError(f"MaxDiffusion asks for the mesh {got}, the plan's is {want}; "
                              "do not override the ici_*_parallelism keys the plan sets")
        if devices is not None and {id(d) for d in devices} != planned:
            raise LaunchError("MaxDiffusion asks for a mesh over other devices than the plan's slice")
        if logging:
            mesh = dict(zip(spec["mesh_axes"], device_array.shape, strict=True))
            print(f"aoizora plan: mesh {mesh} in the plan's device order", file=sys.stderr)
        return device_array

    return create_device_mesh


def generate_wan_argv(spec: dict[str, Any], extra: Sequence[str]) -> list[str]:
    """generate_wan.py's argv: the plan's config and overrides, then the user's extra overrides
    (which may not change a key the plan sets)."""
    planned = set(spec["plan_keys"])
    for item in extra:
        key = item.split("=", 1)[0]
        if "=" not in item:
            raise LaunchError(f"{item!r} is not a key=value override of generate_wan.py")
        if key in planned:
            raise LaunchError(f"{key} is set by the plan; re-plan instead of overriding it")
    return ["generate_wan.py", *spec["argv"], *extra]


def _libtpu_env(spec: dict[str, Any]) -> None:
    """Set LIBTPU_INIT_ARGS to the plan's flags (libtpu reads it once, at the first jax import)."""
    flags = spec["libtpu_init_args"]
    current = os.environ.get("LIBTPU_INIT_ARGS")
    if current is None:
        os.environ["LIBTPU_INIT_ARGS"] = flags
    elif set(flags.split()) - set(current.split()):
        missing = " ".join(sorted(set(flags.split()) - set(current.split())))
        print(f"aoizora plan: note: LIBTPU_INIT_ARGS lacks the plan's {missing}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check_only = "--check" in args
    args = [a for a in args if a != "--check"]
    try:
        spec = load_spec()
        generate_argv = generate_wan_argv(spec, args)
        _libtpu_env(spec)
        import jax

        device_array = plan_device_array(jax.devices(), spec)
        if check_only:
            print(f"{spec['slice']['name']}: mesh {dict(zip(spec['mesh_axes'], device_array.shape, strict=True))}, "
                  f"devices in the plan's order: {[d.id for d in device_array.flat]}")
            return 0
        from maxdiffusion import generate_wan, max_utils

        max_utils.create_device_mesh = planned_create_device_mesh(spec, device_array)
    except LaunchError as exc:
        print(f"run_with_plan: error: {exc}", file=sys.stderr)
        return 2
    from absl import app

    with generate_wan.transformer_engine_context():
        app.run(generate_wan.main, argv=generate_argv)
    return 0


if __name__ == "__main__":
    sys.exit(main())
