import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.engine import Simulation
from simfuse.network import FlowNetwork, max_min_rates


def _run(caps, flows, record_usage=True):
    """flows: list of (links, size, latency, start_s). Returns (sim, net, finish times)."""
    sim = Simulation(record=False)
    net = FlowNetwork(sim, caps, record_usage=record_usage)
    done = {}

    def starter(i, links, size, lat, t0):
        yield sim.env.timeout(t0)
        yield net.transfer(links, size, lat)
        done[i] = sim.now

    for i, (links, size, lat, t0) in enumerate(flows):
        sim.process(starter(i, links, size, lat, t0))
    sim.run()
    return sim, net, done


def test_single_flow_alpha_beta():
    _, _, done = _run([10e9], [([0], 1e6, 2e-6, 0.0)])
    assert done[0] == pytest.approx(2e-6 + 1e6 / 10e9, rel=1e-12)


def test_two_flows_share_fairly_then_speed_up():
    # both start at 0 on one link: 1 MB and 3 MB at 10 GB/s
    _, _, done = _run([10e9], [([0], 1e6, 0.0, 0.0), ([0], 3e6, 0.0, 0.0)])
    assert done[0] == pytest.approx(2e6 / 10e9)          # 1 MB at 5 GB/s
    assert done[1] == pytest.approx(4e6 / 10e9)          # all 4 MB through the link


def test_max_min_bottlenecks():
    # link0 cap 10 carries A,B; link1 cap 2 carries B only -> B=2, A=8
    rates = max_min_rates(np.array([10.0, 2.0]), np.array([0, 1, 1]), np.array([0, 0, 1]), np.ones(3), 2)
    assert rates == pytest.approx([8.0, 2.0])


def test_weighted_groups():
    # a group of 4 flows (weight 4) and 1 single flow on a 10 B/s link: each flow 2 B/s
    rates = max_min_rates(np.array([10.0]), np.array([0, 1]), np.array([0, 0]), np.array([4.0, 1.0]), 2)
    assert rates == pytest.approx([2.0, 2.0])


def test_zero_size_and_local_flows_complete_after_latency():
    _, _, done = _run([1e9], [([], 1e6, 1e-6, 0.0), ([0], 0.0, 3e-6, 0.0)])
    assert done[0] == pytest.approx(1e-6) and done[1] == pytest.approx(3e-6)


@pytest.mark.parametrize("gate_s, expect_s", [
    (None, 2e-6 + 1e6 / 10e9),          # no gate: drain plus latency
    (300e-6, 300e-6),                   # a gate after the drain (100 us) holds the completion to it
    (1e-6, 2e-6 + 1e6 / 10e9),          # a gate before the drain changes nothing
])
def test_not_before_gates_completion(gate_s, expect_s):
    """``not_before_s`` (a post gate, simfuse.collectives.posting): completion at max(drain + latency, gate), also
    for an empty transfer; the gated group's bytes still move at their share (a second flow is unaffected)."""
    sim = Simulation(record=False)
    net = FlowNetwork(sim, [10e9])
    done = {}

    def go(i, links, size, gate):
        yield net.transfer(links, size, 2e-6, not_before_s=gate)
        done[i] = sim.now

    sim.process(go(0, [0], 1e6, gate_s))
    sim.process(go(1, [], 0.0, gate_s))
    sim.run()
    assert done[0] == pytest.approx(expect_s, rel=1e-12)
    assert done[1] == pytest.approx(max(2e-6, gate_s or 0.0), rel=1e-12)
    assert net.delivered_bytes == pytest.approx(1e6)


def test_rejects_bad_input():
    sim = Simulation()
    with pytest.raises(ValueError):
        FlowNetwork(sim, [0.0])
    net = FlowNetwork(sim, [1.0])
    with pytest.raises(ValueError):
        net.transfer([0], -1.0)


flows_strategy = st.lists(
    st.tuples(st.lists(st.integers(0, 4), min_size=1, max_size=3, unique=True),
              st.floats(1.0, 1e6), st.floats(0.0, 1e-5), st.floats(0.0, 1e-4)),
    min_size=1, max_size=12)


#: the network completes a flow whose remaining time is below 1e-13 s + 1e-12 x now (flows.py, ``t_tol``: the
#: clock's float round-off): bounds hold up to that absolute slack
T_TOL = 2e-13


@settings(max_examples=60, deadline=None)
@given(caps=st.lists(st.floats(1e6, 1e10), min_size=5, max_size=5), flows=flows_strategy)
def test_invariants_random_networks(caps, flows):
    sim, net, done = _run(caps, flows)
    # every byte sent is received
    assert net.delivered_bytes == pytest.approx(net.injected_bytes, rel=1e-9)
    assert net.delivered_bytes == pytest.approx(sum(f[1] for f in flows), rel=1e-9)
    # no link above its capacity at any moment
    for _t0, _t1, loads in net.usage:
        assert np.all(loads <= np.asarray(caps) * (1 + 1e-9))
    # per-link carried bytes match what the flows put on it
    expect = np.zeros(5)
    for links, size, _lat, _t in flows:
        for link in links:
            expect[link] += size
    assert net.carried_bytes == pytest.approx(expect, rel=1e-6, abs=1e-3)
    # each flow takes at least latency + size / (slowest link on its path)
    for i, (links, size, lat, t0) in enumerate(flows):
        assert done[i] - t0 >= (lat + size / min(caps[k] for k in links)) * (1 - 1e-9) - T_TOL
    # the whole run is at least the busiest link's bytes over its capacity
    assert sim.now >= max(expect[k] / caps[k] for k in range(5)) * (1 - 1e-9) - T_TOL


@settings(max_examples=5, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_vectorised_rate_path_equals_the_list_path(seed):
    """Rate problems of NUMPY_MIN_ENTRIES entries or more are gathered from flat per-bundle arrays and solved by
    bottleneck rounds (``_compute_rates_numpy``); forcing every problem through the list path (progressive
    filling) gives the same finish times and carried bytes, within 1e-9 (the two solvers' round-off)."""
    import simfuse.network.flows as flows

    rng = np.random.default_rng(seed)
    caps = list(rng.uniform(1e9, 5e9, 40))
    fl = [(list(rng.choice(40, size=int(rng.integers(2, 5)), replace=False)), float(rng.uniform(1e5, 1e7)),
           float(rng.uniform(0, 1e-6)), float(rng.uniform(0, 1e-4))) for _ in range(300)]
    _, net_a, a = _run(caps, fl, record_usage=False)
    old = flows.NUMPY_MIN_ENTRIES
    try:
        flows.NUMPY_MIN_ENTRIES = 10**9  # the list path only (the solver itself then runs in plain Python)
        _, net_b, b = _run(caps, fl, record_usage=False)
    finally:
        flows.NUMPY_MIN_ENTRIES = old
    assert a.keys() == b.keys()
    for i, t in a.items():
        assert b[i] == pytest.approx(t, rel=1e-9)
    assert net_b.carried_bytes == pytest.approx(net_a.carried_bytes, rel=1e-9)
