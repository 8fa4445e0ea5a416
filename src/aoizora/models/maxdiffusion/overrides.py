"""What a strategy sets in a MaxDiffusion Wan run: the config that ships a model, and the
``key=value`` overrides of the mesh, the attention, the splash blocks and the weights' axis rules.

The export writes these into the user's command (`aoizora.export.maxdiffusion`), and Stage 2
passes the same overrides to MaxDiffusion's `pyconfig` when it compiles MaxDiffusion's own program
(`aoizora.models.maxdiffusion.program`), so the program costed is the program the export runs.
Every MaxDiffusion name used is checked against the facts `tools/maxdiffusion_facts.py` recorded
from its source (`data/maxdiffusion.json`, with the commit they were read at).
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from aoizora.errors import ExportError
from aoizora.models.wan.kernels.custom_tiles import KernelTile
from aoizora.models.wan.transformer.strategy import Strategy, logical_rules

#: aoizora model name -> the MaxDiffusion config that ships it (the config's pretrained_model_name_or_path)
MODEL_CONFIGS: dict[str, str] = {
    "wan2.1-t2v-1.3b": "src/maxdiffusion/configs/base_wan_1_3b.yml",
    "wan2.1-t2v-14b": "src/maxdiffusion/configs/base_wan_14b.yml",
    "wan2.1-i2v-14b": "src/maxdiffusion/configs/base_wan_i2v_14b.yml",
    "wan2.2-t2v-a14b": "src/maxdiffusion/configs/base_wan_27b.yml",
    "wan2.2-i2v-a14b": "src/maxdiffusion/configs/base_wan_i2v_27b.yml",
}
#: (kernel profile, aoizora's self-attention variant) -> MaxDiffusion's attention name. JAX's splash
#: has no ring attention in MaxDiffusion (it registers tokamax's), and its `ulysses_ring` runs
#: tokamax's kernels at 7cfb8801: the nearest names, with a note (`MaxDiffusionRun.differences`).
ATTENTION_NAMES: dict[tuple[str, str], str] = {
    ("jax-splash", "allgather"): "flash", ("jax-splash", "ulysses"): "ulysses",
    ("jax-splash", "ring"): "tokamax_ring", ("jax-splash", "ulysses_ring"): "ulysses_ring",
    ("tokamax-splash", "allgather"): "tokamax_flash", ("tokamax-splash", "ring"): "tokamax_ring",
    ("tokamax-splash", "ulysses_ring"): "ulysses_ring",
    ("maxdiffusion-custom", "ulysses"): "ulysses_custom",
    ("maxdiffusion-custom", "ulysses_ring"): "ulysses_ring_custom",
    ("maxdiffusion-custom-fixed-m", "ulysses"): "ulysses_custom_fixed_m",
    ("maxdiffusion-custom-fixed-m", "ulysses_ring"): "ulysses_ring_custom_fixed_m",
}
#: MaxDiffusion attention name -> (aoizora's variant, kernel profile): the names aoizora reads back
VARIANTS: dict[str, tuple[str, str]] = {
    "flash": ("allgather", "jax-splash"), "ulysses": ("ulysses", "jax-splash"),
    "tokamax_flash": ("allgather", "tokamax-splash"), "tokamax_ring": ("ring", "tokamax-splash"),
    "ulysses_ring": ("ulysses_ring", "tokamax-splash"),
    "ulysses_custom": ("ulysses", "maxdiffusion-custom"),
    "ulysses_ring_custom": ("ulysses_ring", "maxdiffusion-custom"),
    "ulysses_custom_fixed_m": ("ulysses", "maxdiffusion-custom-fixed-m"),
    "ulysses_ring_custom_fixed_m": ("ulysses_ring", "maxdiffusion-custom-fixed-m"),
}
#: the logical names of weight dimensions whose rules decide aoizora's weight mode
WEIGHT_NAMES: tuple[str, ...] = ("embed", "heads", "mlp")
#: the keys the export sets; a launcher's extra overrides may not change them
MESH_KEYS: tuple[str, ...] = ("ici_data_parallelism", "ici_fsdp_parallelism", "ici_context_parallelism",
                              "ici_tensor_parallelism")


@functools.lru_cache(maxsize=1)
def facts() -> dict[str, Any]:
    """The MaxDiffusion facts the export is checked against (`tools/maxdiffusion_facts.py`)."""
    return json.loads(resources.files("aoizora").joinpath("data/maxdiffusion.json").read_text())




def maxdiffusion_config(model: str, field: str = "workload.name") -> str:
    """The MaxDiffusion config of an aoizora model name; ExportError (naming `field`) when MaxDiffusion ships none."""
    config = MODEL_CONFIGS.get(model)
    if config is None:
        raise ExportError(f"{field}: MaxDiffusion ships no config for {model!r} (it has "
                          f"{', '.join(MODEL_CONFIGS)}); plan one of those to export it")
    return config




def attention_overrides(strategy: Strategy, differences: list[str]) -> list[tuple[str, str]]:
    names = facts()["attentions"]
    if strategy.kernel == "xla":
        if strategy.context > 1:
            raise ExportError("strategy.kernel: 'xla' attention across context devices has no MaxDiffusion "
                              "counterpart (its dot_product attention is not sequence-parallel); plan with splash")
        return [("attention", "dot_product")]
    profile = strategy.kernel_profile
    variant = strategy.attention if strategy.context > 1 else ("ulysses" if profile.startswith("maxdiffusion")
                                                               else "allgather")
    name = ATTENTION_NAMES.get((profile, variant))
    if name is None:
        raise ExportError(f"strategy.kernel_profile: MaxDiffusion has no {profile} kernel for {variant!r} attention")
    if name not in names["registered"]:
        raise ExportError(f"strategy.attention: MaxDiffusion at {facts()['commit'][:8]} registers no {name!r} "
                          f"attention for aoizora's {strategy.attention!r}")
    out = [("attention", name)]
    if profile == "jax-splash" and name in facts()["flash_block_sizes"]["tokamax_attentions"] and strategy.context > 1:
        differences.append(
            f"strategy.attention: MaxDiffusion's {name!r} runs tokamax's splash kernels where the plan was "
            "compiled and costed with JAX's splash kernel (same blocks; kernel times may differ)")
    if strategy.two_d_context:
        if name not in names["ulysses_ring"]:
            raise ExportError(f"strategy.attention: MaxDiffusion does not split context for {name!r}")
        out.append(("ulysses_shards", str(strategy.context_ulysses)))
    if strategy.ulysses_axis is not None:
        out.append(("ulysses_attention_chunks", str(strategy.ulysses_chunks)))
    return out




def block_json(strategy: Strategy, tile: KernelTile | None, differences: list[str]) -> str:
    blocks = strategy.splash_blocks
    if tile is not None:
        return customblock_json(strategy, tile, differences)
    if blocks is None:
        differences.append("strategy.splash_blocks: the plan lets the splash kernel pick blocks per call; "
                           "MaxDiffusion's pick (flash_block_sizes={}) is its own rule, not the kernel's")
        return "{}"
    b = {"block_q": blocks.block_q, "block_kv": blocks.block_kv, "block_kv_compute": blocks.block_kv_compute}
    tokamax_key = facts()["flash_block_sizes"]["tokamax_block_q_from"]["key"]
    b.update({tokamax_key: blocks.block_q, "block_kv_dkv": blocks.block_kv,
              "block_kv_dkv_compute": blocks.block_kv_compute})
    return json.dumps(b, separators=(",", ":"))


def customblock_json(strategy: Strategy, tile: KernelTile, differences: list[str]) -> str:
    """flash_block_sizes for MaxDiffusion's custom kernels: the kernel's tile and its own keys, as
    `max_utils.get_flash_block_sizes` hands them to the kernel (CustomFlashBlockSizes), with the
    dkv keys the fast-inference recipe sets beside them."""
    t = tile.blocks
    b: dict[str, int] = {"block_q": t.block_q, "block_kv": t.block_kv, "block_kv_compute": t.block_kv_compute,
                         "block_kv_compute_in": tile.block_kv_compute_in, "heads_per_tile": tile.heads_per_tile}
    if tile.vmem_limit_bytes is not None:
        b["vmem_limit_bytes"] = tile.vmem_limit_bytes
    b.update({"block_q_dkv": t.block_q, "block_kv_dkv": t.block_kv, "block_kv_dkv_compute": t.block_kv_compute})
    compiled = strategy.splash_blocks.describe() if strategy.splash_blocks else "the kernel's pick"
    if compiled != t.describe():
        differences.append(
            f"strategy.splash_blocks: the plan was compiled with JAX's splash at {compiled}; MaxDiffusion runs the "
            f"{strategy.kernel_profile} kernel at its own tile {t.describe()}, chosen by {tile.chosen_by} "
            f"(the profile's cost does not depend on the tile)")
    return json.dumps(b, separators=(",", ":"))


def effective_axes(axes: Any, sizes: dict[str, int]) -> tuple[str, ...]:
    """The mesh axes of size > 1 a rule shards over (a rule's axes: one name, a list or None)."""
    if axes is None:
        return ()
    names = [axes] if isinstance(axes, str) else list(axes)
    return tuple(a for a in names if sizes.get(a, 1) > 1)


def plan_weight_axes(strategy: Strategy) -> dict[str, tuple[str, ...]]:
    """aoizora's weight rules on MaxDiffusion's mesh (context_ring/context_ulysses are its context)."""
    rules = logical_rules(strategy)
    out = {}
    for name in WEIGHT_NAMES:
        axes = [("context" if a.startswith("context") else a) for a in (rules[name] or ())]
        out[name] = tuple(dict.fromkeys(axes))
    return out


def weight_rules(strategy: Strategy, default_rules: list[Any]) -> list[Any] | None:
    """The config's logical_axis_rules with the weight names' rules made the plan's, or None when
    the config's rules already shard the weights as the plan does."""
    sizes = {"data": strategy.data, "fsdp": strategy.fsdp, "context": strategy.context, "tensor": strategy.tensor}
    want = plan_weight_axes(strategy)
    have: dict[str, tuple[str, ...]] = {name: () for name in WEIGHT_NAMES}
    for name, axes in default_rules:
        if name in have:
            have[name] = effective_axes(axes, sizes)
    if have == want:
        return None
    rules = [list(r) for r in default_rules if r[0] not in WEIGHT_NAMES]
    rules += [[name, list(want[name])] for name in WEIGHT_NAMES if want[name]]
    return rules


def strategy_overrides(config: str, strategy: Strategy, tile: KernelTile | None,
                       differences: list[str]) -> list[tuple[str, str]]:
    """The overrides of `config` that run `strategy`: the mesh (``ici_*_parallelism`` in the config's
    ``mesh_axes`` order), the attention, ``flash_block_sizes`` (`tile`: a custom kernel's tile) and,
    when the config's rules shard the weights otherwise, ``logical_axis_rules``. What MaxDiffusion
    runs otherwise than the strategy was costed is appended to `differences`."""
    defaults = facts()["configs"][config]["values"]
    sizes = {"data": strategy.data, "fsdp": strategy.fsdp, "context": strategy.context, "tensor": strategy.tensor}
    out = [(f"ici_{axis}_parallelism", str(sizes[axis])) for axis in defaults["mesh_axes"]]
    out += attention_overrides(strategy, differences)
    out.append(("flash_block_sizes", block_json(strategy, tile, differences)))
    rules = weight_rules(strategy, defaults["logical_axis_rules"])
    if rules is not None:
        # pyconfig reads a list override with ast.literal_eval: JSON's lists of strings are such literals
        text = json.dumps(rules, separators=(",", ":"))
        out.append(("logical_axis_rules", text if "null" not in text else repr(rules)))
    return out
