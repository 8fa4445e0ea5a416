"""TPU slices: chips, directed ICI links, wraparound, hardware profiles and routing."""

from aoizora.topology.hardware import HardwareProfile, canonical_generation, generation_names, hardware_profile
from aoizora.topology.slice import Chip, Coords, DevicePosition, Link, Topology, get_topology, parse_topology_name

__all__ = [
    "Chip",
    "Coords",
    "DevicePosition",
    "HardwareProfile",
    "Link",
    "Topology",
    "canonical_generation",
    "generation_names",
    "get_topology",
    "hardware_profile",
    "parse_topology_name",
]
