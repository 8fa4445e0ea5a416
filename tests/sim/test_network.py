"""Max-min fair rates and the flow network, against their defining properties."""

import numpy as np
import pytest

from aoizora.sim.network import FlowNetwork, max_min_rates


@pytest.mark.parametrize("seed", range(20))
def test_progressive_filling_is_feasible_and_max_min_fair(seed):
    rng = np.random.default_rng(seed)
    n_links = int(rng.integers(3, 12))
    cap = rng.uniform(1.0, 10.0, n_links)
    routes = []
    for _ in range(int(rng.integers(1, 25))):
        k = int(rng.integers(1, min(4, n_links) + 1))
        routes.append(tuple(int(l) for l in rng.choice(n_links, size=k, replace=False)))
    rates = max_min_rates(routes, cap)
    load = np.zeros(n_links)
    for r, x in zip(routes, rates, strict=True):
        for l in r:
            load[l] += x
    assert np.all(load <= cap * (1 + 1e-9))  # feasible
    assert np.all(rates > 0)
    # max-min characterisation: every flow crosses a saturated link on which no flow is faster
    for r, x in zip(routes, rates, strict=True):
        assert any(load[l] >= cap[l] * (1 - 1e-9) and
                   all(y <= x * (1 + 1e-9) for r2, y in zip(routes, rates, strict=True) if l in r2)
                   for l in r)


def test_flows_speed_up_when_a_sharing_flow_ends():
    net = FlowNetwork(np.array([10.0, 10.0]))
    net.add(1, (0,), 10.0)  # shares link 0 with flow 2: 5 B/s each until flow 1 ends at t=2
    net.add(2, (0, 1), 30.0)  # then alone at 10 B/s for its last 20 B: ends at t=4
    t = 0.0
    finished = {}
    while len(net):
        dt = net.time_to_next_finish()
        t += dt
        for f in net.advance(dt):
            finished[f] = t
    assert finished == pytest.approx({1: 2.0, 2: 4.0})
