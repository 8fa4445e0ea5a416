"""The small transformer config the Stage 1 tests share (a uniquely named module: several test
directories have a conftest, so `from conftest import ...` would depend on collection order)."""

from aoizora.workloads.transformer import TransformerConfig

SMALL = TransformerConfig(layers=3, dim=256, heads=4, head_dim=64, mlp=512, seq=256, batch=2)
