"""The flow network's re-sharing grid (``FlowNetwork(resolution_s=...)``, the run setting ``rate_resolution_ns``).

With a resolution ``r`` a flow starts at the first multiple of ``r`` at or after it was posted, rates are
re-shared only at multiples of ``r``, and a flow whose bytes run out between two of them ends at its own exact
time (its last byte lands ``latency`` later) while its bandwidth returns to the others at the next multiple.
Checked against closed forms and a grid-stepped fluid reference written out here, with every link's carried
bytes equal to what crossed it."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.engine import Simulation
from simfuse.network import FlowNetwork, flows

from .test_flow_solver import reference_group_rates


@pytest.fixture(autouse=True)
def grid_always(request, monkeypatch):
    """The grid on every problem, however small (the network's default keeps small problems exact)."""
    if "small_problems_exact" not in request.node.name:
        monkeypatch.setattr(flows, "GRID_MIN_ENTRIES", 0)


def _grid(t: float, res: float) -> float:
    return math.ceil(t / res) * res


def reference_grid_finish_times(caps, flows_in, res):
    """flows_in: (links, weights, count, size, latency, start).  A fluid simulation stepped on the grid: at each
    multiple of ``res`` the flows posted since join (one below the byte tolerance is done there) and the finished
    ones leave; between two, every active group
    moves at its max-min rate; a group whose bytes run out at ``t_f`` lands at ``max(t_f + latency, next grid
    point)``.  Empty transfers land ``latency`` after they were posted."""
    n = len(flows_in)
    rem = [float(f[3]) for f in flows_in]
    out: list = [None] * n
    admit = {}
    for i, f in enumerate(flows_in):
        if f[3] <= 0 or not f[0]:
            out[i] = f[5] + f[4]
        else:
            admit[i] = _grid(f[5], res)
    pending = sorted(admit, key=lambda i: admit[i])
    active: set = set()
    t = pending and admit[pending[0]] or 0.0
    while pending or active:
        while pending and admit[pending[0]] <= t * (1 + 1e-12):
            i = pending.pop(0)
            if flows_in[i][3] <= 1e-6 + 1e-9 * flows_in[i][3]:  # below the byte tolerance: done on joining
                out[i] = admit[i] + flows_in[i][4]
            else:
                active.add(i)
        if not active:
            if pending:
                t = admit[pending[0]]
            continue
        order = sorted(active)
        rates = reference_group_rates(caps, flows_in, order)
        t_next = _grid(t + min(rem[i] / rates[a] for a, i in enumerate(order)), res)
        if pending:
            t_next = min(t_next, admit[pending[0]])
        t_next = max(t_next, t + res * 1e-9)
        for a, i in enumerate(order):
            left = rem[i] - rates[a] * (t_next - t)
            if left <= 1e-6 + 1e-9 * flows_in[i][3]:
                active.discard(i)
                out[i] = max(t + rem[i] / rates[a] + flows_in[i][4], t_next)
            rem[i] = left
        t = t_next
    return out


def _run(caps, groups, res):
    sim = Simulation(record=False)
    net = FlowNetwork(sim, caps, resolution_s=res)
    got = {}

    def one(i, links, weights, count, size, lat, t0):
        yield sim.env.timeout(t0)
        yield net.transfer(links, size, lat, count=count, weights=[w * count for w in weights])
        got[i] = sim.now

    for i, g in enumerate(groups):
        sim.process(one(i, *g))
    sim.run()
    return got, net


def test_a_lone_flow_starts_on_the_grid_and_ends_at_its_own_time():
    cap, size, lat, res = 1e10, 12_345.0, 2e-6, 1e-6
    got, net = _run([cap], [((0,), (1.0,), 1, size, lat, 0.3e-6)], res)
    assert got[0] == pytest.approx(1e-6 + size / cap + lat, rel=1e-12)
    assert net.carried_bytes[0] == pytest.approx(size, rel=1e-12)


def test_a_finished_flows_bandwidth_returns_at_the_next_grid_point():
    """Two flows share one link from t = 0; the short one's bytes are out at 2S/C and land ``lat`` later (its
    own time), the long one runs at C/2 until the grid point after 2S/C, then alone at C."""
    cap, s, res, lat = 1e10, 1.3e4, 1e-6, 1.5e-6
    got, net = _run([cap], [((0,), (1.0,), 1, s, lat, 0.0), ((0,), (1.0,), 1, 2 * s, lat, 0.0)], res)
    t_short = 2 * s / cap
    g = _grid(t_short, res)
    assert g > t_short  # the case is off the grid
    assert got[0] == pytest.approx(t_short + lat, rel=1e-12)
    assert got[1] == pytest.approx(g + (2 * s - cap / 2 * g) / cap + lat, rel=1e-12)
    assert net.carried_bytes[0] == pytest.approx(3 * s, rel=1e-12)
    # the exact fluid model returns the bandwidth at once: 3S/C, never later than the grid's
    exact, _ = _run([cap], [((0,), (1.0,), 1, s, lat, 0.0), ((0,), (1.0,), 1, 2 * s, lat, 0.0)], 0.0)
    assert exact[1] == pytest.approx(3 * s / cap + lat, rel=1e-12)
    assert exact[1] <= got[1] <= exact[1] + res


def test_a_last_byte_lands_no_earlier_than_the_grid_point_that_sees_it_out():
    """Without latency a flow whose bytes run out between two grid points lands at the next one (the network
    learns of it there): the resolution bounds how late."""
    cap, s, res = 1e10, 1.3e4, 1e-6
    got, _net = _run([cap], [((0,), (1.0,), 1, s, 0.0, 0.0)], res)
    assert got[0] == pytest.approx(_grid(s / cap, res), rel=1e-12)
    assert s / cap < got[0] <= s / cap + res


def test_small_problems_exact():
    """Below GRID_MIN_ENTRIES path entries in flight the network re-shares at every start and finish: a lone
    flow posted off the grid starts at once."""
    cap, size, lat = 1e10, 12_345.0, 2e-6
    got, _net = _run([cap], [((0,), (1.0,), 1, size, lat, 0.3e-6)], 1e-6)
    assert got[0] == pytest.approx(0.3e-6 + size / cap + lat, rel=1e-12)


def test_a_negative_or_infinite_resolution_is_refused():
    sim = Simulation(record=False)
    for bad in (-1e-9, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="resolution_s"):
            FlowNetwork(sim, [1e9], resolution_s=bad)


group_strategy = st.tuples(
    st.lists(st.integers(0, 4), min_size=0, max_size=3, unique=True),   # links
    st.integers(1, 4),                                                   # count
    st.floats(0.0, 1e6),                                                 # size
    st.floats(0.0, 5e-6),                                                # latency
    st.floats(0.0, 3e-5))                                                # posted at


@settings(max_examples=40, deadline=None)
@given(caps=st.lists(st.floats(1e8, 1e11), min_size=5, max_size=5),
       groups=st.lists(group_strategy, min_size=1, max_size=10),
       res=st.sampled_from([1e-7, 2.5e-7, 1e-6, 4e-6]))
def test_the_network_matches_the_grid_stepped_reference(caps, groups, res):
    """Arrival times as the grid-stepped reference gives them; every link carries exactly the bytes that crossed
    it (the bytes a finished flow would have moved until the grid point are not counted); bytes delivered equal
    bytes injected; no arrival earlier than the flow's own physical lower bound."""
    spec = [(links, (1.0,) * len(links), count, size, lat, t0) for links, count, size, lat, t0 in groups]
    got, net = _run(caps, spec, res)
    ref = reference_grid_finish_times(caps, spec, res)
    for i, (links, _w, count, size, lat, t0) in enumerate(spec):
        assert got[i] == pytest.approx(ref[i], rel=1e-9, abs=1e-12)
        if size > 1e-3 and links:
            floor = _grid(t0, res) + size / min(caps[k] / count for k in links) + lat  # count flows a link
            assert got[i] >= floor * (1 - 1e-9)
    for k in range(len(caps)):
        want = sum(size * count for links, _w, count, size, _l, _t in spec if k in links)
        assert net.carried_bytes[k] == pytest.approx(want, rel=1e-9, abs=1e-3)
    assert net.delivered_bytes == pytest.approx(sum(g[2] * g[3] for g in spec), rel=1e-12)
    assert net.active_groups == 0
