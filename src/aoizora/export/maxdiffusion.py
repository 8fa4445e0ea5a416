"""A plan as a MaxDiffusion Wan run, and a MaxDiffusion Wan command as an aoizora strategy.

MaxDiffusion (github.com/AI-Hypercomputer/maxdiffusion) runs Wan with
``python src/maxdiffusion/generate_wan.py CONFIG key=value ...`` under ``LIBTPU_INIT_ARGS``. What a
plan decides maps onto that command as follows; every MaxDiffusion name used here is checked
against the facts `tools/maxdiffusion_facts.py` records from its source (`data/maxdiffusion.json`,
with the commit they were read at):

* the mesh: ``ici_data/fsdp/context/tensor_parallelism`` in ``mesh_axes`` order. 2D context
  (``ulysses_ring``) is one public ``context`` axis that MaxDiffusion splits itself into ring ×
  Ulysses, ring outer (``_create_internal_ulysses_ring_mesh``), as aoizora's ``context_ring`` ×
  ``context_ulysses``: merging the two keeps every device where the plan put it;
* the attention variant: ``allgather`` → ``flash``, ``ulysses`` → ``ulysses``, ``ring`` →
  ``tokamax_ring``, ``ulysses_ring`` → ``ulysses_ring`` with ``ulysses_shards`` = U; Ulysses chunks
  → ``ulysses_attention_chunks``;
* the splash blocks: ``flash_block_sizes`` (MaxDiffusion's tokamax kernels read their forward
  block_q from ``block_q_dkv``, so it carries block_q too);
* the weight sharding: MaxDiffusion's ``logical_axis_rules`` shard a weight's ``embed`` over
  context and fsdp and ``heads``/``mlp`` over tensor; a plan that shards them otherwise gets its
  own rules for those three names (a list override ``pyconfig`` parses);
* the batch: ``per_device_batch_size`` = videos / devices (the CFG pair is one video);
* the compiler flags: ``LIBTPU_INIT_ARGS``;
* the device order: no key holds it (``max_utils.create_device_mesh`` builds the mesh from
  ``jax.devices()``), so the export writes a launcher, `run_with_plan.py`, that replaces that
  function with one returning the plan's devices.

What MaxDiffusion cannot express is refused (`ExportError`, naming the field); where it differs
only by a setting it lacks, the export says what the user loses (`MaxDiffusionRun.differences`).
"""

from __future__ import annotations

import math
import re
import shlex
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from aoizora.errors import ExportError
from aoizora.export.run_with_plan import spec_checksum
from aoizora.models.maxdiffusion.overrides import (  # noqa: F401  (the export's names, kept here for its users)
    ATTENTION_NAMES,
    MESH_KEYS,
    MODEL_CONFIGS,
    VARIANTS,
    WEIGHT_NAMES,
    facts,
    maxdiffusion_config,
    strategy_overrides,
)
from aoizora.models.wan.kernels.custom_tiles import KernelTile, custom_kernel_tile
from aoizora.models.wan.transformer.strategy import Strategy

LAUNCHER = "run_with_plan.py"
DEVICES_MODULE = "plan_devices.py"
SPEC_FILE = "maxdiffusion_plan.json"


def maxdiffusion_source() -> str:
    f = facts()
    return f"{f['repository']} @ {f['commit']}"


@dataclass(frozen=True)
class MaxDiffusionRun:
    """A plan as MaxDiffusion runs it: config, overrides, flags and the plan's device order."""

    config: str
    overrides: tuple[tuple[str, str], ...]
    libtpu_args: str
    mesh_axes: tuple[str, ...]
    device_coords: list[Any]  # per MaxDiffusion mesh position, in `mesh_axes` order
    slice: dict[str, Any]
    differences: tuple[str, ...] = ()
    plan_summary: dict[str, Any] = field(default_factory=dict)

    def argv(self) -> list[str]:
        """generate_wan.py's arguments: the config, then key=value overrides."""
        return [self.config, *(f"{k}={v}" for k, v in self.overrides)]

    def generate_wan_line(self) -> str:
        """The command a MaxDiffusion user types (without the plan's device order)."""
        env = f"LIBTPU_INIT_ARGS={shlex.quote(self.libtpu_args)} " if self.libtpu_args else ""
        return env + "python src/maxdiffusion/generate_wan.py " + " ".join(shlex.quote(a) for a in self.argv())

    def launcher_line(self, directory: str) -> str:
        """The command that runs it with the plan's device order from MaxDiffusion's checkout;
        `directory` (where the export was written) is written as given, already shell-quoted."""
        env = f"LIBTPU_INIT_ARGS={shlex.quote(self.libtpu_args)} " if self.libtpu_args else ""
        return env + f"python {directory}/{LAUNCHER}"

    def to_json(self) -> dict[str, Any]:
        """The launcher's spec (`maxdiffusion_plan.json`), with the checksum the launcher checks."""
        f = facts()
        spec = {
            "maxdiffusion": {"repository": f["repository"], "commit": f["commit"], "config": self.config,
                             "entry": f["generate_wan_main"]["source"]},
            "argv": self.argv(),
            "plan_keys": [k for k, _ in self.overrides],
            "libtpu_init_args": self.libtpu_args,
            "mesh_axes": list(self.mesh_axes),
            "ici_parallelism": {k: int(v) for k, v in self.overrides if k in MESH_KEYS},
            "slice": self.slice,
            "device_coords": self.device_coords,
            "differences": list(self.differences),
            "plan": self.plan_summary,
            "agreeing_values": self.agreeing_values(),
        }
        return {**spec, "checksum": spec_checksum(spec)}

    def agreeing_values(self) -> dict[str, list[int]]:
        """The mesh- and attention-shaping keys the plan leaves at the config's values, with the values
        an extra override may give them (the config's; 1 also for a DCN axis: one slice); the
        launcher refuses any other."""
        values = facts()["configs"][self.config]["values"]
        planned = {k for k, _ in self.overrides}
        keys = [k for k in values if (k.startswith("dcn_") and k.endswith("_parallelism")) or k == "ulysses_shards"]
        return {k: sorted({int(values[k])} | ({1} if k.startswith("dcn_") else set())) for k in keys
                if k not in planned}


def export_plan(plan: Any) -> MaxDiffusionRun:
    """The MaxDiffusion run of a Wan plan (`aoizora.plan.Plan`); ExportError for what it cannot express."""
    data = plan.data
    model = data.get("workload", {}).get("name", "")
    config = maxdiffusion_config(model)
    strategy = Strategy.from_description(plan.strategy, kernel=plan.strategy.get("kernel", "auto"))
    mesh_axes = tuple(facts()["configs"][config]["values"]["mesh_axes"])
    differences: list[str] = []
    overrides = strategy_overrides(config, strategy, _kernel_tile(plan, strategy), differences)
    overrides += _shape_overrides(data, strategy)
    if strategy.weight_tile is not None:
        differences.append(
            f"strategy.weight_tile: the plan hands the replicated 16-bit layer weights to the program in "
            f"{strategy.weight_tile[0]}x{strategy.weight_tile[1]} tiles; MaxDiffusion has no setting for an "
            "argument's layout, so libtpu copies each such weight into that tile (more HBM per device)")
    if strategy.ring_layout != "sequence_major" and strategy.context > 1:
        differences.append(
            f"strategy.ring_layout: the plan's ring rotates K/V in the {strategy.ring_layout} layout; MaxDiffusion "
            "has no setting for it: its ring kernels rotate them in their own kernel's layout")
    topo = data["topology"]
    return shell_safe(MaxDiffusionRun(
        config=config, overrides=tuple(overrides), libtpu_args=str(plan.compiler_flags), mesh_axes=mesh_axes,
        device_coords=_maxdiffusion_order(plan, strategy, mesh_axes).tolist(),
        slice={"name": topo["name"], "device_kinds": list(topo["device_kinds"]), "shape": list(topo["shape"]),
               "cores_per_chip": int(topo["cores_per_chip"])},
        differences=tuple(differences),
        plan_summary={"strategy": data["strategy"].get("key", ""), "placement": data["placement"].get("name", ""),
                      "predicted_step_seconds": plan.predicted_step_seconds, "model": model},
    ))


def _kernel_tile(plan: Any, strategy: Strategy) -> KernelTile | None:
    """The tile a custom-kernel plan runs its kernel with: the plan's (`kernel_tile`), else chosen
    now by the same rule (`custom_tiles`) for a plan written before plans carried it."""
    recorded = plan.strategy.get("kernel_tile")
    if recorded:
        return KernelTile.from_json(recorded)
    data = plan.data
    return custom_kernel_tile(strategy, int(data["workload"]["shapes"]["tokens"]), data["topology"].get("generation"))


def _shape_overrides(data: dict[str, Any], strategy: Strategy) -> list[tuple[str, str]]:
    shapes = data["workload"]["shapes"]
    videos = int(shapes.get("cfg_batch", 2)) // 2
    if videos < 1:
        raise ExportError("workload.shapes.cfg_batch: MaxDiffusion's Wan runs classifier-free guidance, a CFG "
                          "batch of 2 per video; plan with the CFG batch")
    out = [("per_device_batch_size", repr(videos / strategy.num_devices)),
           ("height", str(shapes["height"])), ("width", str(shapes["width"])),
           ("num_frames", str(shapes["frames"]))]
    steps = data["workload"].get("scheduler", {}).get("steps")
    if steps is not None:
        out.append(("num_inference_steps", str(int(steps))))
    return out


def _maxdiffusion_order(plan: Any, strategy: Strategy, mesh_axes: tuple[str, ...]) -> np.ndarray:
    """The plan's device coordinates per MaxDiffusion mesh position: aoizora's axes transposed into
    `mesh_axes` order, 2D context's ring and Ulysses merged into context in the order MaxDiffusion
    splits it (outer first, from the facts)."""
    coords = plan.device_coords
    names = list(plan.axis_names)
    split = ["context_" + s for s in facts()["context_split"]["outer_first"]]
    groups = [split if (a == "context" and strategy.two_d_context) else [a] for a in mesh_axes]
    order = [names.index(n) for g in groups for n in g]
    arranged = np.transpose(coords, order + [coords.ndim - 1])
    shape = [math.prod(plan.axis_sizes[names.index(n)] for n in g) for g in groups]
    return arranged.reshape(shape + [coords.shape[-1]])


#: What the export writes into command.sh may only be (each value is also shell-quoted there): an
#: override's key a config name, its value a number, a name, a path or a JSON/Python literal of those;
#: a libtpu flag `--name=value` with a value of letters, digits and `_.,:/+@%=-`; a comment line printable.
_SHELL_KEY = re.compile(r"[a-z_][a-z0-9_]*")
_SHELL_VALUE = re.compile(r"[A-Za-z0-9_.,:/\[\]{}\"' +-]*")
_SHELL_FLAG = re.compile(r"--[A-Za-z][A-Za-z0-9_]*=[A-Za-z0-9_.,:/+@%=-]*")
_PRINTABLE = re.compile(r"[^\x00-\x1f\x7f\u0080-\u009f\u2028\u2029]*")


def shell_safe(run: MaxDiffusionRun) -> MaxDiffusionRun:
    """`run`, after checking every value the export writes into command.sh against what it may be
    (a plan is data and must never become a shell command); ExportError names the first that is not."""
    if run.config not in MODEL_CONFIGS.values():
        raise ExportError(f"config {_clip(run.config)} is not one of MaxDiffusion's Wan configs")
    for key, value in run.overrides:
        if not _SHELL_KEY.fullmatch(key) or not _SHELL_VALUE.fullmatch(value):
            raise ExportError(f"{_clip(key)}={_clip(value)}: not a MaxDiffusion override the export writes "
                              "(a name, a number or a literal of those); re-run `aoizora plan`")
    for flag in run.libtpu_args.split():
        if not _SHELL_FLAG.fullmatch(flag):
            raise ExportError(f"compiler.libtpu_args: {_clip(flag)} is not a --name=value flag of letters, digits "
                              "and _.,:/+@%=-; re-run `aoizora plan`")
    for text in (run.slice.get("name", ""), run.plan_summary.get("strategy", ""), *run.differences):
        if not _PRINTABLE.fullmatch(str(text)):
            raise ExportError(f"{_clip(text)} holds a control character; re-run `aoizora plan`")
    return run


def _clip(value: Any, limit: int = 200) -> str:
    """`value` as Python writes it (a string quoted), cut to about `limit` characters (an ellipsis says so)."""
    return _cut(repr(value), limit)


def _cut(text: str, limit: int = 200) -> str:
    """`text` as an error message echoes it: control characters escaped, cut to about `limit`
    characters (an ellipsis says so)."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text[:limit + 1])
    return shown if len(text) <= limit else shown[:limit] + "…"
