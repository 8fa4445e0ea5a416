"""Record the MaxDiffusion facts `aoizora export --to maxdiffusion` depends on, from a git snapshot.

    .venv/bin/python tools/maxdiffusion_facts.py GIT_DIR [--commit SHA] [--out src/aoizora/data/maxdiffusion.json]

GIT_DIR is a clone of github.com/AI-Hypercomputer/maxdiffusion (a bare repository works: files are
read with `git show COMMIT:PATH`, so no checkout is needed). Nothing of MaxDiffusion is copied:
the output holds facts read from its source, each with the file it comes from, so that the export
can be checked against them without MaxDiffusion installed and regenerated at a newer commit:

* every top-level key of each Wan yml config and the type of its value (what `pyconfig` parses a
  command-line override as), with the values of the keys the export writes;
* the attention names `attention_flax.py` registers (`@register_kernel("NAME")`), the names
  `pyconfig.py` treats as 2D context (Ulysses × ring), and the names whose splash `block_q` is read
  from another `flash_block_sizes` key (`max_utils.get_flash_block_sizes`);
* `mesh_axes`, the order `create_device_mesh` reads the `ici_*_parallelism` keys in, and its
  signature;
* how 2D context splits the public `context` axis (`_create_internal_ulysses_ring_mesh`: which of
  ring and Ulysses is the outer axis);
* the call sites of `create_device_mesh` on the Wan path and whether they look it up on the module
  at call time (`max_utils.create_device_mesh(...)`), which the exported launcher relies on.
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import yaml

REPOSITORY = "github.com/AI-Hypercomputer/maxdiffusion"
CONFIGS = "src/maxdiffusion/configs"
WAN_CONFIGS = ("base_wan_1_3b.yml", "base_wan_14b.yml", "base_wan_27b.yml", "base_wan_i2v_14b.yml",
               "base_wan_i2v_27b.yml")
ATTENTION = "src/maxdiffusion/models/attention_flax.py"
PYCONFIG = "src/maxdiffusion/pyconfig.py"
MAX_UTILS = "src/maxdiffusion/max_utils.py"
GENERATE_WAN = "src/maxdiffusion/generate_wan.py"
WAN_MESH_USERS = ("src/maxdiffusion/generate_wan.py", "src/maxdiffusion/pipelines/wan/wan_pipeline.py",
                  "src/maxdiffusion/pipelines/wan/wan_pipeline_2_1.py",
                  "src/maxdiffusion/pipelines/wan/wan_pipeline_2_2.py",
                  "src/maxdiffusion/pipelines/wan/wan_pipeline_i2v_2p1.py",
                  "src/maxdiffusion/pipelines/wan/wan_pipeline_i2v_2p2.py")
#: the config values the export reads (the rest is recorded by type only)
VALUE_KEYS = ("pretrained_model_name_or_path", "model_name", "model_type", "mesh_axes", "logical_axis_rules",
              "attention", "ulysses_shards", "ulysses_attention_chunks", "flash_block_sizes", "height", "width",
              "num_frames", "num_inference_steps", "per_device_batch_size", "ici_data_parallelism",
              "ici_fsdp_parallelism", "ici_context_parallelism", "ici_tensor_parallelism", "dcn_data_parallelism",
              "dcn_fsdp_parallelism", "dcn_context_parallelism", "dcn_tensor_parallelism",
              "attention_sharding_uniform")


class FactError(RuntimeError):
    """A fact the export depends on is not where this script looks for it (MaxDiffusion changed)."""


def git_show(git_dir: Path, commit: str, path: str) -> str:
    out = subprocess.run(["git", "-C", str(git_dir), "show", f"{commit}:{path}"], capture_output=True, text=True)
    if out.returncode:
        raise FactError(f"{path} is not in {commit}: {out.stderr.strip()}")
    return out.stdout


def yaml_type(value: Any) -> str:
    """The name of the Python type `yaml.safe_load` gives the value (`pyconfig` types overrides by it)."""
    return "null" if value is None else type(value).__name__


def config_facts(text: str) -> dict[str, Any]:
    raw = yaml.safe_load(text)
    return {"types": {k: yaml_type(v) for k, v in raw.items()},
            "values": {k: raw[k] for k in VALUE_KEYS if k in raw}}


def _function(tree: ast.Module, name: str) -> ast.FunctionDef:
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == name:
            return node
    raise FactError(f"no function {name}")


def registered_attentions(tree: ast.Module) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            for deco in node.decorator_list:
                if (isinstance(deco, ast.Call) and getattr(deco.func, "id", None) == "register_kernel"
                        and deco.args and isinstance(deco.args[0], ast.Constant)):
                    names.append(deco.args[0].value)
    if not names:
        raise FactError("no @register_kernel(...) in attention_flax.py")
    return names


def ulysses_ring_attentions(tree: ast.Module) -> list[str]:
    init = _function(tree, "user_init")
    for node in ast.walk(init):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Set)
                and getattr(node.targets[0], "id", None) == "ulysses_ring_attentions"):
            return sorted(ast.literal_eval(node.value))
    raise FactError("no ulysses_ring_attentions set in pyconfig.user_init")


def block_q_sources(tree: ast.Module, attentions: list[str]) -> dict[str, Any]:
    """Which `flash_block_sizes` key becomes the forward kernel's block_q, per attention name:
    `get_flash_block_sizes` evaluates a condition on `config.attention` (tokamax kernels read
    `block_q_dkv`, else `block_kv`) and passes custom kernels the keys as given."""
    fn = _function(tree, "get_flash_block_sizes")
    condition = None
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "attention_is_tokamax":
            condition = node.value
    if condition is None:
        raise FactError("no attention_is_tokamax in max_utils.get_flash_block_sizes")
    source = ast.unparse(condition)
    # a pure expression of config.attention (string tests only): evaluated per name, no MaxDiffusion import
    expr = compile(ast.Expression(condition), "<get_flash_block_sizes>", "eval")
    tokamax = [a for a in attentions if eval(expr, {}, {"config": SimpleNamespace(attention=a)})]  # noqa: S307
    block_q_key = None
    for node in ast.walk(fn):
        if isinstance(node, ast.keyword) and node.arg == "block_q" and isinstance(node.value, ast.IfExp):
            call = node.value.body
            if isinstance(call, ast.Call) and call.args and isinstance(call.args[0], ast.Constant):
                default = call.args[1] if len(call.args) > 1 else None
                block_q_key = {"key": call.args[0].value,
                               "default_key": (default.args[0].value if isinstance(default, ast.Call)
                                               and default.args and isinstance(default.args[0], ast.Constant)
                                               else None)}
    if block_q_key is None:
        raise FactError("no tokamax block_q expression in max_utils.get_flash_block_sizes")
    custom_test = "custom" in ast.unparse(fn)
    return {"tokamax_condition": source, "tokamax_attentions": tokamax,
            "tokamax_block_q_from": block_q_key, "custom_attentions_take_keys_as_given": custom_test}


def create_device_mesh_facts(tree: ast.Module) -> dict[str, Any]:
    fn = _function(tree, "create_device_mesh")
    args = fn.args
    defaults = [None] * (len(args.args) - len(args.defaults)) + list(args.defaults)
    params = [{"name": a.arg, "default": (ast.literal_eval(d) if d is not None else "<required>")}
              for a, d in zip(args.args, defaults, strict=True)]
    orders = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "ici_parallelism" \
                and isinstance(node.value, ast.List):
            orders.append([e.attr for e in node.value.elts if isinstance(e, ast.Attribute)])
    with_context = [o for o in orders if any("context" in a for a in o)]
    if not with_context:
        raise FactError("no ici_parallelism list with a context axis in create_device_mesh")
    return {"parameters": params, "ici_parallelism_order": with_context[0]}


def context_split(tree: ast.Module) -> list[str]:
    """The axes `context` becomes for 2D context, outer first, as `_create_internal_ulysses_ring_mesh`
    reshapes the device array: ring_shards and ulysses_shards in the order they appear."""
    fn = _function(tree, "_create_internal_ulysses_ring_mesh")
    for node in ast.walk(fn):
        if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Name) for e in node.elts):
            names = [e.id for e in node.elts]
            if set(names) == {"ring_shards", "ulysses_shards"}:
                return [n.removesuffix("_shards") for n in names]
    raise FactError("no (ring_shards, ulysses_shards) reshape in _create_internal_ulysses_ring_mesh")


def mesh_call_sites(git_dir: Path, commit: str) -> list[dict[str, Any]]:
    sites = []
    for path in WAN_MESH_USERS:
        tree = ast.parse(git_show(git_dir, commit, path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr == "create_device_mesh":
                    sites.append({"path": path, "line": node.lineno, "call": ast.unparse(func),
                                  "looked_up_at_call": (isinstance(func.value, ast.Name)
                                                        and func.value.id == "max_utils")})
                elif isinstance(func, ast.Name) and func.id == "create_device_mesh":
                    sites.append({"path": path, "line": node.lineno, "call": func.id, "looked_up_at_call": False})
    return sites


def main_signature(tree: ast.Module) -> list[str]:
    return [a.arg for a in _function(tree, "main").args.args]


def collect(git_dir: Path, commit: str) -> dict[str, Any]:
    full = subprocess.run(["git", "-C", str(git_dir), "rev-parse", commit], capture_output=True, text=True,
                          check=True).stdout.strip()
    attention_tree = ast.parse(git_show(git_dir, full, ATTENTION))
    attentions = registered_attentions(attention_tree)
    max_utils = ast.parse(git_show(git_dir, full, MAX_UTILS))
    return {
        "_about": "Facts read from MaxDiffusion's source by tools/maxdiffusion_facts.py (no file of it is "
                  "copied); aoizora's MaxDiffusion export and its tests check themselves against them.",
        "repository": REPOSITORY,
        "commit": full,
        "configs": {f"{CONFIGS}/{name}": config_facts(git_show(git_dir, full, f"{CONFIGS}/{name}"))
                    for name in WAN_CONFIGS},
        "attentions": {"registered": attentions, "source": ATTENTION,
                       "ulysses_ring": ulysses_ring_attentions(ast.parse(git_show(git_dir, full, PYCONFIG))),
                       "ulysses_ring_source": PYCONFIG},
        "flash_block_sizes": {**block_q_sources(max_utils, attentions), "source": MAX_UTILS},
        "create_device_mesh": {**create_device_mesh_facts(max_utils), "source": MAX_UTILS},
        "context_split": {"outer_first": context_split(attention_tree), "source": ATTENTION},
        "mesh_call_sites": mesh_call_sites(git_dir, full),
        "generate_wan_main": {"parameters": main_signature(ast.parse(git_show(git_dir, full, GENERATE_WAN))),
                              "source": GENERATE_WAN},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("git_dir", type=Path, help="a clone of MaxDiffusion (bare is fine)")
    parser.add_argument("--commit", default="HEAD")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).resolve().parents[1] / "src" / "aoizora" / "data" / "maxdiffusion.json")
    args = parser.parse_args(argv)
    try:
        facts = collect(args.git_dir, args.commit)
    except (FactError, subprocess.CalledProcessError) as exc:
        print(f"maxdiffusion_facts: {exc}", file=sys.stderr)
        return 2
    args.out.write_text(json.dumps(facts, indent=1) + "\n")
    print(f"wrote {args.out} ({facts['commit'][:8]})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
