"""A MaxDiffusion Wan command read back as an aoizora strategy (`aoizora plan --from-maxdiffusion`).

The command is what a user runs today, e.g. ``LIBTPU_INIT_ARGS="..." python
src/maxdiffusion/generate_wan.py src/maxdiffusion/configs/base_wan_27b.yml attention=ulysses_ring
ulysses_shards=2 ici_data_parallelism=2 ...``. Values the command does not set are the config's
(recorded in `data/maxdiffusion.json`), and each override is typed as MaxDiffusion's ``pyconfig``
types it (by the config value's type). The mapping is the inverse of `aoizora.export.maxdiffusion`.

What is read is kept as written: the tile (``flash_block_sizes``, with the custom kernels' own
keys), the kernel (``attention``), the mesh, the model, size, frames and steps. Compiler flags
come from ``LIBTPU_INIT_ARGS`` and ``XLA_FLAGS``: libtpu parses both (the tpu-recipes Wan recipes
and the README's chunked-Ulysses note pass TPU flags in ``XLA_FLAGS``), so they join into one set;
a flag both set to different values is refused, since which one libtpu applies last is not
something aoizora knows. Every other key the command sets is listed (`unmodelled`), and the keys
that make MaxDiffusion skip transformer passes are named (`skipped_passes`).
"""

from __future__ import annotations

import ast
import json
import math
import shlex
from dataclasses import dataclass
from typing import Any

from aoizora.errors import CompilerFlagError, ExportError
from aoizora.export.maxdiffusion import MODEL_CONFIGS, VARIANTS, WEIGHT_NAMES, _clip, _cut, facts
from aoizora.models.maxdiffusion.overrides import effective_axes
from aoizora.models.wan.transformer.strategy import SplashBlocks, Strategy
from aoizora.toolchain import CompilerFlags

#: the keys aoizora reads from a command (the config gives mesh_axes); every other key set is
#: listed as not modelled (`MaxDiffusionCommand.unmodelled`)
READ_KEYS = frozenset({
    "attention", "ulysses_shards", "ulysses_attention_chunks", "flash_block_sizes", "logical_axis_rules",
    "ici_data_parallelism", "ici_fsdp_parallelism", "ici_context_parallelism", "ici_tensor_parallelism",
    "per_device_batch_size", "height", "width", "num_frames", "num_inference_steps",
})
#: the caches that skip transformer forward passes (README.md "Caching Mechanisms" and the Wan
#: configs, github.com/AI-Hypercomputer/maxdiffusion @ 7cfb8801d41d1728f0232cd7ee59e900a151fecf;
#: all False in the configs)
SKIPPING_KEYS = ("use_cfg_cache", "use_sen_cache", "use_magcache")
#: flash_block_sizes keys MaxDiffusion's custom kernels read besides the blocks
#: (src/maxdiffusion/max_utils.py get_flash_block_sizes, CustomFlashBlockSizes @ 7cfb8801)
CUSTOM_KERNEL_KEYS = ("block_kv_compute_in", "heads_per_tile", "vmem_limit_bytes")
#: Longest command read: a generate_wan.py command with every override is a few KiB; the cap keeps a
#: wrong argument (a file's content) from being split and echoed whole.
MAX_COMMAND_CHARS = 32_768

_WEIGHT_MODES = {(False, False): "replicated", (True, False): "gathered", (False, True): "tensor",
                 (True, True): "gathered+tensor"}


@dataclass(frozen=True)
class MaxDiffusionCommand:
    """A parsed generate_wan.py command: its config, overrides (typed) and LIBTPU_INIT_ARGS."""

    config: str
    overrides: dict[str, Any]
    #: LIBTPU_INIT_ARGS and XLA_FLAGS joined (the flags the deployment compiles with)
    libtpu_args: CompilerFlags
    #: the part of `libtpu_args` that came from XLA_FLAGS
    xla_flags: CompilerFlags = CompilerFlags()
    #: the command's other environment assignments (NAME, value), which aoizora does not read
    environment: tuple[tuple[str, str], ...] = ()

    def value(self, key: str) -> Any:
        """The command's value of `key`, else the config's."""
        if key in self.overrides:
            return self.overrides[key]
        return facts()["configs"][self.config]["values"].get(key)

    @property
    def model(self) -> str:
        return next(m for m, c in MODEL_CONFIGS.items() if c == self.config)

    @property
    def attention_name(self) -> str:
        return str(self.value("attention"))

    def videos(self, num_devices: int) -> int:
        """Videos per batch: per_device_batch_size × devices, as generate_wan.py counts prompts."""
        videos = int(float(self.value("per_device_batch_size")) * num_devices)
        if videos < 1:
            raise ExportError(f"per_device_batch_size={self.value('per_device_batch_size')} on {num_devices} "
                              "devices is less than one video")
        return videos

    def mesh_sizes(self, num_devices: int) -> dict[str, int]:
        """ici_*_parallelism with MaxDiffusion's one -1 filled from the device count."""
        axes = facts()["configs"][self.config]["values"]["mesh_axes"]
        sizes = {a: int(self.value(f"ici_{a}_parallelism")) for a in axes}
        unknown = [a for a, n in sizes.items() if n == -1]
        known = math.prod(n for n in sizes.values() if n != -1)
        if len(unknown) > 1 or any(n < 1 and n != -1 for n in sizes.values()):
            raise ExportError(f"ici_*_parallelism {sizes}: at most one axis may be -1 and the others positive")
        if unknown:
            if num_devices % known:
                raise ExportError(f"ici_*_parallelism {sizes} cannot fill {num_devices} devices")
            sizes[unknown[0]] = num_devices // known
        if math.prod(sizes.values()) != num_devices:
            raise ExportError(f"ici_*_parallelism {sizes} uses {math.prod(sizes.values())} devices, "
                              f"the slice has {num_devices}")
        return sizes

    def strategy(self, num_devices: int) -> Strategy:
        """The aoizora strategy this command deploys on `num_devices` devices."""
        sizes = self.mesh_sizes(num_devices)
        name = self.attention_name
        profile = "jax-splash"
        if name == "dot_product":
            if sizes["context"] > 1:
                raise ExportError("attention: dot_product across context devices has no aoizora strategy")
            variant, kernel = "allgather", "xla"
        elif name in VARIANTS:
            (variant, profile), kernel = VARIANTS[name], "auto"
        else:
            raise ExportError(f"attention: aoizora cannot read MaxDiffusion's {_clip(name)}; it reads "
                              f"{', '.join(sorted(VARIANTS))} and dot_product")
        if sizes["context"] == 1:
            variant = "allgather"
        fields: dict[str, Any] = {"attention": variant, "kernel": kernel, "weights": self._weights(sizes),
                                  "kernel_profile": profile}
        if variant == "ulysses_ring":
            fields["context_ulysses"] = int(self.value("ulysses_shards"))
        if variant in ("ulysses", "ulysses_ring"):
            fields["ulysses_chunks"] = int(self.value("ulysses_attention_chunks"))
        if kernel != "xla":
            fields["splash_blocks"] = self._blocks()
        # MaxDiffusion's Wan configs have these four mesh axes (`mesh_axes`, data/maxdiffusion.json)
        return Strategy(data=sizes["data"], fsdp=sizes["fsdp"], context=sizes["context"], tensor=sizes["tensor"],
                        **fields)

    def _weights(self, sizes: dict[str, int]) -> str:
        rules = {name: axes for name, axes in _axis_rules(self.value("logical_axis_rules"))}
        sharded = {name: effective_axes(rules.get(name), sizes) for name in WEIGHT_NAMES}
        if bool(sharded["heads"]) != bool(sharded["mlp"]):
            raise ExportError("logical_axis_rules: heads and mlp are sharded differently; aoizora's weight modes "
                              "shard both over tensor or neither")
        return _WEIGHT_MODES[(bool(sharded["embed"]), bool(sharded["heads"]))]

    def _blocks(self) -> SplashBlocks | None:
        given = self.value("flash_block_sizes") or {}
        if not isinstance(given, dict):
            raise ExportError(f"flash_block_sizes={_clip(given)}: not an object of block sizes; give e.g. "
                              '\'{"block_q":2048,"block_kv":2048,"block_kv_compute":1024}\'')
        if not given:
            return None
        fb = facts()["flash_block_sizes"]
        key = "block_q"
        if self.attention_name in fb["tokamax_attentions"]:
            src = fb["tokamax_block_q_from"]
            key = src["key"] if src["key"] in given else src["default_key"]
        try:
            return SplashBlocks(_block(given, key), _block(given, "block_kv"), _block(given, "block_kv_compute"))
        except KeyError as exc:
            raise ExportError(f"flash_block_sizes has no {exc.args[0]}; give block_q, block_kv and "
                              "block_kv_compute") from None

    def video(self) -> tuple[int, int, int]:
        """(width, height, frames)."""
        return int(self.value("width")), int(self.value("height")), int(self.value("num_frames"))

    def steps(self) -> int:
        """num_inference_steps (the command's, else the config's)."""
        return int(self.value("num_inference_steps"))

    def kernel_options(self) -> dict[str, int]:
        """The flash_block_sizes keys a MaxDiffusion custom kernel reads beyond the three blocks
        (`max_utils.get_flash_block_sizes`: block_kv_compute_in, heads_per_tile, vmem_limit_bytes)."""
        if "custom" not in self.attention_name:
            return {}
        given = self.value("flash_block_sizes") or {}
        return {k: int(given[k]) for k in CUSTOM_KERNEL_KEYS if given.get(k) is not None}

    def unmodelled(self) -> list[str]:
        """`key=value` for every key the command sets that aoizora does not read (its run may
        differ by them), and the flash_block_sizes entries the kernel named does not read."""
        out = [f"{k}={_shown(v)}" for k, v in self.overrides.items() if k not in READ_KEYS]
        given = self.overrides.get("flash_block_sizes") or {}
        read = {"block_q", "block_kv", "block_kv_compute", *self.kernel_options()}
        if self.attention_name in facts()["flash_block_sizes"]["tokamax_attentions"]:
            read.add(facts()["flash_block_sizes"]["tokamax_block_q_from"]["key"])
        out += [f"flash_block_sizes.{k}={v}" for k, v in given.items() if k not in read]
        return out

    def skipped_passes(self) -> list[str]:
        """The keys set true that make MaxDiffusion skip transformer passes (its caches)."""
        return [k for k in SKIPPING_KEYS if self.overrides.get(k) is True]

    def notes(self) -> list[str]:
        """What the comparison with this command does not cover, one line each."""
        out = []
        if self.xla_flags:
            out.append(f"XLA_FLAGS: its {len(self.xla_flags.items)} flags are compiler flags too; they join "
                       "LIBTPU_INIT_ARGS's in the flags the command is compiled with")
        if self.environment:
            out.append("environment not modelled: " + ", ".join(f"{k}={_shown(v)}" for k, v in self.environment))
        unread = self.unmodelled()
        if unread:
            out.append("not modelled (aoizora does not read these keys; the run may differ by them): "
                       + ", ".join(unread))
        skips = self.skipped_passes()
        if skips:
            out.append(f"{', '.join(f'{k}=True' for k in skips)}: your run skips transformer passes on some steps; "
                       "the per-step comparison is still fair, but your run's total time is not steps x step time")
        return out


def _block(given: dict[str, Any], key: str) -> int:
    """A flash_block_sizes entry: a positive whole number (KeyError when missing)."""
    value = given[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
            or value != int(value) or value < 1:
        raise ExportError(f"flash_block_sizes {key}={_clip(value)}: not a positive whole number of tokens")
    return int(value)


def _axis_rules(rules: Any) -> list[tuple[str, Any]]:
    """logical_axis_rules as (logical name, mesh axes: None, a name or a list of names) pairs."""
    def axes_ok(axes: Any) -> bool:
        return axes is None or isinstance(axes, str) or (
            isinstance(axes, (list, tuple)) and all(isinstance(a, str) for a in axes))

    if not isinstance(rules, (list, tuple)) or not all(
            isinstance(r, (list, tuple)) and len(r) == 2 and isinstance(r[0], str) and axes_ok(r[1]) for r in rules):
        raise ExportError(f"logical_axis_rules={_clip(rules)}: not a list of [logical name, mesh axes] pairs; "
                          "give e.g. [['embed', ['context', 'fsdp']]]")
    return [(r[0], r[1]) for r in rules]


def read_command(text: str) -> MaxDiffusionCommand:
    """Parse a generate_wan.py command line (see the module docstring); ExportError names what is wrong."""
    if len(text) > MAX_COMMAND_CHARS:
        raise ExportError(f"the MaxDiffusion command is {len(text)} characters, more than a generate_wan.py "
                          f"command (at most {MAX_COMMAND_CHARS}); pass the command line itself")
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ExportError(f"cannot split the MaxDiffusion command: {_cut(str(exc))}") from None
    env: dict[str, str] = {}
    while tokens and "=" in tokens[0] and not tokens[0].split("=", 1)[0].startswith("-") \
            and tokens[0].split("=", 1)[0].isupper():
        name, value = tokens.pop(0).split("=", 1)
        env[name] = value
    while tokens and (tokens[0].startswith("python") or tokens[0].endswith(".py")):
        tokens.pop(0)
    configs = [t for t in tokens if t.endswith((".yml", ".yaml"))]
    if len(configs) != 1:
        raise ExportError("the MaxDiffusion command must name one Wan config (e.g. "
                          f"{MODEL_CONFIGS['wan2.1-t2v-14b']}); found {len(configs)}")
    config = _known_config(configs[0])
    types = facts()["configs"][config]["types"]
    overrides: dict[str, Any] = {}
    for token in tokens:
        if token == configs[0]:
            continue
        if "=" not in token:
            raise ExportError(f"MaxDiffusion override {_clip(token)} is not key=value")
        key, raw = token.split("=", 1)
        if key not in types:
            raise ExportError(f"{_cut(key)}: not a key of {config} at MaxDiffusion {facts()['commit'][:8]}")
        overrides[key] = _typed(key, raw, types[key])
    libtpu, xla = _flags(env, "LIBTPU_INIT_ARGS"), _flags(env, "XLA_FLAGS")
    clash = sorted(k for k, v in xla.items if dict(libtpu.items).get(k, v) != v)
    if clash:
        raise ExportError(f"XLA_FLAGS and LIBTPU_INIT_ARGS set {', '.join('--' + k for k in clash)} to different "
                          "values; libtpu reads both, so set each flag in one of them")
    others = tuple((k, v) for k, v in env.items() if k not in ("LIBTPU_INIT_ARGS", "XLA_FLAGS"))
    return MaxDiffusionCommand(config, overrides, libtpu.merged(xla), xla, others)


def _flags(env: dict[str, str], name: str) -> CompilerFlags:
    try:
        return CompilerFlags.parse(env.get(name, ""))
    except CompilerFlagError as exc:
        raise ExportError(f"{name}: {exc}") from None


def _shown(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":")) if isinstance(value, (dict, list)) else str(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _known_config(path: str) -> str:
    for config in MODEL_CONFIGS.values():
        if path == config or path.endswith("/" + config.rsplit("/", 1)[1]) or path == config.rsplit("/", 1)[1]:
            return config
    raise ExportError(f"config {_clip(path)}: aoizora reads the Wan configs {', '.join(MODEL_CONFIGS.values())}")


def _typed(key: str, raw: str, kind: str) -> Any:
    """An override typed as pyconfig types it: by the config value's type (bools from true/false,
    lists by literal_eval, dicts from JSON)."""
    try:
        if kind == "bool":
            if raw.lower() not in ("true", "false"):
                raise ValueError(raw)
            return raw.lower() == "true"
        if kind == "int":
            return int(raw)
        if kind == "float":
            number = float(raw)
            if not math.isfinite(number):
                raise ValueError("not a finite number")
            return number
        if kind == "list":
            value = ast.literal_eval(raw)
            if not isinstance(value, (list, tuple)):
                raise ValueError("not a list")
            return value
        if kind == "dict":
            value = json.loads(raw)
            if not isinstance(value, dict):
                raise ValueError("not an object")
            return value
        return raw
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError) as exc:
        raise ExportError(f"{_cut(key)}={_clip(raw)}: not a {kind} as MaxDiffusion's config has it "
                          f"({_cut(str(exc))})") from None
