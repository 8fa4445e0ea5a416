"""aoizora: topology-aware auto-parallel planning of diffusion-transformer inference on TPU slices."""

from aoizora import toolchain as _toolchain  # noqa: F401  (sets libtpu's multi-process switch early)
from aoizora.errors import AoizoraError

__version__ = "0.1.0"

__all__ = ["AoizoraError", "__version__"]
