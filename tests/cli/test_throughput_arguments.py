"""`aoizora plan --objective throughput` and `plan_wan(objective=)`: what they refuse, before any work."""

from __future__ import annotations

import pytest

from aoizora import plan_wan
from aoizora.errors import ArgumentError
from tests.cli.test_arguments import PLAN, refused

COMMAND = ("LIBTPU_INIT_ARGS= python src/maxdiffusion/generate_wan.py src/maxdiffusion/configs/base_wan_14b.yml "
           "ici_data_parallelism=1 ici_fsdp_parallelism=4")


@pytest.mark.parametrize("args, fragment", [
    (["--objective", "throughput", "--from-maxdiffusion", COMMAND], "--from-maxdiffusion"),
    (["--max-videos-per-replica", "2"], "applies to --objective throughput only"),
    (["--objective", "throughput", "--stage1-only"], "--stage1-only"),
    (["--objective", "fastest"], "--objective"),
    (["--objective", "throughput", "--max-videos-per-replica", "0"], "--max-videos-per-replica"),
])
def test_bad_throughput_options_are_refused_in_one_line(tmp_path, args, fragment):
    refused([*PLAN, *args, "--out", str(tmp_path / "p.json")], fragment)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kwargs, fragment", [
    ({"objective": "videos"}, "objective must be one of"),
    ({"objective": "throughput", "max_videos_per_replica": 0}, "max_videos_per_replica must be"),
    ({"max_videos_per_replica": 2}, "throughput only"),
    ({"objective": "throughput", "from_maxdiffusion": COMMAND}, "from_maxdiffusion"),
])
def test_plan_wan_refuses_bad_objectives_before_any_work(kwargs, fragment):
    with pytest.raises(ArgumentError, match=fragment):
        plan_wan("wan2.1-t2v-1.3b" if "from_maxdiffusion" not in kwargs else None, "v5e:2x2", "480p", 5, **kwargs)
