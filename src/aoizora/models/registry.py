"""Models the CLI can plan by name, and the resolutions it understands."""

from __future__ import annotations

import re

from aoizora.errors import ShapeError
from aoizora.models.wan.config import WAN_I2V_14B, WAN_T2V_1_3B, WAN_T2V_14B, VideoShape, WanConfig

MODELS: dict[str, WanConfig] = {
    "wan2.1-t2v-1.3b": WAN_T2V_1_3B,
    "wan2.1-t2v-14b": WAN_T2V_14B,
    "wan2.1-i2v-14b": WAN_I2V_14B,
}

# Wan's standard sizes: 480p is 832x480, 720p is 1280x720 (width x height).
RESOLUTIONS: dict[str, tuple[int, int]] = {"480p": (832, 480), "720p": (1280, 720)}


def model_config(name: str) -> WanConfig:
    key = name.strip().lower()
    if key not in MODELS:
        raise ShapeError(f"unknown model {name!r}; choose one of: {', '.join(MODELS)}")
    return MODELS[key]


def parse_resolution(text: str) -> tuple[int, int]:
    """`480p`, `720p` or `WIDTHxHEIGHT` -> (width, height)."""
    key = text.strip().lower()
    if key in RESOLUTIONS:
        return RESOLUTIONS[key]
    m = re.fullmatch(r"([0-9]{1,6})x([0-9]{1,6})", key)
    if not m:
        raise ShapeError(f"malformed resolution {text!r}; use 480p, 720p or WIDTHxHEIGHT such as 1280x720")
    return int(m.group(1)), int(m.group(2))


def video_shape(config: WanConfig, resolution: str, frames: int) -> VideoShape:
    """The video geometry, validated against the model (frames 4n+1, sizes multiples of 16)."""
    width, height = parse_resolution(resolution)
    video = VideoShape(frames=frames, height=height, width=width)
    video.validate(config)
    return video


def wan_space(model: str, resolution: str, frames: int, **kwargs):
    """The Stage 1 strategy space of a named Wan model at a video shape."""
    from aoizora.stage1.wan_space import WanSpace

    config = model_config(model)
    return WanSpace(config, video_shape(config, resolution, frames), model_name=model.strip().lower(), **kwargs)
