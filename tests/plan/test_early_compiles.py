"""The expert deployments compile while Stage 1 lowers, and Stage 2 takes those compiles."""

import threading
import time

import pytest

import aoizora.plan.planner as planner
import aoizora.stage2.compiling as stage2
from aoizora.plan import plan_space
from aoizora.stage2 import CompileCache, CompileWorkers
from aoizora.topology import get_topology
from aoizora.workloads import TransformerSpace
from aoizora.workloads.transformer import TransformerConfig

CFG = TransformerConfig(layers=2, dim=512, heads=8, head_dim=64, mlp=2048, seq=1024, batch=4)


class WithExpert(TransformerSpace):
    """The small transformer with a documented deployment: one of its legal strategies."""

    def expert_strategy(self, num_devices):
        return next(c.strategy for c in self.candidates(num_devices) if c.legal and c.key.startswith("data=2,"))


@pytest.mark.slow
def test_the_expert_compiles_during_stage1_and_only_once(tmp_path, monkeypatch):
    space = WithExpert(CFG)
    topo = get_topology("v5e:2x2")
    expert_key = space.key_of(space.expert_strategy(topo.num_devices))
    calls = []  # (key, placement, thread, start)
    stage1_span = []
    real_compile, real_stage1 = stage2.compile_strategy, planner.run_stage1

    def recorded_compile(space, strategy, key, topology, placement, *args, **kwargs):
        calls.append((key, placement.name, threading.current_thread().name, time.perf_counter()))
        return real_compile(space, strategy, key, topology, placement, *args, **kwargs)

    def slow_stage1(*args, **kwargs):
        t0 = time.perf_counter()
        while not calls and time.perf_counter() - t0 < 60:  # give the early compile its start
            time.sleep(0.05)
        result = real_stage1(*args, **kwargs)
        stage1_span.extend([t0, time.perf_counter()])
        return result

    monkeypatch.setattr(stage2, "compile_strategy", recorded_compile)
    monkeypatch.setattr(planner, "run_stage1", slow_stage1)
    result = plan_space(space, topo, top_k=3, verify_top=0, progress=False, use_cache=False,
                        compile_cache=CompileCache(tmp_path), executor=CompileWorkers(1))
    early = [c for c in calls if c[2].startswith("aoizora-early-compile")]
    assert [c[0] for c in early] == [expert_key]
    assert early[0][3] < stage1_span[1], "the expert's compile started before Stage 1 ended"
    # Stage 2 took that compile: the expert's program was compiled once
    assert [c for c in calls if c[0] == expert_key] == early
    assert result.stage2.compiled[0] == expert_key
    expert_outcome = next(o for o in result.outcomes if o.key == expert_key)
    assert expert_outcome.scored and not expert_outcome.compiled.from_cache
    assert result.plan.data["baselines"]["experts"][0]["strategy"] == expert_key
