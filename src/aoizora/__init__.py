"""aoizora: topology-aware auto-parallel planning of diffusion-transformer inference on TPU slices."""

from aoizora.errors import AoizoraError

__version__ = "0.1.0"

__all__ = ["AoizoraError", "__version__"]
