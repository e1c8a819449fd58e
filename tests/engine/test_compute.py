import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.costs import KernelWork, RooflineCostModel
from simfuse.engine import Simulation, run_kernel, simulate_kernel

from ..conftest import make_topology


@pytest.fixture
def cost():
    return RooflineCostModel(make_topology().device)  # 100 CUs x 2 = 200 slots, 4 TB/s, 1000 TFLOP/s bf16


def test_waves_and_memory_bound_time(cost):
    # 1000 workgroups, 200 slots -> 5 full waves; each wg moves 1 MB at 4e12/200 B/s = 50 us
    w = KernelWork("x", 1000, 0.0, 1e6)
    r = simulate_kernel(w, cost)
    assert r.waves == 5 and r.slots == 200
    assert r.time_s == pytest.approx(2e-6 + 5 * 1e6 / (4e12 / 200))


def test_total_bytes_over_bandwidth_lower_bound(cost):
    w = KernelWork("x", 777, 0.0, 3e5)
    r = simulate_kernel(w, cost)
    assert r.time_s >= w.total_bytes / 4e12


def test_compute_bound(cost):
    w = KernelWork("g", 200, 1e9, 0.0, dtype="bf16")
    r = simulate_kernel(w, cost)
    assert r.time_s == pytest.approx(2e-6 + 1e9 / (1e15 / 100 / 2))


def test_partial_wave_gets_more_bandwidth_per_wg(cost):
    w = KernelWork("x", 250, 0.0, 1e6)  # 1 full wave + 50
    r = simulate_kernel(w, cost)
    full = 1e6 / (4e12 / 200)
    assert 2e-6 + full < r.time_s < 2e-6 + 2 * full


@settings(max_examples=30, deadline=None)
@given(W=st.integers(1, 2000), b=st.floats(1e3, 1e7), f=st.floats(0, 1e9), loss=st.sampled_from([0.0, 0.125, 0.5]))
def test_aggregated_equals_per_workgroup(W, b, f, loss):
    cost = RooflineCostModel(make_topology().device)
    w = KernelWork("x", W, f, b)
    a = simulate_kernel(w, cost, occupancy_loss=loss)
    p = simulate_kernel(w, cost, per_workgroup=True, occupancy_loss=loss)
    assert a.time_s == pytest.approx(p.time_s, rel=1e-9)
    assert sorted(i for i, *_ in p.records) == list(range(W))
    # never more workgroups resident than slots
    ev = sorted([(s, 1) for _, s, _, _ in p.records] + [(e, -1) for _, _, e, _ in p.records], key=lambda x: (x[0], x[1]))
    active = np.cumsum([d for _, d in ev])
    assert active.max() <= p.slots


def test_completion_callbacks_cover_all_in_order(cost):
    sim = Simulation()
    seen = []
    w = KernelWork("x", 450, 0.0, 1e5)
    order = np.arange(450)[::-1]
    sim.process(run_kernel(sim, w, cost, order=order, on_complete=lambda idx, t: seen.extend(idx.tolist())))
    sim.run()
    assert seen == order.tolist()


def test_jitter_is_seeded(cost):
    w = KernelWork("x", 500, 0.0, 1e5)
    a = simulate_kernel(w, cost, jitter_cv=0.2, seed=3)
    b = simulate_kernel(w, cost, jitter_cv=0.2, seed=3)
    c = simulate_kernel(w, cost, jitter_cv=0.2, seed=4)
    assert a.time_s == b.time_s != c.time_s
