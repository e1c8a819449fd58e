"""The flow network's fast paths (issue 11) against plainly written references.

* :func:`max_min_rates` / :func:`progressive_fill` against progressive filling written out in the test (one
  level at a time over dicts), and against max-min fairness itself (feasible, and every group has a saturated
  link on which no group is faster);
* the plain-Python solver (progressive filling) against the vectorised one (bottleneck rounds, for large
  problems): the same allocation, within 1e-9 relative, and the vectorised one against the reference and
  max-min fairness on its own;
* the pruning of links with identical entries: duplicating links with larger capacities changes nothing;
* :class:`FlowNetwork` against a fluid simulation written out in the test (event loop over start and finish
  times, rates from the reference filling);
* the plain-Python grouping of ``Fabric.flow_groups`` against its numpy path (same groups, same order).
"""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import simfuse.network.fabrics.base as fabric_base
import simfuse.network.flows as flows
from simfuse.engine import Simulation
from simfuse.network import Fabric, FlowNetwork, max_min_rates, progressive_fill

from ..conftest import make_topology


# -- reference solver -----------------------------------------------------------------------------------------
def reference_rates(capacity, e_group, e_link, e_w, n_groups):
    """Progressive filling, plainly: all unfrozen groups rise together; the link that saturates first (smallest
    remaining capacity per unit of rising weight) freezes its groups (links within 1e-9 of it too); repeat."""
    rate = [0.0] * n_groups
    frozen = [False] * n_groups
    remaining = {lk: float(capacity[lk]) for lk in e_link}
    while True:
        rising = {}
        for g, lk, w in zip(e_group, e_link, e_w, strict=True):
            if not frozen[g]:
                rising[lk] = rising.get(lk, 0.0) + w
        shares = {lk: remaining[lk] / d for lk, d in rising.items() if d > 0}
        if not shares:
            return rate
        inc = max(min(shares.values()), 0.0)
        for g in range(n_groups):
            if not frozen[g]:
                rate[g] += inc
        for lk, d in rising.items():
            remaining[lk] = max(remaining[lk] - inc * d, 0.0)
        full = {lk for lk, s in shares.items() if s <= inc * (1 + 1e-9) + 1e-300}
        for g, lk in zip(e_group, e_link, strict=True):
            if lk in full:
                frozen[g] = True


@st.composite
def rate_problems(draw, max_groups=12, max_links=8):
    n_links = draw(st.integers(1, max_links))
    n_groups = draw(st.integers(1, max_groups))
    caps = draw(st.lists(st.floats(1e3, 1e12), min_size=n_links, max_size=n_links))
    e_group, e_link, e_w = [], [], []
    for g in range(n_groups):
        links = draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=min(4, n_links), unique=True))
        for lk in links:
            e_group.append(g)
            e_link.append(lk)
            # weights as the network makes them: whole flow counts, or counts times a class multiplicity ratio
            e_w.append(draw(st.sampled_from([1.0, 2.0, 3.0, 7.0, 16.0, 0.5, 1.75, 31.0 / 7.0])))
    order = draw(st.permutations(range(len(e_group))))
    return (np.array(caps), np.array(e_group)[order], np.array(e_link)[order], np.array(e_w)[order], n_groups)


@settings(max_examples=300, deadline=None)
@given(prob=rate_problems())
def test_rates_match_reference_and_are_max_min_fair(prob):
    caps, e_group, e_link, e_w, n = prob
    got = max_min_rates(caps, e_group, e_link, e_w, n)
    ref = reference_rates(caps.tolist(), e_group.tolist(), e_link.tolist(), e_w.tolist(), n)
    assert got.tolist() == pytest.approx(ref, rel=1e-9)
    _assert_max_min_fair(caps, e_group, e_link, e_w, n, got)


def reference_group_rates(caps, flows_in, order):
    """:func:`reference_rates` of the groups ``flows_in[i]`` (links, weights, count, ...) for ``i`` in ``order``:
    ``count`` flows, each loading its links with its unit weight."""
    e_group, e_link, e_w = [], [], []
    for a, i in enumerate(order):
        links, weights, count = flows_in[i][0], flows_in[i][1], flows_in[i][2]
        for lk, w in zip(links, weights, strict=True):
            e_group.append(a)
            e_link.append(lk)
            e_w.append(w * count)
    return reference_rates(caps, e_group, e_link, e_w, len(order))


def _assert_max_min_fair(caps, e_group, e_link, e_w, n, got):
    """Feasible, and every group has a (nearly) saturated link on which no group is faster."""
    load = np.bincount(e_link, weights=e_w * got[e_group], minlength=len(caps))
    assert np.all(load <= caps * (1 + 1e-9))
    for g in range(n):
        mine = e_link[e_group == g]
        assert any(load[lk] >= caps[lk] * (1 - 1e-6) and got[g] >= got[e_group[e_link == lk]].max() * (1 - 1e-6)
                   for lk in mine)


@settings(max_examples=300, deadline=None)
@given(prob=rate_problems(max_groups=30, max_links=12))
def test_python_and_vectorised_solvers_agree(prob):
    """Progressive filling (the Python path) and bottleneck rounds (the vectorised path) reach the same max-min
    allocation: they differ by float round-off and where two shares lie within 1e-9 of each other."""
    caps, e_group, e_link, e_w, n = prob
    fast = progressive_fill(caps.tolist(), e_group.tolist(), e_link.tolist(), e_w.tolist(), n)
    vec = flows._fill_numpy(caps, e_group, e_link, e_w, n)
    assert vec.tolist() == pytest.approx(fast, rel=2e-9)
    ref = reference_rates(caps.tolist(), e_group.tolist(), e_link.tolist(), e_w.tolist(), n)
    assert vec.tolist() == pytest.approx(ref, rel=2e-9)
    _assert_max_min_fair(caps, e_group, e_link, e_w, n, vec)


def test_bottleneck_rounds_closed_form():
    """A chain of links whose shares rise one after another: progressive filling needs one level per distinct
    rate; links that are each a local minimum stop in the same round, at their own shares (closed form)."""
    # group g alone on link g (capacity g + 1): rates 1, 2, 3, 4 -- four levels, one round
    caps = np.array([1.0, 2.0, 3.0, 4.0])
    rates = flows._fill_numpy(caps, np.arange(4), np.arange(4), np.ones(4), 4)
    assert rates.tolist() == [1.0, 2.0, 3.0, 4.0]
    # groups 0 and 1 share link 0 (capacity 2); group 1 also crosses link 1 (capacity 10) with group 2:
    # round 1 stops groups 0, 1 at 1 (link 0 is the local minimum); round 2 gives group 2 the rest of link 1: 9
    rates = flows._fill_numpy(np.array([2.0, 10.0]), np.array([0, 1, 1, 2]), np.array([0, 0, 1, 1]),
                              np.ones(4), 3)
    assert rates.tolist() == [1.0, 1.0, 9.0]


@settings(max_examples=150, deadline=None)
@given(prob=rate_problems(), data=st.data())
def test_duplicated_links_change_nothing(prob, data):
    """A copy of a link with the same entries and at least its capacity never decides a level (pruned)."""
    caps, e_group, e_link, e_w, n = prob
    n_links = len(caps)
    dup = data.draw(st.lists(st.integers(0, n_links - 1), min_size=1, max_size=n_links, unique=True))
    extra = data.draw(st.lists(st.floats(1.0, 3.0), min_size=len(dup), max_size=len(dup)))
    caps2 = np.concatenate([caps, caps[dup] * np.array(extra)])
    g2, l2, w2 = list(e_group), list(e_link), list(e_w)
    for k, lk in enumerate(dup):  # the copy carries the original's entries, in the same order
        for i in np.flatnonzero(e_link == lk):
            g2.append(e_group[i])
            l2.append(n_links + k)
            w2.append(e_w[i])
    base = progressive_fill(caps.tolist(), e_group.tolist(), e_link.tolist(), e_w.tolist(), n)
    assert progressive_fill(caps2.tolist(), g2, l2, w2, n) == base


def test_large_problems_take_the_vectorised_path(monkeypatch):
    rng = np.random.default_rng(3)
    n, n_links = 300, 40
    e_group = np.repeat(np.arange(n), 3)
    e_link = rng.integers(0, n_links, size=3 * n)
    e_w = rng.integers(1, 5, size=3 * n).astype(float)
    caps = rng.uniform(1e9, 1e11, size=n_links)
    assert len(e_link) >= flows.NUMPY_MIN_ENTRIES
    got = max_min_rates(caps, e_group, e_link, e_w, n)
    assert got.tolist() == flows._fill_numpy(caps, e_group, e_link, e_w, n).tolist()
    monkeypatch.setattr(flows, "NUMPY_MIN_ENTRIES", 10**9)
    assert max_min_rates(caps, e_group, e_link, e_w, n).tolist() == pytest.approx(got.tolist(), rel=2e-9)
    ref = reference_rates(caps.tolist(), e_group.tolist(), e_link.tolist(), e_w.tolist(), n)
    assert got.tolist() == pytest.approx(ref, rel=2e-9)
    _assert_max_min_fair(caps, e_group, e_link, e_w, n, got)


def test_zero_weight_group_gets_zero_rate():
    # a zero-weight entry rides along on a loaded link (frozen with it); alone on its link it never rises
    rates = max_min_rates(np.array([10.0]), np.array([0, 1]), np.array([0, 0]), np.array([1.0, 0.0]), 2)
    assert rates.tolist() == [10.0, 10.0]
    rates = max_min_rates(np.array([10.0, 5.0]), np.array([0, 1]), np.array([0, 1]), np.array([1.0, 0.0]), 2)
    assert rates.tolist() == [10.0, 0.0] == flows._fill_numpy(np.array([10.0, 5.0]), np.array([0, 1]),
                                                              np.array([0, 1]), np.array([1.0, 0.0]), 2).tolist()
    assert max_min_rates(np.array([10.0]), np.array([], dtype=int), np.array([], dtype=int), np.array([]),
                         2).tolist() == [0.0, 0.0]


# -- reference fluid simulation -------------------------------------------------------------------------------
def reference_finish_times(caps, flows_in):
    """flows_in: (links, weights, count, size, latency, start).  Plain fluid simulation: between events every
    active group moves at its max-min rate; a group is done when its bytes are out, then its last byte lands
    ``latency`` later.  Returns the arrival time of each group."""
    n = len(flows_in)
    rem = [f[3] for f in flows_in]
    start = [f[5] for f in flows_in]
    out = [None] * n
    active, t = set(), 0.0
    pending = sorted(range(n), key=lambda i: start[i])
    while pending or active:
        while pending and start[pending[0]] <= t:
            i = pending.pop(0)
            if flows_in[i][3] <= 0 or not flows_in[i][0]:
                out[i] = t + flows_in[i][4]
            else:
                active.add(i)
        if not active:
            if pending:
                t = start[pending[0]]
            continue
        order = sorted(active)
        rates = reference_group_rates(caps, flows_in, order)
        dt = min(rem[i] / rates[a] for a, i in enumerate(order))
        if pending:
            dt = min(dt, start[pending[0]] - t)
        t += dt
        for a, i in enumerate(order):
            rem[i] -= rates[a] * dt
            if rem[i] <= 1e-6 + 1e-9 * flows_in[i][3]:
                active.discard(i)
                out[i] = t + flows_in[i][4]
    return out


group_strategy = st.tuples(
    st.lists(st.integers(0, 5), min_size=0, max_size=3, unique=True),   # links
    st.integers(1, 8),                                                   # count
    st.sampled_from([1.0, 0.5, 2.0]),                                    # receive-side multiplicity ratio
    st.floats(0.0, 1e6),                                                 # size
    st.floats(0.0, 1e-5),                                                # latency
    st.sampled_from([0.0, 0.0, 1e-6, 2.5e-5, 1e-4]))                     # start


@settings(max_examples=120, deadline=None)
@given(caps=st.lists(st.floats(1e8, 1e11), min_size=6, max_size=6),
       groups=st.lists(group_strategy, min_size=1, max_size=14))
def test_flow_network_matches_reference_fluid_simulation(caps, groups):
    sim = Simulation(record=False)
    net = FlowNetwork(sim, caps)
    got = {}
    spec = []
    for links, count, ratio, size, lat, t0 in groups:
        # the last link of a path plays the receive side: weight count x ratio, as Fabric.flow_groups makes it
        weights = tuple(float(count) * (ratio if k == len(links) - 1 else 1.0) for k in range(len(links)))
        spec.append((links, [w / count for w in weights], count, size, lat, t0))

    def one(i, links, weights, count, size, lat, t0):
        yield sim.env.timeout(t0)
        yield net.transfer(links, size, lat, count=count, weights=weights)
        got[i] = sim.now

    for i, (links, count, ratio, size, lat, t0) in enumerate(groups):
        weights = [float(count) * (ratio if k == len(links) - 1 else 1.0) for k in range(len(links))]
        sim.process(one(i, links, weights, count, size, lat, t0))
    sim.run()
    ref = reference_finish_times(caps, spec)
    for i in range(len(groups)):
        assert got[i] == pytest.approx(ref[i], rel=1e-9, abs=1e-12)
    assert net.delivered_bytes == pytest.approx(sum(g[1] * g[3] for g in groups), rel=1e-12)
    assert net.active_groups == 0


@settings(max_examples=40, deadline=None)
@given(groups=st.lists(group_strategy, min_size=1, max_size=14))
def test_flow_network_solver_paths_agree(groups):
    """The network's results do not depend on which solver path a recomputation takes (within 1e-9: the paths'
    allocations differ by round-off)."""
    def run():
        sim = Simulation(record=False)
        net = FlowNetwork(sim, [1e9, 2e9, 5e9, 1e10, 3e10, 4e10], record_usage=True)
        got = {}

        def one(i, links, count, ratio, size, lat, t0):
            yield sim.env.timeout(t0)
            w = [float(count) * (ratio if k == len(links) - 1 else 1.0) for k in range(len(links))]
            yield net.transfer(links, size, lat, count=count, weights=w)
            got[i] = sim.now

        for i, g in enumerate(groups):
            sim.process(one(i, *g))
        sim.run()
        return got, net.carried_bytes.tolist()

    fast = run()
    old = flows.NUMPY_MIN_ENTRIES
    try:
        flows.NUMPY_MIN_ENTRIES = 0
        vec = run()
    finally:
        flows.NUMPY_MIN_ENTRIES = old
    assert vec[0].keys() == fast[0].keys()
    for i, t in fast[0].items():
        assert vec[0][i] == pytest.approx(t, rel=1e-9, abs=1e-15)
    assert vec[1] == pytest.approx(fast[1], rel=1e-9, abs=1e-6)


def test_every_entry_point_picks_the_solver_by_the_one_threshold(monkeypatch):
    """progressive_fill, max_min_rates and the network's recomputations all go through _solve: below
    NUMPY_MIN_ENTRIES the Python fill, from it on the vectorised one (the threshold lowered to 6 entries here)."""
    calls = []
    py_fill, np_fill = flows._fill, flows._fill_local  # the vectorised fill's core (the network calls it directly)
    monkeypatch.setattr(flows, "_fill", lambda *a: calls.append("python") or py_fill(*a))
    monkeypatch.setattr(flows, "_fill_local", lambda *a: calls.append("numpy") or np_fill(*a))
    monkeypatch.setattr(flows, "NUMPY_MIN_ENTRIES", 6)
    caps = np.array([1e9, 2e9, 3e9])
    for n_groups, want in ((2, "python"), (3, "numpy")):  # 2 links a group: 4 and 6 entries
        e_group = np.repeat(np.arange(n_groups), 2)
        e_link = np.array([0, 1, 1, 2, 2, 0][: 2 * n_groups])
        e_w = np.ones(2 * n_groups)
        calls.clear()
        progressive_fill(caps.tolist(), e_group.tolist(), e_link.tolist(), e_w.tolist(), n_groups)
        max_min_rates(caps, e_group, e_link, e_w, n_groups)
        assert calls == [want, want]
        calls.clear()
        sim = Simulation(record=False)
        net = FlowNetwork(sim, caps)
        for g in range(n_groups):  # all start together: one recomputation of every group, then one per finish
            net.transfer(e_link[2 * g: 2 * g + 2].tolist(), 1e6 * (g + 1))
        sim.run()
        assert calls[0] == want and set(calls[1:]) <= {"python"}  # fewer groups left: under the threshold


# -- flow groups ------------------------------------------------------------------------------------------------
@settings(max_examples=60, deadline=None)
@given(fabric=st.sampled_from(["fat_tree", "rail_optimized"]), nodes=st.integers(2, 4), data=st.data())
def test_small_flow_groups_match_numpy_grouping(fabric, nodes, data):
    topo = make_topology(fabric=fabric, gpus_per_node=4, nics_per_node=2)
    f = Fabric(topo, nodes, gpus_per_node=4, symmetric=True)
    n = f.n_ranks
    if data.draw(st.booleans()):
        raw = data.draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        f.set_rank_classes(np.unique(raw, return_inverse=True)[1].reshape(-1))
    src = data.draw(st.integers(0, n - 1))
    k = data.draw(st.integers(1, 12))
    dsts = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=k, max_size=k)))
    sizes = np.array(data.draw(st.lists(st.sampled_from([0.0, 64.0, 4096.0, 1e6]), min_size=k, max_size=k)))
    same = data.draw(st.booleans())
    fast = f.flow_groups(src, dsts, sizes, same_class=same)
    old = fabric_base._SMALL_FLOWS
    try:
        fabric_base._SMALL_FLOWS = -1
        slow = f.flow_groups(src, dsts, sizes, same_class=same)
    finally:
        fabric_base._SMALL_FLOWS = old
    assert len(fast) == len(slow)
    for a, b in zip(fast, slow, strict=True):
        assert (a.links, a.weights, a.size_bytes, a.latency_s, a.count, a.route_class) == \
               (b.links, b.weights, b.size_bytes, b.latency_s, b.count, b.route_class)
        assert a.dsts.dtype == b.dsts.dtype and a.dsts.tolist() == b.dsts.tolist()
    assert sum(g.count for g in fast) == k and not math.isnan(sum(g.size_bytes for g in fast))
