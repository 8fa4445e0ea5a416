#!/bin/sh
# data=2,context=4 | weights=replicated | attn=ulysses | blocks=4736/2048/2048 | vmem=65536 on v6e:2x4
# MaxDiffusion github.com/AI-Hypercomputer/maxdiffusion @ 7cfb8801d41d1728f0232cd7ee59e900a151fecf: run this from its checkout.
#
# Without the plan's device order (MaxDiffusion builds its own mesh):
# LIBTPU_INIT_ARGS=--xla_tpu_scoped_vmem_limit_kib=65536 python src/maxdiffusion/generate_wan.py src/maxdiffusion/configs/base_wan_14b.yml ici_data_parallelism=2 ici_fsdp_parallelism=1 ici_context_parallelism=4 ici_tensor_parallelism=1 attention=ulysses ulysses_attention_chunks=1 'flash_block_sizes={"block_q":4736,"block_kv":2048,"block_kv_compute":2048,"block_q_dkv":4736,"block_kv_dkv":2048,"block_kv_dkv_compute":2048}' 'logical_axis_rules=[["batch",["data","fsdp"]],["activation_batch",["data","fsdp"]],["activation_self_attn_heads",["context","tensor"]],["activation_cross_attn_q_length",["context","tensor"]],["activation_length","context"],["activation_heads","tensor"],["norm","tensor"],["conv_batch",["data","context","fsdp"]],["out_channels","tensor"],["conv_out","context"]]' per_device_batch_size=0.125 height=720 width=1280 num_frames=81 num_inference_steps=50

# With it:
LIBTPU_INIT_ARGS=--xla_tpu_scoped_vmem_limit_kib=65536 python "$(dirname "$0")"/run_with_plan.py "$@"
