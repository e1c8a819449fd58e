"""The quotient mode (one shift unit of a fat_tree_3tier fabric simulated, :mod:`simfuse.collectives.quotient`)
and the collapse of repeated symmetric steps give the times of the step-by-step simulation of every rank."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.collectives import run_collective
from simfuse.collectives.quotient import make_quotient
from simfuse.network import Fabric
from tests.conftest import make_topology

OPS = ("all_reduce", "reduce_scatter", "all_gather", "all_to_all")
REL = 1e-9


def three_tier(npl=2, lpp=2, g=4, nics=None, oversub=1.0, spine_oversub=2.0, protocol_model="nccl", launch_us=8.4):
    return make_topology(gpus_per_node=g, nics_per_node=nics or g, fabric="fat_tree_3tier", oversub=oversub,
                         launch_us=launch_us,
                         scale_out_extra={"nodes_per_leaf": npl, "leaves_per_pod": lpp,
                                          "spine_oversubscription": spine_oversub, "hop_latency_ns": 200},
                         collectives_extra={"protocol_model": protocol_model, "net_overhead_us": 1.0})


def _against_full(topo, nodes, op, size, algorithm=None):
    """The auto run (quotient) and the full simulation of the same algorithm and protocol."""
    q = run_collective(topo, nodes, op, size, algorithm=algorithm)
    name = q.algorithm if topo.collectives.protocol_model == "none" else f"{q.algorithm}/{q.protocol}"
    f = run_collective(topo, nodes, op, size, algorithm=name, mode="full")
    return q, f


#: the all-to-all once, with the tuner's protocol (the direct all-to-all runs the protocols NCCL's p2p rule
#: allows; symmetric, not quotient): naming a protocol for it would run the same case three times
TWO_POD_CASES = [(op, alg, proto) for op, alg in (("all_reduce", "tree"), ("all_reduce", "ring"),
                                                  ("reduce_scatter", "ring"), ("all_gather", "ring"))
                 for proto in ("LL", "LL128", "Simple")] + [("all_to_all", None, None)]


@pytest.mark.parametrize("op,algorithm,protocol", TWO_POD_CASES)
def test_quotient_equals_full_two_pods(op, algorithm, protocol):
    """2 pods x 2 leaves x 2 nodes of 4 GPUs: the ranks of one pod (16 of 32) give the full simulation's time."""
    topo = three_tier()
    name = None if algorithm is None else f"{algorithm}/{protocol}"
    q, f = _against_full(topo, 8, op, 2**20, name)
    if algorithm is not None:
        assert q.mode == "quotient" and f.mode == "full"
    assert q.time_s == pytest.approx(f.time_s, rel=REL)
    assert q.injected_bytes == pytest.approx(q.delivered_bytes, rel=1e-12)
    if q.mode == "quotient":
        # one of two pods simulated; the result reports the whole collective's bytes, as the full run does
        assert q.injected_bytes == pytest.approx(f.injected_bytes, rel=1e-12)


def test_rings_take_the_max_plus_path_when_links_are_private():
    """Non-blocking leaves: a ring step's links are private, so one step is simulated (few events); with 8:1
    leaves the leaf uplinks can be filled by several senders and the quotient is simulated step by step."""
    fast = run_collective(three_tier(), 8, "reduce_scatter", 2**20, algorithm="ring/LL")
    slow_topo = three_tier(oversub=8.0)
    slow = run_collective(slow_topo, 8, "reduce_scatter", 2**20, algorithm="ring/LL")
    full = run_collective(slow_topo, 8, "reduce_scatter", 2**20, algorithm="ring/LL", mode="full")
    assert fast.mode == slow.mode == "quotient"
    assert fast.events < 20 < slow.events
    assert slow.time_s == pytest.approx(full.time_s, rel=REL)


def test_shared_nics_fall_back_and_stay_exact():
    """Two GPUs per NIC: a NIC carries two senders' flows; the quotient is simulated step by step, exactly."""
    topo = three_tier(g=4, nics=2)
    for op in ("all_gather", "all_reduce"):
        q, f = _against_full(topo, 16, op, 2**20, "ring/Simple" if op == "all_gather" else "tree/Simple")
        assert q.mode == "quotient"
        assert q.time_s == pytest.approx(f.time_s, rel=REL)


@settings(max_examples=12, deadline=None)
@given(npl=st.integers(1, 3), lpp=st.integers(1, 3), units=st.integers(2, 3), g=st.sampled_from([2, 4]),
       oversub=st.sampled_from([1.0, 2.0, 8.0]), spine=st.sampled_from([1.0, 2.0]),
       op=st.sampled_from(OPS[:3]), protocol=st.sampled_from(["LL", "LL128", "Simple"]),
       tree=st.booleans(), size=st.sampled_from([4096.0, 2.0**20, 3e6]))
def test_quotient_equals_full_property(npl, lpp, units, g, oversub, spine, op, protocol, tree, size):
    topo = three_tier(npl=npl, lpp=lpp, g=g, oversub=oversub, spine_oversub=spine)
    fab = Fabric(topo, npl * lpp * units, symmetric=False)
    nodes = fab.node_shift_unit() * units
    if nodes < 2 or (fab.n_pods == 1 and nodes % npl):
        return
    algorithm = "tree" if (tree and op == "all_reduce") else "ring"
    q, f = _against_full(topo, nodes, op, size, f"{algorithm}/{protocol}")
    assert q.mode == ("quotient" if make_quotient(topo, nodes, g) is not None else "full")
    assert q.time_s == pytest.approx(f.time_s, rel=REL)


def test_shift_representatives_are_translates():
    topo = three_tier()
    fab = Fabric(topo, 16, symmetric=False)
    rep = fab.shift_representatives(4)
    names = fab.names
    assert names[rep[names.index("leaf_up[5]")]] == "leaf_up[1]"
    assert names[rep[names.index("spine_down[3]")]] == "spine_down[0]"
    assert names[rep[names.index("nic_rx[13,2]")]] == "nic_rx[1,2]"
    assert fab.shift_representatives(3) is None  # does not divide 16 nodes
    assert np.all(rep[rep] == rep)


def test_no_quotient_where_the_shift_is_no_automorphism():
    assert make_quotient(three_tier(), 6, 4) is None  # a partly filled pod
    assert make_quotient(three_tier(npl=4), 4, 4) is None  # one leaf: the symmetric mode applies
    assert make_quotient(make_topology(fabric="rail_optimized"), 8, 8) is None


@pytest.mark.parametrize("fabric", ["rail_optimized", "fat_tree"])
@pytest.mark.parametrize("op,algorithm", [("all_reduce", "ring"), ("reduce_scatter", "ring"), ("all_gather", "ring"),
                                          ("all_reduce", "hierarchical")])
@pytest.mark.parametrize("nodes", [2, 3, 5])
@pytest.mark.parametrize("protocol", ["LL", "LL128", "Simple"])
@pytest.mark.parametrize("size", [4096.0, 3e6, 64 * 2**20])
def test_collapsed_symmetric_steps_equal_step_by_step(fabric, op, algorithm, nodes, protocol, size):
    """``record_usage`` keeps every step (the collapse is off); the collapsed run gives the same time."""
    topo = make_topology(fabric=fabric, oversub=2.0, launch_us=8.4, collectives_extra={"protocol_model": "nccl"})
    name = f"{algorithm}/{protocol}"
    fast = run_collective(topo, nodes, op, size, algorithm=name)
    slow = run_collective(topo, nodes, op, size, algorithm=name, record_usage=True)
    assert fast.mode == slow.mode == "symmetric"
    assert fast.time_s == pytest.approx(slow.time_s, rel=REL)
    assert fast.events < slow.events
    assert fast.delivered_bytes == pytest.approx(fast.injected_bytes, rel=1e-12)
    assert fast.injected_bytes == pytest.approx(slow.injected_bytes, rel=1e-12)  # skipped steps counted


@pytest.mark.parametrize("op,algorithm", [("all_reduce", "tree/LL128"), ("reduce_scatter", "ring/LL"),
                                          ("all_gather", "ring/Simple")])
def test_quotient_one_pod_shifts_by_leaves(op, algorithm):
    """One pod of 4 leaves x 2 nodes: the unit is a leaf (2 of 8 nodes simulated)."""
    topo = three_tier(npl=2, lpp=4)
    q, f = _against_full(topo, 8, op, 2**20, algorithm)
    assert q.mode == "quotient"
    assert q.time_s == pytest.approx(f.time_s, rel=REL)


def test_shipped_3tier_ring_takes_one_simulated_step(root):
    """h200_3tier_pods at 64 nodes (2 pods): the tuner's reduce-scatter ring runs in the quotient mode by the
    max-plus recursion (a handful of events, not 63 steps x 256 ranks), its all-reduce tree in the quotient."""
    from simfuse.spec import load_topology

    topo = load_topology(root / "topologies" / "h200_3tier_pods.yaml")
    rs = run_collective(topo, 64, "reduce_scatter", 64 * 2**20)
    ar = run_collective(topo, 64, "all_reduce", 64 * 2**20)
    assert rs.algorithm == "ring" and rs.mode == "quotient" and rs.events < 20
    assert ar.mode == "quotient"
    assert rs.delivered_bytes == pytest.approx(rs.injected_bytes, rel=1e-12)


@settings(max_examples=10, deadline=None)
@given(npl=st.integers(1, 3), lpp=st.integers(1, 2), units=st.integers(2, 3), op=st.sampled_from(OPS[:3]),
       tree=st.booleans(), oversub=st.sampled_from([1.0, 8.0]), size=st.integers(1, 2**21))
def test_quotient_invariants(npl, lpp, units, op, tree, oversub, size):
    """Bytes sent = bytes received = the simulated unit's share of the full simulation's (one of ``units``); each
    link of the unit carries what it carries in full simulation; no link above its capacity; the run no shorter
    than its busiest link's bytes at capacity."""
    topo = three_tier(npl=npl, lpp=lpp, oversub=oversub)
    nodes = npl * lpp * units
    name = "tree/Simple" if (tree and op == "all_reduce") else "ring/Simple"
    res, _sim, q, net = run_collective(topo, nodes, op, size, algorithm=name, record_usage=True,
                                       include_overheads=False, return_sim=True)
    full, _s, fab, fnet = run_collective(topo, nodes, op, size, algorithm=name, mode="full",
                                         include_overheads=False, return_sim=True)
    assert res.mode == "quotient" and full.mode == "full"
    assert net.delivered_bytes == pytest.approx(net.injected_bytes, rel=1e-9)
    assert net.injected_bytes == pytest.approx(fnet.injected_bytes / units, rel=1e-9)
    unit_links = [fab.names.index(nm) for nm in q.names]
    assert np.allclose(net.carried_bytes, fnet.carried_bytes[unit_links], rtol=1e-9, atol=1e-6)
    for _a, _b, loads in net.usage:
        assert np.all(loads <= q.capacities * (1 + 1e-9))
    assert res.time_s >= float(np.max(net.carried_bytes / q.capacities)) * (1 - 1e-9) - 2e-13


def test_no_collapse_while_other_flows_share_the_network():
    """A step repeats its predecessor's duration only on an idle network: with another transfer in flight, even a
    run that says it is alone simulates every step, and gives the time of one that does not say so."""
    from simfuse.collectives.algorithms import Layout, make_algorithm
    from simfuse.collectives.runner import collective_process
    from simfuse.engine import Simulation
    from simfuse.network import FlowNetwork

    topo = make_topology(fabric="rail_optimized", collectives_extra={"protocol_model": "nccl"})

    def run(alone):
        fabric = Fabric(topo, 4, symmetric=True)
        sim = Simulation(seed=0, record=False)
        net = FlowNetwork(sim, fabric.capacities, fabric.names)
        algo = make_algorithm("all_gather", "ring", Layout(4, 8), 2**22, protocol="Simple")
        g = fabric.flow_groups(0, np.array([8]), np.array([2.0**34]))[0]  # outlasts the collective, on its NIC
        net.transfer(g.links, g.size_bytes, g.latency_s, count=g.count, weights=g.weights)
        proc = sim.process(collective_process(sim, fabric, net, algo, record=False, alone=alone))
        sim.run(until=proc)
        return sim.now, sim.events

    (t_alone, ev_alone), (t_shared, ev_shared) = run(True), run(False)
    assert t_alone == pytest.approx(t_shared, rel=REL)
    assert ev_alone == ev_shared


def _shipped_against_full(root, op):
    from simfuse.spec import load_topology

    topo = load_topology(root / "topologies" / "h200_3tier_pods.yaml")
    q = run_collective(topo, 64, op, 64 * 2**20)
    f = run_collective(topo, 64, op, 64 * 2**20, algorithm=f"{q.algorithm}/{q.protocol}", mode="full")
    assert q.mode == "quotient" and f.mode == "full"
    assert q.time_s == pytest.approx(f.time_s, rel=REL)


def test_shipped_3tier_tree_equals_full(root):
    """h200_3tier_pods at 64 nodes (2 pods): the tuner's all-reduce (tree/LL128) on one pod's 256 ranks gives the
    512-rank full simulation's time (0.3 s against 0.7 s on the dev VM)."""
    _shipped_against_full(root, "all_reduce")


@pytest.mark.slow
def test_shipped_3tier_ring_equals_full(root):
    """The same for the reduce-scatter ring (ring/LL): 0.16 s against 100 s of full simulation on the dev VM."""
    _shipped_against_full(root, "reduce_scatter")
