"""One GPU shared by kernels of several compute streams (engine.share): processor sharing, closed forms,
conservation of the device's throughput, and the executor's use of it."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.costs import KernelWork, RooflineCostModel
from simfuse.engine import Simulation, run_kernel, simulate_kernel
from simfuse.engine.share import DeviceShare
from simfuse.graph import ComputeNode, DelayNode, Graph
from simfuse.graph.executor import execute
from simfuse.system import System

from ..conftest import make_topology


def _holds(specs):
    """Run holds ``(start_s, duration_s, demand)`` on one share; their end times."""
    sim = Simulation()
    share = DeviceShare(sim.env)
    ends = [None] * len(specs)

    def one(i, t0, d, q):
        yield sim.env.timeout(t0)
        yield from share.hold(d, q)
        ends[i] = sim.now

    for i, (t0, d, q) in enumerate(specs):
        sim.process(one(i, t0, d, q))
    sim.run()
    return ends, share


def test_alone_a_hold_takes_its_duration():
    ends, share = _holds([(1e-6, 5e-6, 1.0)])
    assert ends == [6e-6]
    assert share.peak_demand == 1.0


def test_two_full_holds_side_by_side_take_as_long_as_in_turn():
    # both at half speed while together: the shorter ends at 2 x 3 us, the other 4 us later alone
    ends, _ = _holds([(0.0, 3e-6, 1.0), (0.0, 7e-6, 1.0)])
    assert ends[0] == pytest.approx(6e-6, rel=1e-12)
    assert ends[1] == pytest.approx(10e-6, rel=1e-12)


def test_holds_that_fit_together_do_not_slow_each_other():
    ends, share = _holds([(0.0, 3e-6, 0.4), (1e-6, 4e-6, 0.5)])
    assert ends == pytest.approx([3e-6, 5e-6], rel=1e-12)
    assert share.peak_demand == pytest.approx(0.9)


def test_a_late_arrival_slows_the_running_hold_from_then_on():
    # 2 us alone, then 2 us of progress at half speed (4 us), then 1 us alone for the newcomer
    ends, _ = _holds([(0.0, 4e-6, 1.0), (2e-6, 3e-6, 1.0)])
    assert ends[0] == pytest.approx(6e-6, rel=1e-12)
    assert ends[1] == pytest.approx(7e-6, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 20e-6), st.floats(1e-7, 20e-6), st.sampled_from([0.25, 0.5, 1.0])),
                min_size=1, max_size=6))
def test_throughput_is_conserved(specs):
    """Every hold ends no earlier than alone; the device never does more than one unit of demand-weighted work
    per second: the busy span >= the demand-weighted work; with full demands all holds end when the total
    work would have (work conserving: no idle time while any hold is active)."""
    ends, _ = _holds(specs)
    for (t0, d, _q), e in zip(specs, ends, strict=True):
        assert e >= t0 + d * (1 - 1e-9)
    first = min(t0 for t0, _d, _q in specs)
    assert max(ends) - first >= sum(d * q for _t, d, q in specs) * (1 - 1e-9)
    if all(q == 1.0 for _t, _d, q in specs) and all(t0 == 0.0 for t0, _d, _q in specs):
        assert max(ends) == pytest.approx(sum(d for _t, d, _q in specs), rel=1e-9)


def _cost():
    return RooflineCostModel(make_topology().device)  # 200 slots, 4 TB/s


def _two_stream_graph(works_a, works_b):
    g = Graph(1, 1)
    rg = g.program(0)
    for w in works_a:
        rg.add(ComputeNode(name="a", work=w, stream="compute"))
    for w in works_b:
        rg.add(ComputeNode(name="b", work=w, stream="compute_side"))
    return g


def test_single_stream_programs_never_meet_a_share():
    sysm = System.from_topology(make_topology())
    w = KernelWork("x", 1000, 0.0, 1e6)
    g = Graph(1, 1)
    rg = g.program(0)
    rg.add(ComputeNode(name="a", work=w))
    rg.add(ComputeNode(name="b", work=w))
    res = execute(sysm, g)
    assert not res.sim.shares
    assert res.time_s == 2 * simulate_kernel(w, sysm.cost).time_s


def test_two_streams_overlap_launch_latency_but_not_the_sms():
    """Two equal kernels on two streams: their launch latencies overlap, their waves time-share the device:
    latency + 2 x makespan (one stream: 2 x (latency + makespan)); busy time is the union, not the sum."""
    topo = make_topology(launch_us=0.0)
    sysm = System.from_topology(topo)
    w = KernelWork("x", 1000, 0.0, 1e6)
    alone = simulate_kernel(w, sysm.cost).time_s
    lat = sysm.cost.launch_latency_s(w)
    assert lat > 0
    res = execute(sysm, _two_stream_graph([w], [w]))
    assert res.sim.shares
    assert res.time_s == pytest.approx(lat + 2 * (alone - lat), rel=1e-12)
    assert res.compute_time_s == pytest.approx(res.time_s, rel=1e-12)  # the union of the two kernels' spans


def test_a_fixed_time_node_on_a_second_stream_runs_beside_the_kernels():
    """Nodes without a kernel (a measured duration, a delay) hold no part of the device."""
    sysm = System.from_topology(make_topology())
    w = KernelWork("x", 1000, 0.0, 1e6)
    alone = simulate_kernel(w, sysm.cost).time_s
    g = Graph(1, 1)
    rg = g.program(0)
    rg.add(ComputeNode(name="a", work=w))
    rg.add(ComputeNode(name="t", time_s=alone / 2, stream="compute_side"))
    rg.add(DelayNode(name="d", time_s=alone / 3, stream="compute_side"))
    res = execute(sysm, g)
    assert not res.sim.shares
    assert res.time_s == pytest.approx(alone, rel=1e-12)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 900), min_size=1, max_size=5), st.lists(st.integers(1, 900), min_size=1, max_size=5))
def test_two_streams_bounds(grid_a, grid_b):
    """Two streams of kernels: never longer than one stream with all of them (the launch latencies can only
    overlap), never shorter than all their makespans back to back (the SMs are time-shared)."""
    sysm = System.from_topology(make_topology())
    wa = [KernelWork("x", n, 0.0, 5e5) for n in grid_a]
    wb = [KernelWork("y", n, 1e8, 1e5, dtype="bf16") for n in grid_b]
    alone = [simulate_kernel(w, sysm.cost).time_s for w in wa + wb]
    lat = [sysm.cost.launch_latency_s(w) for w in wa + wb]
    two = execute(sysm, _two_stream_graph(wa, wb)).time_s
    assert two <= sum(alone) * (1 + 1e-9)
    assert two >= sum(np.subtract(alone, lat)) * (1 - 1e-9)


@pytest.mark.parametrize("per_wg", [False, True])
def test_a_kernel_beside_a_device_holding_rival_runs_at_half_speed(per_wg):
    """Aggregated and per-workgroup modes both take their waves through the share."""
    sim = Simulation()
    share = sim.enable_share(0)
    cost = _cost()
    w = KernelWork("x", 400, 0.0, 1e6)
    ends = []

    def rival():
        yield from share.hold(1.0, 1.0)  # a long kernel holding the device from t = 0

    def kern():
        ends.append((yield sim.env.process(run_kernel(sim, w, cost, per_workgroup=per_wg, launch=False))))

    sim.process(rival())
    sim.process(kern())
    sim.run()
    alone = simulate_kernel(w, cost).time_s - cost.launch_latency_s(w)
    assert ends[0] == pytest.approx(2 * alone, rel=1e-9)
