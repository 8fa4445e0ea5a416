"""Run MaxDiffusion's Wan generation with an aoizora plan's device order.

Written by `aoizora export --to maxdiffusion` beside `maxdiffusion_plan.json` and `plan_devices.py`.
Run it from a MaxDiffusion checkout on the planned TPU slice:

    python DIR/run_with_plan.py [key=value ...]      # extra generate_wan.py overrides, e.g. prompt=...
    python DIR/run_with_plan.py --check              # only check the devices and print the mesh

MaxDiffusion builds its mesh from `max_utils.create_device_mesh(config)` over `jax.devices()`,
which knows nothing of the plan's placement. This launcher sets `LIBTPU_INIT_ARGS` to the plan's
flags unless already set, initialises `jax.distributed` as MaxDiffusion does before any device
query (so that on a slice spanning hosts, run on every host, `jax.devices()` is the whole slice),
checks that `jax.devices()` is the planned slice (kind, count, ICI coordinates and core on chip),
replaces `create_device_mesh` with a function of the same signature that returns the plan's
devices in MaxDiffusion's `mesh_axes` order (MaxDiffusion looks it up on `max_utils` at each
call), and runs `generate_wan.main` with the plan's overrides. An `aot_cache_dir=DIR` override
becomes `DIR/aoizora-KEY`, KEY a digest of the plan's overrides, flags and device order:
MaxDiffusion's AOT cache keys its executables on the mesh shape alone, so a folder shared with
runs of another placement could hand this one an executable compiled for other devices. It
imports nothing of aoizora. It trusts only a spec that is whole (every field it reads, the sha256
of its content that the export wrote, each device once), and refuses extra overrides of the keys
the plan sets or that contradict it (`agreeing_values`).
"""

from __future__ import annotations

import hashlib
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
        spec = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise LaunchError(f"cannot read {path.name}: {exc}; export the plan again") from None
    check_spec(spec, path.name)
    return spec


def spec_checksum(spec: dict[str, Any]) -> str:
    """sha256 of the spec without its `checksum`, as canonical JSON (sorted keys, no spaces, ASCII)."""
    rest = {k: v for k, v in spec.items() if k != "checksum"}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


#: the spec's fields the launcher reads, with the JSON types they must have
_SPEC_FIELDS = {"argv": list, "plan_keys": list, "libtpu_init_args": str, "mesh_axes": list, "ici_parallelism": dict,
                "slice": dict, "device_coords": list, "agreeing_values": dict, "checksum": str}


def check_spec(spec: Any, name: str = SPEC.name) -> None:
    """Raise LaunchError unless `spec` is a whole export: every field the launcher reads, of its type,
    the content matching its checksum, and no device coordinates twice."""
    if not isinstance(spec, dict):
        raise LaunchError(f"{name} is not a JSON object ({type(spec).__name__}); export the plan again")
    for field, kind in _SPEC_FIELDS.items():
        if not isinstance(spec.get(field), kind):
            what = "lacks" if field not in spec else f"has a {type(spec[field]).__name__} for"
            raise LaunchError(f"{name} {what} {field}; export the plan again")
    try:
        checksum = spec_checksum(spec)
    except ValueError as exc:
        raise LaunchError(f"{name} cannot be checked ({exc}); export the plan again") from None
    if checksum != spec["checksum"]:
        raise LaunchError(f"{name} does not match its checksum: it was changed after the export; export the plan "
                          "again")
    seen: set[str] = set()
    for coords in _leaves(spec["device_coords"]):
        text = json.dumps(coords, sort_keys=True)
        if text in seen:
            raise LaunchError(f"{name} places two mesh positions on the device at {text[:100]}; export the plan "
                              "again")
        seen.add(text)


def _leaves(coords: Any) -> list[list[Any]]:
    """The innermost lists of a nested list (one device's coordinates each)."""
    if isinstance(coords, list) and coords and all(not isinstance(c, list) for c in coords):
        return [coords]
    return [leaf for c in (coords if isinstance(coords, list) else []) for leaf in _leaves(c)]


def plan_device_array(devices: Sequence[Any], spec: dict[str, Any]) -> Any:
    """The devices at the plan's coordinates, shaped as MaxDiffusion's mesh (`spec["mesh_axes"]`)."""
    s = spec["slice"]
    try:
        return arrange_devices(devices, slice_name=s["name"], device_kinds=s["device_kinds"], shape=s["shape"],
                               cores_per_chip=s["cores_per_chip"], device_coords=spec["device_coords"])
    except DeviceMismatch as exc:
        raise LaunchError(str(exc)) from None
    except (KeyError, TypeError, ValueError) as exc:  # a spec whose checksum was forged with it
        raise LaunchError(f"the spec's slice or device coordinates are malformed ({exc!r:.200}); export the plan "
                          "again") from None


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


def plan_cache_key(spec: dict[str, Any], flags: str | None = None) -> str:
    """A digest of what an executable compiled for this plan depends on: the overrides, the
    compiler flags in effect (`flags`, else the plan's), the mesh axes and the device order."""
    what = {"argv": spec["argv"], "flags": sorted((spec["libtpu_init_args"] if flags is None else flags).split()),
            "mesh_axes": spec["mesh_axes"], "device_coords": spec["device_coords"], "slice": spec["slice"]}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()[:16]


def generate_wan_argv(spec: dict[str, Any], extra: Sequence[str], flags: str | None = None) -> list[str]:
    """generate_wan.py's argv: the plan's config and overrides, then the user's extra overrides
    (which may not change a key the plan sets); a non-empty `aot_cache_dir` is keyed by the plan
    (`plan_cache_key` with the flags in effect)."""
    planned = set(spec["plan_keys"])
    agreeing = spec["agreeing_values"]
    out = []
    for item in extra:
        key, _, value = item.partition("=")
        if "=" not in item:
            raise LaunchError(f"{item[:200]!r} is not a key=value override of generate_wan.py")
        if key in planned:
            raise LaunchError(f"{key} is set by the plan; re-plan instead of overriding it")
        if key in agreeing and _as_int(value) not in agreeing[key]:
            raise LaunchError(f"{key}={value[:200]} contradicts the plan, which runs with {key}="
                              f"{' or '.join(map(str, agreeing[key]))}; re-plan instead of overriding it")
        if key == "aot_cache_dir" and value:
            item = f"aot_cache_dir={value.rstrip('/')}/aoizora-{plan_cache_key(spec, flags)}"
            print(f"aoizora plan: note: {item} (MaxDiffusion's AOT cache keys on the mesh shape only; this "
                  "folder holds executables of this plan's placement and flags alone)", file=sys.stderr)
        out.append(item)
    return ["generate_wan.py", *spec["argv"], *out]


def initialize_distributed(extra: Sequence[str]) -> str | None:
    """Initialise `jax.distributed` as MaxDiffusion's `max_utils.maybe_initialize_jax_distributed_system`
    does (pyconfig calls it before any device query): not when `skip_jax_distributed_system=true` is
    among the overrides or JAX's backends are already up, else `jax.distributed.initialize()` with no
    arguments (JAX finds the TPU slice's hosts and this host's place among them). MaxDiffusion logs
    a failure and goes on; so does this, returning it as a note (None when initialised or skipped)."""
    if any(a.lower() == "skip_jax_distributed_system=true" for a in extra):
        return None
    import jax

    try:
        from jax._src import xla_bridge  # the check MaxDiffusion makes

        initialized = bool(xla_bridge.backends_are_initialized())
    except (ImportError, AttributeError):  # a JAX without it: as on a fresh process
        initialized = False
    if initialized:
        return None
    try:
        jax.distributed.initialize()
    except Exception as exc:  # noqa: BLE001 - as MaxDiffusion: any failure leaves a single-process run
        return f"jax.distributed.initialize() did not run ({exc}); this process sees its own host's devices only"
    return None


def _as_int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None


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
        _libtpu_env(spec)
        generate_argv = generate_wan_argv(spec, args, os.environ.get("LIBTPU_INIT_ARGS"))
        note = initialize_distributed(args)  # before the first device query, as MaxDiffusion would
        import jax

        try:
            device_array = plan_device_array(jax.devices(), spec)
        except LaunchError as exc:
            raise LaunchError(f"{exc} ({note})" if note else str(exc)) from None
        if check_only:
            print(f"{spec['slice']['name']}: mesh {dict(zip(spec['mesh_axes'], device_array.shape, strict=True))}, "
                  f"devices in the plan's order: {[d.id for d in device_array.flat]} "
                  f"(process {jax.process_index()} of {jax.process_count()})")
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
