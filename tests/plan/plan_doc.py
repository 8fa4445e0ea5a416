"""A small, valid plan document for v5e:2x2 (mesh data=2,tensor=2), for the plan-file checks.

Written by hand rather than planned, so the loader's checks are tested without compiling; its
numbers are arbitrary but consistent (one link load per link of the slice).
"""

from __future__ import annotations

import copy
from typing import Any

from aoizora.plan.schema import SCHEMA_VERSION

COORDS = [[[0, 0], [1, 0]], [[0, 1], [1, 1]]]


def plan_doc(num_links: int = 8) -> dict[str, Any]:
    """A fresh copy of the document (v5e:2x2 without wraparound has 8 directed links)."""
    return copy.deepcopy({
        "schema_version": SCHEMA_VERSION,
        "workload": {"name": "w", "shapes": {}},
        "topology": {"name": "v5e:2x2", "generation": "v5e", "shape": [2, 2], "wrap": [False, False],
                     "cores_per_chip": 1, "device_kinds": ["TPU v5 lite"]},
        "toolchain": {"jax": "0.10.2", "jaxlib": "0.10.2", "libtpu": "0.0.42.1"},
        "mesh": {"axis_names": ["data", "tensor"], "axis_sizes": [2, 2]},
        "strategy": {"key": "data=2,tensor=2"},
        "placement": {"name": "jax-default", "description": "JAX's order", "device_coords": COORDS},
        "prediction": {"step_seconds": 0.01, "compute_seconds": 0.008, "exposed_comm_seconds": 0.002,
                       "link_bytes": [1000.0 * i for i in range(num_links)], "timeline": []},
        "alternatives": [],
        "timings": {"total": 1.0},
    })
