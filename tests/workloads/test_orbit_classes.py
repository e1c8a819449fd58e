"""Orbit classes of uneven DLRM placements (simfuse.graph.symmetry.orbit_classes) and the executor's exact class
mode: the classes against their closed form, the refusals (shared links, partial leaves), the class mode with one
rank per class against full simulation (bit for bit: the machinery itself), and the orbit classes the builder
picks against full simulation on random planned and table-wise placements."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfuse.graph.executor import execute
from simfuse.graph.symmetry import node_period, orbit_classes, shift_classes
from simfuse.spec import workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulate_dlrm
from simfuse.workloads.planner import plan_tables

from ..conftest import make_topology


def _spec(tables, batch, dim=64, placement="planned"):
    return workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": batch, "dense_features": 13,
                               "bottom_mlp": [64, dim], "top_mlp": [64, 1], "interaction": {"kind": "dot"},
                               "embedding": {"dim": dim, "placement": placement, "memory_fraction": 0.5,
                                             "optimizer_state_factor": 1.0, "dtype": "fp32",
                                             "tables": [{"rows": r, "pooling": p} for r, p in tables]}}, "<test>")


def _system(g, k=None, **kw):
    return System.from_topology(make_topology(gpus_per_node=g, nics_per_node=k or g, **kw))


def test_node_period():
    assert node_period([0, 1, 0, 1]) == 2
    assert node_period([0, 0, 0, 0]) == 1
    assert node_period([0, 0, 0, 0], unit=2) == 2
    assert node_period([0, 1, 1, 0]) == 4
    assert node_period([0, 1, 0, 1, 0, 1], unit=4) == 6  # no multiple of 4 divides 6 but 6 itself


def test_shift_classes_closed_form():
    # 4 nodes x 2 GPUs, labels repeat every 2 nodes; on every node local 0 and local 1 carry different labels
    labels = np.array([[5, 6], [7, 7], [5, 6], [7, 7]]).reshape(-1)
    cls = shift_classes(labels, 4, 2)
    # classes: (node mod 2, column of local): node 0 locals 0/1 differ, node 1 same labels but columns differ
    assert cls.tolist() == [0, 1, 2, 3, 0, 1, 2, 3]
    # equal columns merge: labels alike on both locals of every node
    labels = np.array([[1, 1], [2, 2], [3, 3]]).reshape(-1)
    assert shift_classes(labels, 3, 2).tolist() == [0, 0, 1, 1, 2, 2]
    # an even placement is one class
    assert shift_classes(np.zeros(12, dtype=int), 3, 4).tolist() == [0] * 12


def test_orbit_classes_refuse_links_shared_across_classes():
    """Two GPUs per NIC: the NIC's class links would split it between ranks that load it differently."""
    topo = make_topology(gpus_per_node=4, nics_per_node=2)
    labels = np.array([0, 1, 0, 1, 0, 0, 0, 0])  # NIC-mates 0/1 and 2/3 of node 0 differ
    assert orbit_classes(labels, topo, 2, 4) is None
    labels = np.array([0, 0, 1, 1, 2, 2, 2, 2])  # NIC-mates alike
    # columns (label on node 0, on node 1): locals 0-1 (0, 2), locals 2-3 (1, 2): two classes per node
    assert orbit_classes(labels, topo, 2, 4).tolist() == [0, 0, 1, 1, 2, 2, 3, 3]


def test_orbit_classes_on_3tier():
    """Nodes under one leaf share its uplinks, and only shifts by whole leaves (one pod) or pods map the fabric
    onto itself, which keep every node of a leaf apart: uneven placements over several leaves get no orbit
    classes; under one leaf (no uplinks) they do; partial leaves have no symmetric form at all."""
    topo = make_topology(gpus_per_node=1, nics_per_node=1, fabric="fat_tree_3tier",
                         scale_out_extra={"nodes_per_leaf": 2, "leaves_per_pod": 2, "spine_oversubscription": 1.0,
                                          "hop_latency_ns": 100.0})
    assert orbit_classes(np.array([0, 1, 0, 1]), topo, 4, 1) is None
    assert orbit_classes(np.array([0, 0, 1, 1]), topo, 4, 1) is None
    assert orbit_classes(np.array([0, 0, 1, 1, 0, 0, 1, 1]), topo, 8, 1) is None
    assert orbit_classes(np.array([0, 1]), topo, 2, 1).tolist() == [0, 1]
    assert orbit_classes(np.array([0, 0, 0]), topo, 3, 1) is None  # a partial leaf


def _singletons_equal_full(spec, system, nodes, g, mode, plan=None):
    graph = build_dlrm_graph(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode="full", plan=plan)
    full = execute(system, graph)
    graph.class_of_rank = np.arange(nodes * g)
    graph.meta["orbit_classes"] = True
    one_each = execute(system, graph)
    assert full.sim_mode == "full" and one_each.sim_mode == "classes"
    assert one_each.time_s == pytest.approx(full.time_s, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize("mode", ["baseline", "fused"])
def test_class_mode_with_one_rank_per_class_is_full_simulation(mode):
    """The exact class mode (collectives as in full simulation, relays and reductions at the receiver's stand-in)
    with every rank its own class reproduces full simulation: grid shards (fused relays of stage 2, TWRW
    reductions) and table-wise tables on 2 nodes x 4 GPUs."""
    nodes, g = 2, 4
    system = _system(g)
    spec = _spec([(1_000_000, 60), (1_500_000, 80), (4000, 8), (2000, 2), (50, 1)], batch=256 * nodes * g)
    plan = plan_tables(spec, system, nodes, g, mode)
    _singletons_equal_full(spec, system, nodes, g, mode, plan)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables=st.lists(st.tuples(st.integers(1_000, 2_000_000), st.integers(1, 100)), min_size=2, max_size=7),
       mode=st.sampled_from(["baseline", "fused"]), nodes=st.sampled_from([2, 3, 4]), g=st.sampled_from([2, 4]),
       placement=st.sampled_from(["planned", "table_wise"]))
def test_orbit_classes_agree_with_full_simulation(tables, mode, nodes, g, placement):
    """Random uneven placements (planned ones with grid and table-row-wise shards: fused relays and TWRW
    reductions): the classes the builder picks against full simulation.  Fused graphs merge a node's GPUs only
    by local shifts, baseline graphs by equal columns (bulk exchanges treat every peer alike)."""
    system = _system(g)
    spec = _spec(tables, batch=128 * nodes * g, placement=placement)
    plan = plan_tables(spec, system, nodes, g, mode) if placement == "planned" else None
    fast = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode="classes", plan=plan)
    full = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode="full", plan=plan)
    assert fast.sim_mode == "classes"
    assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)


def test_baseline_columns_with_a_ring():
    """Merged columns (two empty GPUs of one node share a class) with the data-parallel all-reduce forced to a
    ring, whose successor is the next local index (not invariant under swapping locals): still full simulation's
    time here."""
    from simfuse.collectives.tuner import Tuner

    nodes, g = 2, 4
    system = _system(g)
    spec = _spec([(1_000_000, 60), (1_500_000, 80)], batch=256 * nodes * g, placement="table_wise")
    res = {}
    for sm in ("full", "classes"):
        tuner = Tuner(system.topology, nodes, g, {"all_reduce": "ring"})
        res[sm] = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode="baseline", sim_mode=sm, tuner=tuner)
    assert res["classes"].classes < nodes * g
    assert res["classes"].iteration_time_s == pytest.approx(res["full"].iteration_time_s, rel=1e-9)
