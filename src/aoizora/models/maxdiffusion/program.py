"""MaxDiffusion's own Wan transformer step, lowered for a strategy through MaxDiffusion's classes.

`aoizora plan --program maxdiffusion` makes Stage 2 compile this program instead of aoizora's Wan
step: the step MaxDiffusion's Wan 2.1 pipeline runs each denoising step (its
`transformer_forward_pass_full_cfg`, the CFG pair in one batch), built abstractly (no weights: the
model from `nnx.eval_shape`, its parameters as shaped, sharded stand-ins), configured by
MaxDiffusion's own `pyconfig` from the config that ships the model and the overrides the export
writes for the strategy (`aoizora.models.maxdiffusion.overrides`), on the strategy's mesh with
MaxDiffusion's axis names. Nothing of MaxDiffusion is copied: its modules are imported from the
installed package or from the checkout `MAXDIFFUSION_DIR` names (its requirements installed in this
Python), and the facts this module relies on are recorded in `data/maxdiffusion.json` with their
commit. Where MaxDiffusion's source was read (at the commit the facts record):

* `src/maxdiffusion/pipelines/wan/wan_pipeline.py` — `create_sharded_logical_transformer` (the
  model's keyword arguments from the config, the weights' shardings from `logical_axis_rules`),
  `cast_with_exclusion` (which weights stay float32), `transformer_forward_pass_full_cfg`;
* `src/maxdiffusion/pipelines/wan/wan_pipeline_2_1.py` — `run_inference_2_1` (the step's
  arguments: float32 latents and prompt embeddings replicated, int32 timesteps, the rotary
  embedding computed once outside the step);
* `src/maxdiffusion/pipelines/wan/wan_pipeline_2_2.py` — `run_inference_2_2`: each step runs the
  high- or the low-noise expert through the same step function, both experts' weights held in HBM
  for the whole video (lowered here with the other expert's parameters as unused arguments, as
  aoizora's own Wan 2.2 step is, so the compiled program's HBM holds both);
* the model's dimensions are the diffusers config's (`WanConfig`), which MaxDiffusion reads from
  the checkpoint (`WanModel.load_config`).

One adjustment, on the generations `COMPILER_PLACED_ROPE` names: MaxDiffusion computes the rotary
table (complex64) once, outside the step, and passes it replicated, so each device slices its part
of the table inside the step. libtpu 0.0.42.1 aborts compiling a per-partition slice of a complex64
array for TPU7x (`windowing_util.cc:317 Check failed: desc->window_bounds.size() == rank`; the
reduction is `tests/models/maxdiffusion/test_rope_table_placement.py`), so there the table enters
with the sharding the compiler picks: each device receives the part it reads, and the step is
MaxDiffusion's less that slice (a copy of the device's part of the table, a few MB). The plan
records it (`MaxDiffusionSource.to_json`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import inspect
import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aoizora.errors import MaxDiffusionUnavailable
from aoizora.hlo.program import OpaqueCost, OpaqueOp
from aoizora.models.maxdiffusion import PROGRAMS
from aoizora.models.maxdiffusion.overrides import facts, maxdiffusion_config, strategy_overrides
from aoizora.models.wan.kernels.custom_tiles import KernelTile, custom_kernel_tile
from aoizora.models.wan.transformer.strategy import Strategy

if TYPE_CHECKING:
    from jax.sharding import Mesh

    from aoizora.models.wan.space.fields import WanSpaceFields

#: the environment variable naming a MaxDiffusion checkout (its `src` is imported)
CHECKOUT_VARIABLE = "MAXDIFFUSION_DIR"
#: the modules the step is built from (importing them checks MaxDiffusion's requirements too)
MODULES = ("maxdiffusion.pyconfig", "maxdiffusion.max_utils", "maxdiffusion.pipelines.wan.wan_pipeline",
           "maxdiffusion.models.wan.transformers.transformer_wan")
#: the guidance scale of the step (a static argument; Wan's default, as aoizora's step uses)
GUIDANCE_SCALE = 5.0
#: how to make MaxDiffusion importable (the refusal's advice)
INSTALL_HINT = (f"install MaxDiffusion ({facts()['repository']} at {facts()['commit'][:8]}: clone it, pip install "
                f"its requirements into this Python) and set {CHECKOUT_VARIABLE} to the checkout; see CONTRIBUTING.md")


@dataclasses.dataclass(frozen=True)
class MaxDiffusionSource:
    """Where MaxDiffusion was imported from, and its commit when the checkout says (None otherwise)."""

    root: Path  # the directory holding `src/maxdiffusion/configs`
    commit: str | None
    #: whether the step takes the rotary table from outside (earlier commits compute it inside the
    #: step, where the TPU7x adjustment has nothing to change)
    takes_rotary_table: bool = True

    def adjustments(self, generation: str | None) -> list[str]:
        """How this checkout's step compiled for `generation` differs from the one it runs
        (`adjustments`; none where the step computes its rotary table itself)."""
        return adjustments(generation) if self.takes_rotary_table else []

    def to_json(self, generation: str | None = None) -> dict[str, Any]:
        """The plan's record of the program: MaxDiffusion's repository, the commit compiled (as its
        checkout reports it), the commit its facts were read at and, for a generation where the
        step compiled differs from MaxDiffusion's, how (`adjustments`)."""
        changed = self.adjustments(generation)
        return {"name": "maxdiffusion", "repository": facts()["repository"], "commit": self.commit,
                "facts_commit": facts()["commit"], **({"adjustments": changed} if changed else {})}


#: generations whose compile aborts on the in-step slice of the replicated complex64 rotary table
#: (libtpu 0.0.42.1 on TPU7x): the table enters with the sharding the compiler picks instead
COMPILER_PLACED_ROPE = ("tpu7x",)
#: what the plan says of that adjustment
ROPE_ADJUSTMENT = ("rotary table enters sharded as the step reads it, not replicated: libtpu aborts "
                   "slicing a replicated complex64 array per partition on this generation")


def adjustments(generation: str | None) -> list[str]:
    """How the step compiled for `generation` differs from the one MaxDiffusion runs ([] when it does not)."""
    return [ROPE_ADJUSTMENT] if generation in COMPILER_PLACED_ROPE else []


#: the models whose step this module builds: MaxDiffusion's text-to-video transformers. Wan 2.2
#: A14B runs one expert per step through the same step function (`run_inference_2_2`), the other
#: expert resident; an image-to-video step takes image embeddings: not built here
MODELS = ("wan2.1-t2v-1.3b", "wan2.1-t2v-14b", "wan2.2-t2v-a14b")


def check_program(program: str, space: WanSpaceFields) -> None:
    """Raise ArgumentError unless `program` is one of `PROGRAMS` and, for MaxDiffusion's, the
    space plans a model whose MaxDiffusion step this module builds (`MODELS`)."""
    from aoizora.errors import ArgumentError

    if program not in PROGRAMS:
        raise ArgumentError(f"program must be one of {', '.join(map(repr, PROGRAMS))}, not {program!r}")
    if program == "maxdiffusion" and space.name not in MODELS:
        raise ArgumentError(f"program 'maxdiffusion' compiles MaxDiffusion's text-to-video step "
                            f"({', '.join(MODELS)}), not {space.name!r}'s; plan it with program 'aoizora'")


def maxdiffusion_source() -> MaxDiffusionSource:
    """MaxDiffusion as this Python imports it (the checkout `MAXDIFFUSION_DIR` names put on `sys.path`
    first); MaxDiffusionUnavailable, in one line that says how to install it, when it cannot."""
    checkout = os.environ.get(CHECKOUT_VARIABLE)
    if checkout:
        src = str(Path(checkout) / "src")
        if not (Path(src) / "maxdiffusion").is_dir():
            raise MaxDiffusionUnavailable(f"{CHECKOUT_VARIABLE}={checkout} is not a MaxDiffusion checkout "
                                          f"(no src/maxdiffusion); {INSTALL_HINT}")
        if src not in sys.path:
            sys.path.insert(0, src)
    try:
        for name in MODULES:
            importlib.import_module(name)
    except Exception as exc:  # a missing package or requirement: the same refusal
        raise MaxDiffusionUnavailable(f"--program maxdiffusion needs MaxDiffusion, which this Python cannot "
                                      f"import ({type(exc).__name__}: {exc}); {INSTALL_HINT}") from None
    package = Path(importlib.import_module("maxdiffusion").__file__ or "").parent
    return MaxDiffusionSource(package.parents[1], _commit(package), "rotary_emb" in _step_parameters())


def _step_parameters() -> set[str]:
    """The parameters of the imported MaxDiffusion's step function (its jitted form at any commit)."""
    step = importlib.import_module("maxdiffusion.pipelines.wan.wan_pipeline").transformer_forward_pass_full_cfg
    return set(inspect.signature(getattr(step, "jitted", step)).parameters)


def _commit(package: Path) -> str | None:
    """The git commit of the checkout holding `package` (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "-C", str(package), "rev-parse", "HEAD"], capture_output=True, text=True,
                             timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def step_overrides(space: WanSpaceFields, strategy: Strategy) -> tuple[str, list[tuple[str, str]]]:
    """The config that ships the space's model and the overrides that run `strategy` on it: the
    export's (mesh, attention, blocks, axis rules) and the video's shape."""
    config = maxdiffusion_config(space.name, field="model")
    tile: KernelTile | None = custom_kernel_tile(strategy, space.video.tokens(space.config), space.generation)
    overrides = strategy_overrides(config, strategy, tile, [])
    overrides += [("per_device_batch_size", repr(space.videos / strategy.num_devices)),
                  ("height", str(space.video.height)), ("width", str(space.video.width)),
                  ("num_frames", str(space.video.frames)), ("skip_jax_distributed_system", "true")]
    return config, overrides


def checkout_overrides(config: str, overrides: list[tuple[str, str]], keys: set[str],
                       commit: str | None) -> list[tuple[str, str]]:
    """`overrides` (written for the config at the facts' commit) for a checkout whose config has
    `keys`: a key the checkout's config lacks is dropped when the override sets the facts' default
    (the behaviour before the key existed, such as one Ulysses chunk), and refused otherwise, in one
    line that names the key, since that checkout cannot run the strategy as planned."""
    defaults = facts()["configs"][config]["values"]
    out = []
    for key, value in overrides:
        if key == "flash_block_sizes":
            value = _with_dq_blocks(value)
        if key in keys:
            out.append((key, value))
        elif key == "ulysses_shards" and "context_ulysses_parallelism" in keys:
            out += _earlier_2d_split(int(value), int(dict(overrides)["ici_context_parallelism"]))
        elif key not in defaults or str(defaults[key]) != value:
            at = commit[:8] if commit else "this checkout"
            raise MaxDiffusionUnavailable(f"MaxDiffusion at {at} has no {key!r} in {config}, which this strategy "
                                          f"sets to {value}: it cannot run the strategy as planned")
    return out


def _earlier_2d_split(ulysses: int, context: int) -> list[tuple[str, str]]:
    """The 2D context split in the keys of the commits before `ulysses_shards`: the Ulysses and the
    ring factor of the context axis each named (`context_ulysses_parallelism`,
    `context_ring_parallelism`, as `benchmark_dp2_cp4.sh` at 4e694ceb sets them)."""
    return [("context_ulysses_parallelism", str(ulysses)), ("context_ring_parallelism", str(context // ulysses))]


def _with_dq_blocks(blocks: str) -> str:
    """flash_block_sizes with the backward's dq blocks set as earlier commits need them: there JAX's
    splash Ulysses pads to the largest of its forward, dkv and (unfused) dq blocks and fails on a
    missing one; their own benchmark script (`benchmark_dp2_cp4.sh` at 4e694ceb) sets the dq blocks
    to block_q/block_kv with the unfused backward, which leaves the largest block unchanged."""
    found = json.loads(blocks)
    if not found or "block_q" not in found:
        return blocks  # the kernel's own pick, or a custom kernel's tile
    found.setdefault("block_q_dq", found["block_q"])
    found.setdefault("block_kv_dq", found["block_kv"])
    found.setdefault("use_fused_bwd_kernel", False)
    return json.dumps(found, separators=(",", ":"))


def _config_keys(path: Path) -> set[str]:
    """The keys of a MaxDiffusion config file (YAML; PyYAML comes with MaxDiffusion's requirements)."""
    yaml = importlib.import_module("yaml")  # MaxDiffusion's requirement, not aoizora's: no stubs here
    return set(yaml.safe_load(path.read_text()) or {})


def maxdiffusion_devices(strategy: Strategy, mesh: Mesh) -> Any:
    """`mesh`'s devices arranged on MaxDiffusion's mesh axes: 2D context's ring and Ulysses axes merged
    into `context` in the order MaxDiffusion splits it (outer first), each device where the plan put it."""
    import numpy as np

    names = list(mesh.axis_names)
    split = ["context_" + s for s in facts()["context_split"]["outer_first"]]
    axes = ("data", "fsdp", "context", "tensor")
    groups = [split if (a == "context" and strategy.two_d_context) else [a] for a in axes]
    arranged = np.transpose(mesh.devices, [names.index(n) for g in groups for n in g])
    return arranged.reshape([int(np.prod([mesh.shape[n] for n in g])) for g in groups])


class MaxDiffusionStep:
    """MaxDiffusion's Wan step for one strategy on one mesh; `lower()` lowers it (no compile).
    `settings` are overrides a run set beyond the strategy's (a published run's own attention name,
    say); each replaces the strategy's override of the same key."""

    def __init__(self, space: WanSpaceFields, strategy: Strategy, mesh: Mesh,
                 settings: tuple[tuple[str, str], ...] = ()) -> None:
        self.space, self.strategy, self.mesh, self.settings = space, strategy, mesh, settings
        #: after `lower()`: how the program lowered differs from MaxDiffusion's (`adjustments`; none
        #: at a commit whose step computes its rotary table itself)
        self.adjustments: list[str] = []

    def lower(self) -> Any:
        """Configure MaxDiffusion (`pyconfig.initialize`, process-wide: lowerings take turns under
        `LOWERING_LOCK`), build the model abstractly and lower the step on MaxDiffusion's mesh."""
        import warnings

        source = maxdiffusion_source()  # before the imports: it puts MAXDIFFUSION_DIR's src on the path
        from flax.linen import partitioning as nn_partitioning
        from jax.sharding import Mesh
        from maxdiffusion import pyconfig
        from maxdiffusion.pipelines.wan import wan_pipeline

        config_path, overrides = step_overrides(self.space, self.strategy)
        given = dict(self.settings)
        overrides = [(k, given.pop(k, v)) for k, v in overrides] + list(given.items())
        # the checkout's own config decides (at the facts' commit this changes nothing)
        overrides = checkout_overrides(config_path, overrides, _config_keys(source.root / config_path), source.commit)
        # MaxDiffusion prints every config key and axis rule: kept off this process's output
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            # `with mesh`, as MaxDiffusion's pipeline enters it (JAX says it is deprecated, on every call)
            warnings.simplefilter("ignore", DeprecationWarning)
            pyconfig.initialize(["aoizora", str(source.root / config_path), *(f"{k}={v}" for k, v in overrides)])
            config = pyconfig.config
            mesh = Mesh(maxdiffusion_devices(self.strategy, self.mesh), tuple(config.mesh_axes))
            with mesh, nn_partitioning.axis_rules(config.logical_axis_rules):
                graphdef, state, rest, rope = _abstract_model(self.space, config, mesh, self.space.config)
                latents, timestep, prompt = _abstract_inputs(self.space, mesh)
                step = wan_pipeline.transformer_forward_pass_full_cfg
                step = getattr(step, "jitted", step)  # later commits wrap the jitted step
                # earlier commits compute the rotary table inside the step
                table = {"rotary_emb": rope} if source.takes_rotary_table else {}
                self.adjustments = source.adjustments(self.space.generation)
                resident = [_abstract_model(self.space, config, mesh, wan)[1] for wan in _resident_experts(self.space)]
                if resident:
                    return _with_resident(step).lower(graphdef, state, rest, latents, timestep, prompt, resident,
                                                      guidance_scale=GUIDANCE_SCALE, **table)
                return step.lower(graphdef, state, rest, latents, timestep, prompt, guidance_scale=GUIDANCE_SCALE,
                                  **table)


def _resident_experts(space: WanSpaceFields) -> tuple[Any, ...]:
    """The WanConfigs of the experts whose weights stay in HBM beside the running one (none for Wan 2.1)."""
    return tuple(getattr(space, "resident_experts", ()))


def _with_resident(step: Any) -> Any:
    """`step` taking the resident experts' parameters as one more argument, kept though unused: the
    program MaxDiffusion's Wan 2.2 loop runs, with the HBM both experts hold (the inner step inlines)."""
    import jax

    def step_with_resident_experts(graphdef: Any, state: Any, rest: Any, latents: Any, timestep: Any, prompt: Any,
                                   resident: Any, **kwargs: Any) -> Any:
        return step(graphdef, state, rest, latents, timestep, prompt, **kwargs)

    return jax.jit(step_with_resident_experts, static_argnames=("guidance_scale",), keep_unused=True)


def _model_arguments(c: Any, config: Any, mesh: Mesh) -> dict[str, Any]:
    """WanModel's keyword arguments: the diffusers config's dimensions (`c`, a WanConfig), then what
    `create_sharded_logical_transformer` takes from the MaxDiffusion config."""
    from maxdiffusion.max_utils import get_flash_block_sizes, get_precision

    return {
        "patch_size": tuple(c.patch_size), "num_attention_heads": c.num_attention_heads,
        "attention_head_dim": c.attention_head_dim, "in_channels": c.in_channels, "out_channels": c.out_channels,
        "text_dim": c.text_dim, "freq_dim": c.freq_dim, "ffn_dim": c.ffn_dim, "num_layers": c.num_layers,
        "cross_attn_norm": c.cross_attn_norm, "qk_norm": "rms_norm_across_heads", "eps": c.eps,
        "image_dim": c.image_dim, "added_kv_proj_dim": c.added_kv_proj_dim, "rope_max_seq_len": c.rope_max_seq_len,
        "mesh": mesh, "dtype": config.activations_dtype, "weights_dtype": config.weights_dtype,
        "attention": config.attention, "precision": get_precision(config),
        "flash_block_sizes": get_flash_block_sizes(config), "remat_policy": config.remat_policy,
        "names_which_can_be_saved": config.names_which_can_be_saved,
        "names_which_can_be_offloaded": config.names_which_can_be_offloaded,
        "flash_min_seq_length": config.flash_min_seq_length, "dropout": config.dropout,
        "mask_padding_tokens": config.mask_padding_tokens, "scan_layers": config.scan_layers,
        "enable_jax_named_scopes": config.enable_jax_named_scopes,
        "attention_config": {"use_base2_exp": config.use_base2_exp,
                             "use_experimental_scheduler": config.use_experimental_scheduler,
                             "ulysses_shards": _value(config, "ulysses_shards", -1),
                             "ulysses_attention_chunks": _value(config, "ulysses_attention_chunks", 1)},
    }


#: keyword arguments of WanModel before it took `attention_config`, each at what MaxDiffusion ran
#: before the argument existed
_LATER_ARGUMENTS = {"ulysses_shards": -1, "ulysses_attention_chunks": 1}


def _fit_signature(kwargs: dict[str, Any], model: Any, config: Any) -> dict[str, Any]:
    """`kwargs` as the checkout's `WanModel` takes them: commits before `attention_config` took its
    entries as keyword arguments of their own, and the 2D context split from the config
    (`create_sharded_logical_transformer` at those commits); an argument that commit does not know
    is refused unless it holds the value that commit ran without it."""
    params = inspect.signature(model.__init__).parameters
    if "attention_config" in params:
        return kwargs
    out = {k: v for k, v in kwargs.items() if k != "attention_config"}
    for key, value in kwargs["attention_config"].items():
        if key in params:
            out[key] = value
        elif _LATER_ARGUMENTS.get(key, object()) != value:
            raise MaxDiffusionUnavailable(f"MaxDiffusion's WanModel here takes no {key!r}, which this strategy "
                                          f"sets to {value}: it cannot run the strategy as planned")
    for key in ("context_ulysses_parallelism", "context_ring_parallelism"):
        if key in params and _value(config, key, None) is not None:
            out[key] = _value(config, key, None)
    return out


def _value(config: Any, key: str, default: Any) -> Any:
    """`config.key`, or `default` for a key the checkout's config does not have (pyconfig raises
    ValueError for one)."""
    try:
        return getattr(config, key)
    except (AttributeError, ValueError, KeyError):
        return default


def _abstract_model(space: WanSpaceFields, config: Any, mesh: Mesh, wan: Any) -> tuple[Any, Any, Any, Any]:
    """(graphdef, parameters, the rest of the state, the rotary embedding) of the transformer of
    dimensions `wan` (a WanConfig), all abstract: each parameter a shaped stand-in in the dtype
    MaxDiffusion loads it in, sharded by its logical axes."""
    import jax
    from flax import linen as nn
    from flax import nnx
    from jax.sharding import NamedSharding, PartitionSpec
    from maxdiffusion.models.wan.transformers.transformer_wan import WanModel
    from maxdiffusion.pipelines.wan.wan_pipeline import cast_with_exclusion

    kwargs = _fit_signature(_model_arguments(wan, config, mesh), WanModel, config)
    model = nnx.eval_shape(lambda rngs: WanModel(**kwargs, rngs=rngs), rngs=nnx.Rngs(0))
    graphdef, state, rest = nnx.split(model, nnx.Param, ...)
    shardings = nn.logical_to_mesh_sharding(nnx.get_partition_spec(state), mesh, config.logical_axis_rules)

    def stand_in(path: Any, leaf: Any, sharding: Any) -> Any:
        # the dtype MaxDiffusion casts the loaded weight to (its cast, traced on the shape alone)
        cast = jax.eval_shape(lambda x: cast_with_exclusion(path, x, config.weights_dtype),
                              jax.ShapeDtypeStruct(leaf.shape, leaf.dtype))
        return jax.ShapeDtypeStruct(leaf.shape, cast.dtype, sharding=sharding)

    params = jax.tree_util.tree_map_with_path(stand_in, state, shardings)
    replicated = NamedSharding(mesh, PartitionSpec())
    channels, t, h, w = space.video.latent_shape(space.config)
    dummy = jax.ShapeDtypeStruct((space.batch, t, h, w, channels), "float32")
    table = None if space.generation in COMPILER_PLACED_ROPE else replicated  # None: the compiler's choice
    rope = jax.tree.map(lambda r: jax.ShapeDtypeStruct(r.shape, r.dtype, sharding=table),
                        jax.eval_shape(model.rope, dummy))
    return graphdef, params, rest, rope


def _abstract_inputs(space: WanSpaceFields, mesh: Mesh) -> tuple[Any, Any, Any]:
    """The step's latents (the CFG pair doubled), timesteps and prompt embeddings, replicated as
    `_prepare_model_inputs` puts them."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    replicated = NamedSharding(mesh, PartitionSpec())
    c = space.config
    latents = jax.ShapeDtypeStruct((space.batch, *space.video.latent_shape(c)), "float32", sharding=replicated)
    timestep = jax.ShapeDtypeStruct((space.batch,), "int32", sharding=replicated)
    prompt = jax.ShapeDtypeStruct((space.batch, c.text_len, c.text_dim), "float32", sharding=replicated)
    return latents, timestep, prompt


def kernel_cost(strategy: Strategy, op: OpaqueOp) -> OpaqueCost | None:
    """A splash call of MaxDiffusion's program (JAX's, tokamax's, or MaxDiffusion's own kernels, the
    last found by where they are called: `_attention_kernel`) costed from the compiled call itself:
    q and k are its first two floating operands of rank >= 3 ([batch x heads, length, head_dim]),
    the blocks the kernel's metadata records, the cost the kernel profile the space plans with gives
    (as aoizora's own program's calls are costed). None for another custom call (costed from its I/O)."""
    from aoizora.models.wan.space.costs import splash_opaque_cost
    from aoizora.models.wan.transformer.attention import splash_cost, splash_grid_steps, splash_kv_stream_bytes

    name = op.kernel_name or op.name
    if "splash" not in name and "flash" not in name and not _attention_kernel(op):
        return None
    floats = [s.dims for s in op.operand_shapes if s.dtype in ("bf16", "f16", "f32") and len(s.dims) >= 3]
    if len(floats) < 2:
        return None
    q, k = floats[0], floats[1]
    heads = 1
    for d in q[:-2]:
        heads *= int(d)
    lq, lk, d = int(q[-2]), int(k[-2]), int(q[-1])
    blocks = _metadata_blocks(op.frontend_attributes)
    residuals = "no_residuals" not in name
    flops, hbm = splash_cost(heads, lq, lk, d, 2, residuals, blocks.get("block_q"))
    steps = splash_grid_steps(heads, lq, lk, blocks.get("block_q"), blocks.get("block_kv"))
    kv, kv_compute = blocks.get("block_kv"), blocks.get("block_kv_compute")
    per_step = max(1, kv // kv_compute) if kv and kv_compute else 1
    kv_bytes = splash_kv_stream_bytes(heads, lq, lk, d, 2, blocks.get("block_q"))
    return splash_opaque_cost(flops, hbm, d, steps, strategy.kernel_profile, per_step, kv_bytes)


def _attention_kernel(op: OpaqueOp) -> bool:
    """Whether `op` is a Pallas kernel MaxDiffusion's attention calls under a name of its own (its
    custom splash kernels are `vmap()`'d `pallas_call`s): a Mosaic call traced inside an attention."""
    return op.target == "tpu_custom_call" and "attention" in (op.op_name or "").lower()


def _metadata_blocks(attributes: str | None) -> dict[str, int]:
    """The block sizes a Pallas call's `xprof_metadata` records ({} when it records none)."""
    if not attributes or "xprof_metadata" not in attributes:
        return {}
    text = attributes.split("xprof_metadata", 1)[1]
    start, end = text.find("{"), text.find("}")
    try:
        found = json.loads(text[start:end + 1].replace('\\"', '"'))
    except ValueError:
        return {}
    return {k: int(v) for k, v in found.items()
            if k in ("block_q", "block_kv", "block_kv_compute") and isinstance(v, int)}
