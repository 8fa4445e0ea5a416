"""A strategy's text forms: every strategy every Wan space enumerates reads back from its key and
from its description, and each form is, byte for byte, what the plans, caches and committed data
on disk hold (a longhand writer of each form below, and the committed plans)."""

from __future__ import annotations

import dataclasses
import json
import types
from pathlib import Path

import pytest

from aoizora.errors import StrategyError
from aoizora.models.registry import wan_space
from aoizora.models.wan.kernels.experts import expert_key_suffixes
from aoizora.models.wan.transformer.kernel_profiles import DEFAULT_KERNEL_PROFILE
from aoizora.models.wan.transformer.strategy import Strategy

ROOT = Path(__file__).resolve().parents[3]

# (model, resolution, frames, generation, devices, space keywords): Wan 2.1 and 2.2, with and
# without fitted tiles, the tpu7x weight tile, every kernel profile, 2D context up to 32 devices
SPACES = [
    ("wan2.1-t2v-1.3b", "480p", 81, None, 8, {}),
    ("wan2.1-t2v-1.3b", "480p", 81, "v5e", 8, {}),
    ("wan2.1-t2v-1.3b", "480p", 81, "v6e", 4, {"kernel": "xla"}),
    ("wan2.1-t2v-14b", "720p", 81, "v6e", 16, {}),
    ("wan2.1-t2v-14b", "720p", 81, "tpu7x", 8, {}),
    ("wan2.1-t2v-14b", "720p", 81, "tpu7x", 16, {"kernel_profile": "maxdiffusion-custom-fixed-m"}),
    ("wan2.2-t2v-a14b", "720p", 81, "tpu7x", 8, {}),
    ("wan2.2-t2v-a14b", "720p", 81, "v5p", 16, {"kernel_profile": "tokamax-splash"}),
    ("wan2.2-ti2v-5b", "720p", 121, "v6e", 8, {"kernel": "splash"}),
    ("wan2.2-i2v-a14b", "480p", 81, "tpu7x", 32, {"kernel_profile": "maxdiffusion-custom"}),
]


def _strategies(model, resolution, frames, generation, devices, kwargs):
    space = wan_space(model, resolution, frames, generation=generation, **kwargs)
    out = [c.strategy for c in space.candidates(devices)]
    if generation is not None:
        topo = types.SimpleNamespace(generation=generation, num_devices=devices)
        out += [d.strategy for d in space.expert_deployments(topo)]
    return space, out


def _longhand_key(st: Strategy) -> str:
    mesh = ",".join(f"{a}={n}" for a, n in st.axis_sizes.items() if n > 1) or "single"
    key = f"{mesh} | weights={st.weights} | attn={st.attention}"
    if st.ulysses_chunks != 1:
        key += f" | chunks={st.ulysses_chunks}"
    if st.splash_blocks is not None:
        b = st.splash_blocks
        key += f" | blocks={b.block_q}/{b.block_kv}/{b.block_kv_compute}"
    if st.weight_tile is not None:
        key += f" | weight_tile={st.weight_tile[0]}x{st.weight_tile[1]}"
    if st.kernel_profile != DEFAULT_KERNEL_PROFILE:
        key += f" | kernel={st.kernel_profile}"
    if st.scoped_vmem_kib is not None:
        key += f" | vmem={st.scoped_vmem_kib}"
    if st.ring_layout != "sequence_major":
        key += f" | ring_layout={st.ring_layout}"
    return key


def _longhand_describe(st: Strategy) -> str:
    text = (f"data={st.data} fsdp={st.fsdp} context={st.context} tensor={st.tensor} "
            f"attention={st.attention} weights={st.weights} kernel={st.kernel}")
    if st.two_d_context:
        text += f" ulysses={st.context_ulysses} ring={st.context_ring}"
    if st.ulysses_chunks != 1:
        text += f" chunks={st.ulysses_chunks}"
    if st.splash_blocks is not None:
        b = st.splash_blocks
        text += f" blocks={b.block_q}/{b.block_kv}/{b.block_kv_compute}"
    if st.weight_tile is not None:
        text += f" weight_tile={st.weight_tile[0]}x{st.weight_tile[1]}"
    if st.kernel_profile != DEFAULT_KERNEL_PROFILE:
        text += f" kernel_profile={st.kernel_profile}"
    if st.scoped_vmem_kib is not None:
        text += f" scoped_vmem_kib={st.scoped_vmem_kib}"
    if st.ring_layout != "sequence_major":
        text += f" ring_layout={st.ring_layout}"
    return text


def _longhand_description(st: Strategy, video: list[int], kernel_tile: dict | None) -> dict:
    out = {"mesh": st.axis_sizes, "attention": st.attention, "weights": st.weights, "kernel": st.kernel,
           "video": video}
    if st.ulysses_chunks != 1:
        out["ulysses_chunks"] = st.ulysses_chunks
    if st.splash_blocks is not None:
        out["splash_blocks"] = dataclasses.asdict(st.splash_blocks)
    if st.weight_tile is not None:
        out["weight_tile"] = list(st.weight_tile)
    if st.kernel_profile != DEFAULT_KERNEL_PROFILE:
        out["kernel_profile"] = st.kernel_profile
    if kernel_tile is not None:
        out["kernel_tile"] = kernel_tile
    if st.scoped_vmem_kib is not None:
        out["scoped_vmem_kib"] = st.scoped_vmem_kib
    if st.ring_layout != "sequence_major":
        out["ring_layout"] = st.ring_layout
    return out


@pytest.mark.parametrize("spec", SPACES, ids=lambda s: f"{s[0]}-{s[3]}-{s[4]}-{'-'.join(map(str, s[5].values()))}")
def test_every_strategy_reads_back_from_its_key_and_description(spec):
    space, strategies = _strategies(*spec)
    assert len(strategies) > 100
    video = [space.video.frames, space.video.height, space.video.width]
    for st in strategies:
        key, description = st.key(), space.describe(st)
        assert Strategy.from_key(key, st.kernel) == st, key
        assert Strategy.from_description(description, st.kernel) == st, key
        assert key == space.key_of(st) == _longhand_key(st)
        assert st.describe() == _longhand_describe(st)
        wan = {k: v for k, v in description.items() if k not in ("experts", "expert_residency",
                                                                  "expert_bytes_per_device")}
        expected = _longhand_description(st, video, description.get("kernel_tile"))
        assert json.dumps(wan) == json.dumps(expected), key


def _committed_plans():
    for path in sorted((ROOT / "docs" / "data").rglob("*.json")):
        try:
            doc = json.loads(path.read_text())
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
        if isinstance(doc, dict) and "schema_version" in doc and isinstance(doc.get("strategy"), dict):
            yield path, doc


def test_committed_plans_hold_the_forms_the_strategy_writes():
    plans = list(_committed_plans())
    assert len(plans) >= 9
    suffixes = expert_key_suffixes()
    for path, doc in plans:
        stored = doc["strategy"]
        st = Strategy.from_description(stored, stored["kernel"])
        given = stored["key"]
        assert given == st.key() or given[len(st.key()) + 3:] in suffixes, path
        written = st.description(video=stored.get("video"), kernel_tile=stored.get("kernel_tile"))
        assert json.dumps({k: v for k, v in stored.items() if k in written}) == json.dumps(written), path
        keys = [a["strategy"] for a in doc.get("alternatives", [])]
        keys += [e["key"] for e in doc.get("stage1", {}).get("entries", [])]
        for key in keys:
            own = key.rsplit(" | ", 1)[0] if key.rsplit(" | ", 1)[-1] in suffixes else key
            assert Strategy.from_key(own).key() == own, (path, key)


@pytest.mark.parametrize("layout", ["columns", "heads_major; rm -rf /", 3])
def test_a_ring_layout_outside_the_known_ones_is_refused_in_a_key_and_a_description(layout):
    st = Strategy(data=2, context=4, attention="ring", weights="replicated", ring_layout="heads_major")
    description = {**st.description(), "ring_layout": layout}
    with pytest.raises(StrategyError, match="not a Wan strategy"):
        Strategy.from_description(description)
    with pytest.raises(StrategyError, match="not a strategy key"):
        Strategy.from_key(st.key().replace("heads_major", str(layout)))
