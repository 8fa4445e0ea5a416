"""A checkpoint whose header lies about its data is refused from the header, naming the tensor (and,
in a pipeline folder, the expert): float32 bytes labelled int32 have the right size and shape and
would load as garbage weights."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
from safetensors.numpy import save_file
from wan_testutil import TINY_T2V

from aoizora.errors import CheckpointError
from aoizora.models.wan.transformer.checkpoint import load_params, save_params, validate_checkpoint
from aoizora.models.wan.transformer.params import init_params

NAME = "blocks.0.attn1.to_q.weight"


def _relabel(path: Path, name: str, dtype: str) -> None:
    """Change one tensor's dtype label in the header, leaving its bytes (same size) as they are."""
    raw = path.read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    header[name]["dtype"] = dtype
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (n - len(text)) if len(text) <= n else b""
    assert len(text) == n, "the relabelled header must keep its length"
    path.write_bytes(raw[:8] + text + raw[8 + n:])


@pytest.fixture()
def ckpt(tmp_path):
    path = tmp_path / "diffusion_pytorch_model.safetensors"
    save_params(init_params(TINY_T2V, seed=0), TINY_T2V, path)
    return path


@pytest.mark.parametrize("label", ["I32", "U8", "BOOL", "I64", "F8_E4M3"])
def test_a_weight_labelled_as_another_kind_is_refused_naming_it(ckpt, label):
    _relabel(ckpt, NAME, label)
    with pytest.raises(CheckpointError, match=rf"{NAME.replace('.', r'[.]')} is stored as {label}"):
        validate_checkpoint(ckpt, TINY_T2V)
    with pytest.raises(CheckpointError, match=f"stored as {label}"):
        load_params(ckpt, TINY_T2V)


def test_a_boolean_weight_of_the_right_shape_is_refused(tmp_path):
    path = tmp_path / "w.safetensors"
    save_params(init_params(TINY_T2V, seed=0), TINY_T2V, path)
    from safetensors.numpy import load_file

    tensors = load_file(str(path))
    tensors[NAME] = np.ones(tensors[NAME].shape, np.bool_)
    save_file(tensors, str(path))
    with pytest.raises(CheckpointError, match=rf"{NAME.replace('.', r'[.]')} is stored as BOOL"):
        load_params(path, TINY_T2V)


@pytest.mark.parametrize("label", ["F32", "BF16", "F16"])
def test_floating_weights_load_whatever_their_width(tmp_path, label):
    import ml_dtypes
    from safetensors.numpy import load_file

    path = tmp_path / "w.safetensors"
    save_params(init_params(TINY_T2V, seed=0), TINY_T2V, path)
    tensors = load_file(str(path))
    kind = {"F32": np.float32, "BF16": ml_dtypes.bfloat16, "F16": np.float16}[label]
    tensors = {k: v.astype(kind) for k, v in tensors.items()}
    save_file(tensors, str(path))
    assert load_params(path, TINY_T2V)["blocks"]["attn1"]["q"]["w"].dtype == jnp.float32


def test_the_expert_is_named_in_a_pipeline_folder(tmp_path):
    from test_wan22_pipeline import MODEL_INDEX, _write_expert

    from aoizora.models.wan.video.pipeline import load_expert_params, load_pipeline_config

    (tmp_path / "model_index.json").write_text(json.dumps(MODEL_INDEX))
    _write_expert(tmp_path / "transformer", init_params(TINY_T2V, seed=1))
    _write_expert(tmp_path / "transformer_2", init_params(TINY_T2V, seed=2))
    _relabel(tmp_path / "transformer_2" / "diffusion_pytorch_model.safetensors", NAME, "I32")
    pipe = load_pipeline_config(tmp_path, dtype=jnp.float32)
    with pytest.raises(CheckpointError, match=rf"low-noise expert transformer_2/: tensor {NAME.replace('.', r'[.]')} "
                                              "is stored as I32"):
        load_expert_params(tmp_path, pipe)
