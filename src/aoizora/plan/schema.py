"""The plan file format: versioned JSON, checked against a JSON Schema on every load."""

from __future__ import annotations

import functools
from typing import Any

import jsonschema

from aoizora.errors import PlanFormatError

SCHEMA_VERSION = 1

SERVING = "x-serving"  # what a serving program reads the field for (absent: not needed to run the plan)
UNIT = "x-unit"  # the unit of a number, or of a list's numbers
DOC_TYPE = "x-type"  # the type a documented but unchecked field has in the plans aoizora writes


def _doc(schema: dict[str, Any], text: str, unit: str | None = None, serving: str | None = None) -> dict[str, Any]:
    """`schema` with its documentation: a description, the unit, and what serving needs it for.

    docs/plan-format.md is rendered from these (`aoizora.plan.format_doc`), so the document and the
    check cannot drift apart. JSON Schema ignores the `x-` keywords.
    """
    out = dict(schema, description=text)
    if unit:
        out[UNIT] = unit
    if serving:
        out[SERVING] = serving
    return out


def _about(kind: str, text: str, unit: str | None = None, serving: str | None = None) -> dict[str, Any]:
    """A field the schema documents but does not check (`kind` is shown, not enforced): fields a
    workload defines for itself, whose shape another workload may choose differently."""
    return _doc({DOC_TYPE: kind}, text, unit, serving)


def _seconds(text: str) -> dict[str, Any]:
    return _doc({"type": "number", "minimum": 0}, text, "s")


_COORDS = _doc(
    {"type": "array"},  # nested in the mesh shape; leaves are int lists (checked in Plan)
    "the physical coordinates of the device at each mesh position: nested lists in the mesh's axis "
    "order and sizes, each leaf [x, y(, z)] on the slice, plus the core on two-core chips",
    "chip coordinates", "`Plan.mesh()` puts each mesh position on this device")

_PREDICTION = _doc({
    "type": "object",
    "required": ["step_seconds", "compute_seconds", "exposed_comm_seconds"],
    "properties": {
        "basis": _doc({"type": "string", "enum": ["q2", "q1"]},
                      "what predicted the step: `q2` (the compiled program on the chosen placement; what an "
                      "absent basis means) or `q1` (Stage 1's placement-independent lower bound "
                      "of the strategy: the time budget ran out before any compile finished, so nothing was "
                      "compiled nor checked by Q2; `collectives` is then empty and `link_bytes` the loads of Stage "
                      "1's predicted collectives)"),
        "step_seconds": _seconds("predicted time of one denoising step (Q2; Q1's bound when `basis` is `q1`)"),
        "compute_seconds": _seconds("compute part of the step, from libtpu's cycle estimates"),
        "exposed_comm_seconds": _seconds("communication not hidden behind compute"),
        "comm_seconds": _about("number", "all communication, hidden or not", "s"),
        "memory_bytes_per_device": _about("integer",
                                        "libtpu's `memory_analysis()` total of the compiled program", "bytes"),
        "collectives": _doc({"type": "array"}, "the program's collectives with their predicted times"),
        "link_bytes": _about("list of number",
                           "bytes each directed link of the slice carries in one step, in the topology's link order",
                           "bytes"),
        "timeline": _about("array", "the step's events as Q2 schedules them (for the report)"),
    },
}, "the predicted step of the chosen pair")

_BLOCKS = _doc({
    DOC_TYPE: "object",
    "properties": {
        "block_q": _about("integer", "query rows per splash-attention block", "tokens"),
        "block_kv": _about("integer", "key/value rows per block", "tokens"),
        "block_kv_compute": _about("integer", "key/value rows per inner compute step",
                                 "tokens"),
    },
}, "the splash-attention kernel's block sizes", serving="the attention kernel's blocks (MaxDiffusion's "
   "`flash_block_sizes` in the export)")

_SECONDS_OR_NONE = {"type": ["number", "null"], "minimum": 0}


def _part(text: str, **more: dict[str, Any]) -> dict[str, Any]:
    """A part of the video time: its seconds (null when unknown), how they were obtained, and `more` fields."""
    return _doc({"type": "object", "required": ["seconds", "basis"], "properties": {
        "seconds": _doc(_SECONDS_OR_NONE, "the part's time (null: unknown, the basis says why)", "s"),
        "basis": _doc({"type": "string"}, "how the time was obtained (compiled and costed, estimated, or why not)"),
        **more,
    }}, text)


_VIDEO_TIME = _doc({
    "type": "object",
    "required": ["videos", "total_seconds", "maxdiffusion_generation_seconds", "text_encode", "denoise",
                 "expert_swap", "vae_decode"],
    "properties": {
        "videos": _doc({"type": "integer", "minimum": 1}, "videos one generation makes (the CFG pair is one video)"),
        "total_seconds": _doc(_SECONDS_OR_NONE, "one generation end to end: text encoding + denoising + expert "
                              "swap + VAE decode (null when a part is unknown)", "s"),
        "seconds_per_video": _about("number", "`total_seconds` per video", "s"),
        "maxdiffusion_generation_seconds": _doc(
            _SECONDS_OR_NONE, "the same generation as MaxDiffusion's printed `generation_time` times it: without "
            "the text encoding, which its timed run reads from the cache its warmup filled "
            "(data/maxdiffusion_pipeline.json)", "s"),
        "text_encode": _doc({"type": "object", "required": ["seconds", "basis", "device"], "properties": {
            "seconds": _seconds("the prompts' encoding (UMT5-XXL)"),
            "basis": _doc({"type": "string"}, "how it is estimated, with its source"),
            "device": _doc({"type": "string"}, "where MaxDiffusion runs it (the host CPU, not the slice)"),
            "framework": _about("string", "what runs it there (PyTorch)"),
            "prompts": _about("integer", "prompts per call"),
            "calls": _about("integer", "encoder calls per generation (prompts, negative prompts)"),
            "in_generation_time": _about("boolean", "whether MaxDiffusion's `generation_time` includes it"),
        }}, "the text encoding: where it runs and its estimated time"),
        "denoise": _doc({"type": "object", "required": ["steps", "step_seconds", "seconds"], "properties": {
            "steps": _doc({"type": "integer", "minimum": 1}, "the sampler's steps"),
            "step_seconds": _seconds("the chosen pair's step (`prediction.step_seconds`; both CFG halves)"),
            "seconds": _seconds("steps × step"),
        }}, "the denoising steps"),
        "expert_swap": _part("copying a two-expert model's experts in from host memory (0 when both stay in "
                             "HBM or there is one transformer)"),
        "vae_decode": _part("the VAE decode, compiled for the slice (MaxDiffusion's VAE mesh) and costed by Q2",
                            cost=_about("object", "the decode program's Q2 parts, simulator time, HBM, mesh and "
                                        "compile time (absent when it was not compiled)")),
    },
}, "one generation's predicted time end to end, part by part (a Wan plan)")

_INT_LIST = {"type": "array", "items": {"type": "integer", "minimum": 0}}
_SPLIT_ROW = {"type": "object", "required": ["split", "count", "shape"], "properties": {
    "split": {"type": "string"}, "count": {"type": "integer", "minimum": 1}, "shape": _INT_LIST,
    "videos_per_replica": {"type": "integer", "minimum": 1}, "videos_per_hour": {"type": "number", "minimum": 0},
    "video_seconds": {"type": "number", "minimum": 0}, "strategy": {"type": "string"},
    "not_planned": {"type": "string"}}}

_REPLICAS = _doc({
    "type": "object",
    "required": ["objective", "slice", "count", "devices", "videos_per_replica", "videos_per_hour", "contention",
                 "splits"],
    "properties": {
        "objective": _doc({"const": "throughput"}, "what the plan maximises: videos per hour over the full slice"),
        "slice": _doc({"type": "string"}, "the full slice the replicas split, e.g. `v5e:2x4` (the plan's own "
                      "`topology` is one replica's sub-slice)", serving="the slice to run the replicas on"),
        "count": _doc({"type": "integer", "minimum": 1}, "replicas, each the plan on its own sub-slice", "replicas",
                      serving="how many copies of the plan to run"),
        "devices": _doc({"type": "array", "items": {
            "type": "object", "required": ["offset", "chips", "chip_ids"],
            "properties": {"offset": _INT_LIST, "chips": {"type": "array", "items": _INT_LIST},
                           "chip_ids": _INT_LIST}}},
            "per replica: its block's first chip (`offset`), its chips' coordinates in the full slice in raster "
            "order, and their raster ids (x fastest; libtpu's chip numbering, what `TPU_VISIBLE_CHIPS` lists)",
            "chip coordinates", "`Plan.mesh(devices, replica=i)` and the export's per-replica commands"),
        "videos_per_replica": _doc({"type": "integer", "minimum": 1}, "videos each replica generates per run (its "
                                   "CFG batch / 2)", "videos", serving="the batch each replica runs"),
        "video_seconds": _seconds("one run of a replica, as `aoizora compare` reads a plan's video time"),
        "video_time_includes": _doc({"type": "string"}, "what `video_seconds` includes (end to end, or the "
                                    "denoising steps alone)"),
        "videos_per_hour": _doc({"type": "number", "minimum": 0}, "replicas x videos per run x 3600 / video "
                                "seconds", "videos/h"),
        "max_videos_per_replica": _doc({"type": "integer", "minimum": 1}, "the largest batch per replica tried",
                                       "videos"),
        "contention": _doc({"type": "object", "required": ["checked", "shared_links"]},
                           "the replicas' link sets in the full slice (every route between two devices of a "
                           "replica), checked disjoint: no contention between replicas"),
        "splits": _doc({"type": "array", "items": _SPLIT_ROW}, "every split and batch per replica tried: its "
                       "videos per hour and video time, or why it was not planned"),
    },
}, "with `--objective throughput`: the full slice split into equal replicas, each running this plan on its own "
   "sub-slice and its own videos (absent: one plan on the whole slice)")

PLAN_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "aoizora plan",
    "type": "object",
    "required": [
        "schema_version", "workload", "topology", "toolchain", "mesh", "strategy", "placement",
        "prediction", "alternatives", "timings",
    ],
    "properties": {
        "schema_version": _doc({"const": SCHEMA_VERSION}, "the plan format's version; a reader refuses others",
                               serving="checked on load"),
        "aoizora_version": _doc({"type": "string"}, "the aoizora package version that wrote the plan"),
        "created": _doc({"type": "string"}, "when the plan was written", "ISO 8601 time"),
        "workload": _doc({
            "type": "object",
            "required": ["name", "shapes"],
            "properties": {
                "name": _doc({"type": "string"}, "the model, e.g. `wan2.1-t2v-14b`",
                             serving="`aoizora run` builds this model"),
                "shapes": _doc({"type": "object"}, "the video shape planned for (frames, height, width, tokens, "
                               "cfg_batch)", "frames, pixels, tokens", "`aoizora run` and the export use this shape"),
                "model": _about("object", "the model's dimensions (layers, dim, heads, ffn, ...)"),
                "scheduler": _about("object", "the sampler (name, denoising steps, shift) the video's steps "
                                  "come from", serving="`aoizora run` and the export run this many steps"),
                "kernel": _about("string", "the attention kernel the programs are written with (`auto`: "
                                 "JAX's splash on TPU; no option of `aoizora plan` sets it)"),
                "splash_blocks": _about("string", "how the splash blocks were chosen (e.g. `fitted to v5e`)"),
                "kernel_profile": _about("string", "the attention kernel the deployment runs, whose cost profile "
                                         "costs attention (what `--kernel` sets)"),
                "scoped_vmem_kib": _about("integer", "the scoped-VMEM limit the plan's compiler flags fixed "
                                          "(`compiler.libtpu_args`): every strategy's tile was "
                                          "searched at it alone; absent: the planner chose each strategy's limit",
                                          "KiB"),
                "pipeline": _about("object", "the generation around the transformer (two-expert switch, "
                                 "guidance, …) for models that define one",
                                 serving="`aoizora run` and the export run the pipeline so"),
                "program": _about("object", "the program Stage 2 compiled and costed when not aoizora's own Wan "
                                  "step (`aoizora plan --program maxdiffusion`): `name` (`maxdiffusion`), "
                                  "`repository`, `commit` (the checkout's, null when it has no git metadata), "
                                  "`facts_commit` (where aoizora's MaxDiffusion facts were read) and, where the step "
                                  "compiled for the slice differs from the one MaxDiffusion runs, `adjustments` "
                                  "(each difference and why, in words); absent: aoizora's program"),
            },
        }, "what was planned"),
        "topology": _doc({
            "type": "object",
            "required": ["name", "generation", "shape", "cores_per_chip", "device_kinds"],
            "properties": {
                "name": _doc({"type": "string"}, "the slice, e.g. `v5e:2x4`", serving="`Plan.mesh()` checks the slice"),
                "generation": _doc({"type": "string"}, "the TPU generation (`v5e`, `v6e`, `tpu7x`, ...)"),
                "shape": _doc({"type": "array", "items": {"type": "integer", "minimum": 1},
                               "minItems": 2, "maxItems": 3},
                              "chips along x, y(, z)", "chips", "`Plan.mesh()` checks the slice's shape"),
                "wrap": _about("list of boolean", "whether each dimension wraps around"),
                "cores_per_chip": _doc({"type": "integer", "minimum": 1}, "JAX devices per chip", "devices",
                                       "`Plan.mesh()` matches devices by chip and core"),
                "device_kinds": _doc({"type": "array", "items": {"type": "string"}, "minItems": 1},
                                     "the `device_kind` strings of the slice's devices",
                                     serving="`Plan.mesh()` refuses devices of another kind"),
            },
        }, "the TPU slice planned for"),
        "compiler": _doc({
            "type": "object",
            "required": ["libtpu_args"],
            "properties": {"libtpu_args": _doc({"type": "string"}, "the libtpu/XLA flags the plan's program was "
                                               "compiled with, space-separated",
                                               serving="set as `LIBTPU_INIT_ARGS` (or `Plan.compiler_options()`)")},
        }, "how the plan's program was compiled"),
        "toolchain": _doc({
            "type": "object",
            "required": ["jax", "jaxlib", "libtpu"],
            "properties": {"jax": _doc({"type": "string"}, "jax version"),
                           "jaxlib": _doc({"type": "string"}, "jaxlib version"),
                           "libtpu": _doc({"type": "string"}, "libtpu version")},
        }, "the versions that compiled the programs; a different libtpu may compile another program"),
        "mesh": _doc({
            "type": "object",
            "required": ["axis_names", "axis_sizes"],
            "properties": {
                "axis_names": _doc({"type": "array", "items": {"type": "string"}, "minItems": 1},
                                   "the mesh's axis names, in order", serving="`Plan.mesh()` names the axes"),
                "axis_sizes": _doc({"type": "array", "items": {"type": "integer", "minimum": 1}, "minItems": 1},
                                   "the size of each axis (1 for an axis the strategy does not use)", "devices",
                                   "`Plan.mesh()` shapes the mesh"),
            },
        }, "the logical device mesh"),
        "strategy": _doc({
            "type": "object",
            "required": ["key"],
            "properties": {
                "key": _doc({"type": "string"}, "the strategy's name: the mesh axes longer than 1, then "
                            "`| weights=… | attn=… | blocks=q/kv/kv_compute[ | vmem=KiB][ | ring_layout=heads_major]`"),
                "mesh": _about("object",
                             "each mesh axis's size", "devices", "`aoizora run` and the export rebuild the strategy"),
                "attention": _about("string", "attention variant: `allgather`, `ulysses`, `ring` or "
                                  "`ulysses_ring`", serving="which attention to run"),
                "weights": _about("string", "how the weights are sharded: `replicated`, `gathered` (per "
                                "layer), `tensor` or `gathered+tensor`", serving="how to shard the weights"),
                "kernel": _about("string", "the attention kernel asked for (`auto`: JAX's splash)"),
                "video": _about("list of integer",
                              "frames, height, width planned for", "frames, pixels"),
                "splash_blocks": _BLOCKS,
                "scoped_vmem_kib": _about("integer", "the scoped-VMEM limit the blocks were "
                                        "chosen under (also in `compiler.libtpu_args`)", "KiB"),
                "ulysses_chunks": _about("integer", "Ulysses all-to-alls split into this "
                                       "many chunks", serving="how to run Ulysses attention"),
                "weight_tile": _about("list of integer",
                                    "the tile replicated stacked weights are handed over in", "elements",
                                    "lay the weights out so"),
                "kernel_profile": _about("string", "the attention kernel's cost profile the plan was made "
                                       "with (`--kernel`)"),
                "ring_layout": _about("string", "the layout the ring's K/V rotate in: `heads_major` (the "
                                    "splash kernel's, laid out once) or, when absent, `sequence_major` (the "
                                    "model's, laid out per step)", serving="how to run ring attention"),
                "experts": _about("integer", "transformers the model switches between "
                                "(2 for Wan 2.2 A14B)", "transformers"),
                "expert_residency": _about("string", "`both` (both experts stay on the chips) or `swap`",
                                         serving="whether to keep both experts resident"),
                "expert_bytes_per_device": _about("integer", "one expert's weights per device",
                                                "bytes"),
            },
        }, "the logical sharding chosen (a Wan plan's keys; other models carry `key` and their own)"),
        "placement": _doc({
            "type": "object",
            "required": ["name", "description", "device_coords"],
            "properties": {
                "name": _doc({"type": "string"}, "the placement's name, e.g. `fsdp=y0 context=x.y1~snake`"),
                "description": _doc({"type": "string"}, "which slice dimensions each mesh axis runs along"),
                "device_coords": _COORDS,
                "verified_compile": _about("boolean", "whether the pair was recompiled over its own "
                                         "device order before the choice"),
            },
        }, "which chip each mesh position lands on"),
        "prediction": _PREDICTION,
        "baselines": _doc({"type": "object"}, "the same strategy on JAX's default order and every expert "
                          "deployment, each with its predicted step and the plan's speedup over it"),
        "alternatives": _doc({"type": "array", "items": {"type": "object", "required": ["strategy", "placement"]}},
                             "every strategy Stage 2 considered: its best placement and predicted step, or why it "
                             "was dropped"),
        "stage1": _doc({"type": "object"}, "Stage 1's verdict counts and, per strategy, its verdict, reasons and "
                       "Q1 rank"),
        "stage2": _doc({
            "type": "object",
            "required": ["compiles", "pruned_by_q1"],
            "properties": {
                "compiles": _doc({"type": "integer", "minimum": 0}, "programs compiled", "programs"),
                "compiled_strategies": _doc({"type": "array", "items": {"type": "string"}},
                                            "the strategies compiled, in order"),
                "pruned_by_q1": _doc({"type": "object"}, "strategies not compiled because their Q1 bound reached "
                                     "the best Q2 found, with the bound"),
                "q1_bound_violations": _doc({"type": "object"}, "strategies whose Q2 fell below their Q1 bound"),
                "workers": _doc({"type": "integer", "minimum": 1}, "compile workers", "processes"),
                "compile_placements": _doc({"type": "object", "additionalProperties": {"type": "string"}},
                                           "the placement each strategy was compiled over"),
                "verify_recompiles": _doc({"type": "array", "items": {"type": "object",
                                                                      "required": ["strategy", "placement"]}},
                                          "pairs recompiled over their own device order before the choice (older "
                                          "plans may add `order_probe`: the cheaper strategy "
                                          "compiled in its place, whose collectives' reordering maps were read)"),
                "time_budget": _doc({"type": "object", "required": ["seconds", "cut"]},
                                    "with --time-budget: the budget, whether it cut Stage 2 short, and the "
                                    "strategies not compiled, compiles stopped, leading pairs not verified and "
                                    "programs besides the step (the VAE decode) not costed; `nothing_compiled`: "
                                    "no compile finished in time, so the plan is Stage 1's best strategy on its "
                                    "predicted placement (`prediction.basis` `q1`)"),
            },
        }, "what Stage 2 compiled, pruned and recompiled"),
        "timings": _doc({"type": "object", "additionalProperties": {"type": "number", "minimum": 0}},
                        "planning time per stage (stage1, compile, score, verify, …)", "s"),
        "experts": _about("object", "a two-expert model (Wan 2.2 A14B): whether both experts stay "
                        "resident, their bytes per device, and the swap time per video if not",
                        serving="whether to keep both experts resident or swap them"),
        "video_time": _VIDEO_TIME,
        "replicas": _REPLICAS,
        "notes": _doc({"type": "array", "items": {"type": "string"}}, "sentences about the choice, for the reader"),
        "request": _doc({"type": "object", "properties": {
            "workload": _about("object", "the workload asked for (the plan's `workload`)"),
            "topology": _about("string", "the slice asked for, e.g. `v5e:2x4`"),
            "libtpu_args": _about("string", "the compiler flags asked for"),
            "toolchain": _about("object", "the jax, jaxlib and libtpu versions planned with"),
            "aoizora": _about("string", "the aoizora package version planned with"),
            "source": _about("string", "the fingerprint of aoizora's source planned with"),
            "companions": _about("list of string", "the programs besides the step the plan compiles and costs "
                                 "(the VAE decode); a plan that costs them answers another request"),
            "options": _doc({DOC_TYPE: "object", "properties": {
                "top_k": _about("integer", "strategies Stage 1 passes to Stage 2 (`--top-k`)"),
                "ring_order": _about("string", "the ring order Q2 assumes (`--ring-order`): `listed`, `best`, or "
                                     "`reordering-map` (best where a collective's compiled config reports a "
                                     "reordering map, listed elsewhere; older plans record it as `auto`)"),
                "ring_direction": _about("string", "the ring direction Q2 assumes (`--ring-direction`): `auto` (from "
                                         "the compiled config), `uni` or `bi`"),
                "verify_top": _about("integer", "best pairs recompiled over their own device order (`--verify-top`)"),
                "include_experts": _about("boolean", "whether the expert deployments joined Stage 2 as candidates"),
                "check_limits": _about("boolean", "whether the leading pair's raised scoped-VMEM limit was checked "
                                       "by a compile at it (`--limit-check`, the default; absent in older plans)"),
            }}, "the planning options"),
        }}, "the request the plan answers; the plan cache's key"),
    },
}


def validate_plan_json(data: Any, source: str = "plan") -> None:
    """Raise PlanFormatError (one line: where and what) unless `data` is a valid plan."""
    if not isinstance(data, dict):
        raise PlanFormatError(f"{source} is not a JSON object; re-run `aoizora plan` to write a new one")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise PlanFormatError(
            f"{source} has schema_version {version!r}, this aoizora reads {SCHEMA_VERSION}; re-run `aoizora plan`"
        )
    exc = jsonschema.exceptions.best_match(_plan_validator().iter_errors(data))
    if exc is not None:  # the error `jsonschema.validate` would raise
        where = "/".join(str(p) for p in exc.absolute_path) or "(top level)"
        raise PlanFormatError(
            f"{source} is not a valid plan at {where}: {exc.message}; re-run `aoizora plan`") from None


@functools.cache
def _plan_validator() -> Any:
    """The validator of `PLAN_SCHEMA`, built once: `jsonschema.validate` checks the schema itself
    against its meta-schema on every call (about 1.4 s), which made a plan-cache hit slow."""
    cls = jsonschema.validators.validator_for(PLAN_SCHEMA)
    cls.check_schema(PLAN_SCHEMA)
    return cls(PLAN_SCHEMA)
