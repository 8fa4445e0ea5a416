"""Wan video DiT in JAX (Wan 2.1 T2V-1.3B, T2V-14B, I2V-14B; Wan 2.2 T2V-A14B and I2V-A14B with two
experts, TI2V-5B) with parallel strategies as configuration.

Its sub-packages, lowest first (each imports only from its own and those before it,
`tests/test_import_graph.py`): `transformer`, `kernels`, `text_encoder`, `vae`, `video`, `space`.

What `__all__` exports, by module (each function's own docstring is its reference):
- `transformer.config`: `WanConfig`, the presets (`PRESETS`), `VideoShape`;
- `transformer.strategy`: `Strategy` (logical sharding over `MESH_AXES`), its legality (`check_strategy`,
  `validate_strategy`, `enumerate_strategies`), `make_mesh`, `logical_rules`, `SplashBlocks`;
- `transformer.model`, `video.sampling`, `transformer.sharding`: `forward`, the jitted denoise step and its
  lowering from abstract inputs (`lower_denoise_step`, `lower_forward`), the opaque splash kernels' costs;
- `video.pipeline`: Wan 2.2's two-expert pipelines; `video.schedulers`: the flow-matching schedulers;
- `transformer.checkpoint`, `transformer.params`: diffusers weights, read and written, and the parameter tables;
- `vae.decoder`, `vae.config`, `vae.params`: the VAE's decode (Wan 2.1's and Wan 2.2's VAE), its configs
  (`WAN21_VAE`, `WAN22_VAE`) and shapes (`decode_shapes`), its diffusers weights;
- `text_encoder.encoder`, `text_encoder.config`, `text_encoder.params`: the UMT5-XXL text encoder's forward
  (`encode_text`) and the pipeline's prompt embeddings (`encode_prompts`), its config (`UMT5_XXL`) and
  shapes (`encode_shapes`), its transformers weights.
"""

from aoizora.models.wan.text_encoder.config import UMT5_XXL, WAN_TEXT_LEN, EncodeShapes, UMT5Config, encode_shapes
from aoizora.models.wan.text_encoder.encoder import (
    abstract_encode_inputs,
    encode_prompts,
    encode_text,
    wan_prompt_embeds,
)
from aoizora.models.wan.text_encoder.params import (
    init_text_params,
    load_text_config,
    load_text_params,
    text_params_from_state_dict,
)
from aoizora.models.wan.transformer.attention import KernelCost, KernelLog
from aoizora.models.wan.transformer.checkpoint import load_config, load_params, save_params
from aoizora.models.wan.transformer.config import (
    PRESETS,
    WAN22_I2V_A14B,
    WAN22_T2V_A14B,
    WAN22_TI2V_5B,
    WAN_I2V_14B,
    WAN_T2V_1_3B,
    WAN_T2V_14B,
    VideoShape,
    WanConfig,
)
from aoizora.models.wan.transformer.model import forward
from aoizora.models.wan.transformer.params import init_params, param_logical_axes, param_shapes, param_table
from aoizora.models.wan.transformer.sharding import (
    abstract_forward_inputs,
    abstract_params,
    abstract_step_inputs,
    param_shardings,
)
from aoizora.models.wan.transformer.strategy import (
    ATTENTION_VARIANTS,
    MESH_AXES,
    ULYSSES_RING_MESH_AXES,
    WEIGHT_MODES,
    SplashBlocks,
    Strategy,
    check_strategy,
    enumerate_strategies,
    logical_rules,
    make_mesh,
    validate_strategy,
)
from aoizora.models.wan.vae.config import WAN21_VAE, WAN22_VAE, DecodeShapes, WanVAEConfig, decode_shapes
from aoizora.models.wan.vae.decoder import abstract_decode_inputs, decode, decode_latents, denormalize_latents
from aoizora.models.wan.vae.params import init_vae_params, load_vae_config, load_vae_params, vae_params_from_state_dict
from aoizora.models.wan.video.pipeline import (
    WanPipelineConfig,
    load_expert_params,
    load_pipeline_config,
    make_pipeline_steps,
    sample_pipeline,
)
from aoizora.models.wan.video.sampling import (
    denoise_step,
    lower_denoise_step,
    lower_forward,
    make_denoise_step,
    make_forward,
    opaque_kernel_costs,
    sample,
)
from aoizora.models.wan.video.schedulers import EulerScheduler, UniPCScheduler

__all__ = [
    "KernelCost", "KernelLog", "load_config", "load_params", "save_params", "PRESETS", "WAN_I2V_14B",
    "WAN_T2V_1_3B", "WAN_T2V_14B", "WAN22_T2V_A14B", "WAN22_I2V_A14B", "WAN22_TI2V_5B", "VideoShape", "WanConfig",
    "WanPipelineConfig", "load_expert_params", "load_pipeline_config", "make_pipeline_steps", "sample_pipeline",
    "forward", "init_params", "param_logical_axes", "param_shapes", "param_table", "denoise_step",
    "lower_denoise_step", "lower_forward", "make_denoise_step", "make_forward", "opaque_kernel_costs", "sample",
    "EulerScheduler", "UniPCScheduler", "abstract_forward_inputs", "abstract_params", "abstract_step_inputs",
    "param_shardings", "ATTENTION_VARIANTS", "MESH_AXES", "ULYSSES_RING_MESH_AXES", "SplashBlocks", "WEIGHT_MODES",
    "Strategy", "check_strategy", "enumerate_strategies", "logical_rules", "make_mesh", "validate_strategy",
    "abstract_decode_inputs", "decode", "decode_latents", "denormalize_latents", "WAN21_VAE", "WAN22_VAE",
    "DecodeShapes", "WanVAEConfig", "decode_shapes", "init_vae_params", "load_vae_config", "load_vae_params",
    "vae_params_from_state_dict", "abstract_encode_inputs", "encode_text", "encode_prompts", "wan_prompt_embeds",
    "UMT5_XXL", "WAN_TEXT_LEN", "EncodeShapes", "UMT5Config", "encode_shapes", "init_text_params",
    "load_text_config", "load_text_params", "text_params_from_state_dict",
]
