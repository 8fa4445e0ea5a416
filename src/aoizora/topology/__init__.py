"""TPU slices: chips, directed ICI and die-to-die links, wraparound, hardware profiles and routing."""

from aoizora.topology.hardware import (
    RUNTIME_TILE_16BIT,
    HardwareProfile,
    KernelWork,
    canonical_generation,
    generation_aliases,
    generation_names,
    hardware_profile,
)
from aoizora.topology.slice import (
    CORE_ICI_MODES,
    Chip,
    Coords,
    CoreIci,
    DevicePosition,
    Link,
    Topology,
    get_topology,
    parse_topology_name,
    slice_name,
)

__all__ = [
    "CORE_ICI_MODES",
    "Chip",
    "CoreIci",
    "Coords",
    "DevicePosition",
    "HardwareProfile",
    "KernelWork",
    "Link",
    "RUNTIME_TILE_16BIT",
    "Topology",
    "canonical_generation",
    "generation_aliases",
    "generation_names",
    "get_topology",
    "hardware_profile",
    "parse_topology_name",
    "slice_name",
]
