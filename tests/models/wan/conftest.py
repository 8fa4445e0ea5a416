import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def topo_2x4():
    from aoizora.topology import get_topology

    return get_topology("v5e:2x4")
