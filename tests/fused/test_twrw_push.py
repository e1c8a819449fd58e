"""Hierarchical fused push of table-row-wise shards (TwrwEmbeddingPush, PushKernel relay; DLRM fused mode)."""

from collections import defaultdict

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfuse.errors import SpecError
from simfuse.fused import base, ops, push_kernel, twrw
from simfuse.fused.knobs import FusedKnobs, parse_execution
from simfuse.graph import AllToAllVNode, FusedNode
from simfuse.spec import workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulate_dlrm
from simfuse.workloads.plan_file import load_plan
from simfuse.workloads.planner import plan_tables

from ..conftest import make_topology

G, NODES, D, EB, BATCH = 4, 2, 32, 4, 2048
N_RANKS = G * NODES
B_RANK = BATCH // N_RANKS
MIXED = [("t0", "table_wise", "1"), ("t1", "row_wise", "all"), ("t2", "table_row_wise", "4-7"),
         ("t3", "data_parallel", "all")]
MIXED_TABLES = [(1000, 3), (4000, 8), (8000, 5), (50, 1)]
TWRW_ONLY = [("t0", "table_row_wise", "0-3"), ("t1", "table_row_wise", "4-7")]


def _spec(tables, batch=BATCH):
    return workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": batch, "dense_features": 13,
                               "bottom_mlp": [64, D], "top_mlp": [64, 1], "interaction": {"kind": "dot"},
                               "embedding": {"dim": D, "placement": "planned", "memory_fraction": 0.5,
                                             "optimizer_state_factor": 1.0,
                                             "tables": [{"rows": r, "pooling": p} for r, p in tables]}}, "<test>")


def _system(**kw):
    return System.from_topology(make_topology(gpus_per_node=G, nics_per_node=G, **kw))


@pytest.fixture(scope="module")
def small():
    return _system()


def _plan(tmp_path, rows, spec, system, mode):
    p = tmp_path / f"plan_{mode}_{len(rows)}.csv"
    pd.DataFrame(rows, columns=["table", "sharding", "ranks"]).to_csv(p, index=False)
    return load_plan(p, spec, system, NODES, G, mode)


def _node(graph, rank, name):
    return next(nd for nd in graph.programs[rank].nodes if nd.name == name)


@pytest.fixture
def spy(monkeypatch):
    """Bytes started and landed per (tag, src, dst) by every GPU-initiated put."""
    log = {"sent": defaultdict(float), "recv": defaultdict(float)}
    real = base.start_puts

    def wrapped(net, fabric, gi, src, dsts, sizes, tag, messages=None):
        out = real(net, fabric, gi, src, dsts, sizes, tag, messages)
        for grp, ev in out:
            for d in np.asarray(grp.dsts).tolist():
                key = (tag, int(src), int(d))
                log["sent"][key] += grp.size_bytes
                ev.callbacks.append(lambda _e, key=key, s=grp.size_bytes: log["recv"].__setitem__(
                    key, log["recv"][key] + s))
        return out

    monkeypatch.setattr(base, "start_puts", wrapped)
    for mod in (ops, push_kernel, twrw):  # every module whose operators put
        monkeypatch.setattr(mod, "start_puts", wrapped)
    return log


def _per_pair(log, which, tag):
    m = np.zeros((N_RANKS, N_RANKS))
    for (t, s, d), v in log[which].items():
        if t == tag:
            m[s, d] += v
    return m


def test_stage_bytes_match_the_bulk_path(tmp_path, small, spy):
    spec = _spec(MIXED_TABLES)
    plan = _plan(tmp_path, MIXED, spec, small, "fused")
    simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode="fused", sim_mode="full", plan=plan)
    bulk = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="fused", sim_mode="full", plan=plan,
                            knobs=FusedKnobs(twrw_push="bulk"))
    base_g = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    ranks = np.arange(N_RANKS)
    holder = ranks >= 4                      # t2 is table-row-wise on node 1
    for tag in ("embedding_twrw_push", "embedding_twrw_push:rail", "a2a_bwd_fused", "a2a_bwd_fused:relay"):
        np.testing.assert_allclose(_per_pair(spy, "recv", tag), _per_pair(spy, "sent", tag))  # all landed
    st1 = _per_pair(spy, "sent", "embedding_twrw_push")
    st2 = _per_pair(spy, "sent", "embedding_twrw_push:rail")
    relay = _per_pair(spy, "sent", "a2a_bwd_fused:relay")
    bwd = _per_pair(spy, "sent", "a2a_bwd_fused")
    for r in range(N_RANKS):
        peers = (ranks // G == r // G) & (ranks != r)
        rail = (ranks % G == r % G) & (ranks != r)
        # stage 1: N * b * D per local peer of a holder (closed form), the bulk path's a2a_fwd_intra
        expect1 = np.where(peers & holder[r], NODES * B_RANK * D * EB, 0.0)
        np.testing.assert_allclose(st1[r], expect1)
        np.testing.assert_allclose(st1[r], np.where(ranks != r, _node(bulk, r, "a2a_fwd_intra").send_bytes, 0))
        # stage 2: b * D per rail peer, the bulk path's a2a_fwd_rail
        np.testing.assert_allclose(st2[r], np.where(rail & holder[r], B_RANK * D * EB, 0.0))
        np.testing.assert_allclose(st2[r], np.where(ranks != r, _node(bulk, r, "a2a_fwd_rail").send_bytes, 0))
        # backward: the rail push carries the baseline's a2a_bwd volumes; the relay is the bulk a2a_bwd_intra
        np.testing.assert_allclose(bwd[r], np.where(ranks != r, _node(base_g, r, "a2a_bwd").send_bytes, 0))
        np.testing.assert_allclose(relay[r], np.where(ranks != r, _node(bulk, r, "a2a_bwd_intra").send_bytes, 0))
        np.testing.assert_allclose(relay[r], np.where(peers & holder[r], NODES * B_RANK * D * EB, 0.0))
    # per stage, the world receives what it sent (closed form totals)
    assert st1.sum() == pytest.approx(G * (G - 1) * NODES * B_RANK * D * EB)
    assert st2.sum() == pytest.approx(G * (NODES - 1) * B_RANK * D * EB)


def test_fused_twrw_between_the_ideal_network_and_the_bulk_path(tmp_path):
    # uncongested (one table per node, full-bisection fat tree); the bulk exchanges pay NCCL's launch and
    # completion signalling of topologies/h200_nvl8_ib_ndr.yaml (5 us, 2 us), the pushes their GPU-initiated costs
    system = _system(launch_us=5.0, sync_us=2.0)
    spec = _spec([(8000, 5), (6000, 7)])
    plan = _plan(tmp_path, TWRW_ONLY, spec, system, "fused")
    kw = {"gpus_per_node": G, "mode": "fused", "sim_mode": "full", "plan": plan}
    hier = simulate_dlrm(spec, system, NODES, **kw).iteration_time_s
    bulk = simulate_dlrm(spec, system, NODES, knobs=FusedKnobs(twrw_push="bulk"), **kw).iteration_time_s
    assert hier <= bulk
    # physical lower bounds: the same graph on a network without latency and with 1e4 x the bandwidth (compute
    # and kernel overheads only), and each rank's off-node bytes (fwd stage 2 + bwd rail) at its NIC's rate
    ideal_sys = _system(nvl_gbps=4.5e6, nvl_lat_us=0.0, nic_gbit=4e6, nic_lat_us=0.0,
                        gpu_initiated={"put_issue_us": 0, "store_issue_us": 0, "nic_proxy_latency_us": 0,
                                       "flag_latency_us": 0})
    ideal = simulate_dlrm(spec, ideal_sys, NODES, **{**kw, "plan": _plan(tmp_path, TWRW_ONLY, spec, ideal_sys,
                                                                           "fused")}).iteration_time_s
    nic_bytes = 2 * (NODES - 1) * B_RANK * D * EB   # one table per node: receive fwd, send bwd
    assert hier >= max(ideal, nic_bytes / (400e9 / 8))
    assert ideal < hier


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables=st.lists(st.tuples(st.integers(10, 400_000), st.integers(1, 40)), min_size=2, max_size=5))
def test_classes_fast_path_equals_full_with_the_baseline_plan(small, tables):
    spec = _spec(tables)
    plan = plan_tables(spec, small, NODES, G, "baseline")  # the plan with table-row-wise shards fused mode also tries
    fast = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode="fused", sim_mode="classes", plan=plan)
    full = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode="fused", sim_mode="full", plan=plan)
    assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=0.02)


def test_forced_twrw_plans_classes_equal_full(tmp_path, small):
    for rows, tables in ((MIXED, MIXED_TABLES), (TWRW_ONLY, [(8000, 5), (6000, 7)])):
        spec = _spec(tables)
        plan = _plan(tmp_path, rows, spec, small, "fused")
        fast = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode="fused", sim_mode="classes", plan=plan)
        full = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode="fused", sim_mode="full", plan=plan)
        assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=0.02)


def test_knob_selects_the_graph(tmp_path, small):
    spec = _spec(MIXED_TABLES)
    plan = _plan(tmp_path, MIXED, spec, small, "fused")
    assert parse_execution({"twrw_push": "bulk"}).knobs.twrw_push == "bulk"
    with pytest.raises(SpecError) as exc:
        parse_execution({"twrw_push": "sideways"}, source="--set")
    assert exc.value.field == "twrw_push"
    for knob, fused_names, bulk_names in (("hierarchical", {"embedding_twrw_fused", "a2a_bwd_twrw"}, set()),
                                          ("bulk", set(), {"a2a_fwd_intra", "a2a_fwd_rail", "a2a_bwd_rail"})):
        g = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="fused", sim_mode="full", plan=plan,
                             knobs=FusedKnobs(twrw_push=knob))
        names = {nd.name for nd in g.programs[5].nodes}
        assert fused_names <= names and not (bulk_names & names if knob == "hierarchical" else fused_names & names)
        assert any(isinstance(nd, FusedNode) for nd in g.programs[5].nodes)
        if knob == "hierarchical":
            assert not any(isinstance(nd, AllToAllVNode) and "intra" in nd.name for nd in g.programs[5].nodes)


def test_bad_shard_counts_are_refused():
    from simfuse.collectives import Layout

    with pytest.raises(SpecError) as exc:
        ops.TwrwEmbeddingPush(None, Layout(2, 2), [1, 0, 0, 0], 0, 64, 4, 8, 4)
    assert exc.value.field == "tables"
    with pytest.raises(SpecError) as exc:
        ops.TwrwEmbeddingPush(None, Layout(2, 2), [1, 1, 0, 0], 0, 64, 3, 8, 4)
    assert exc.value.field == "bags"


def test_grid_stage_bytes_match_their_formulas(tmp_path, small, spy):
    """A grid table (column shard 0 on node 0, shard 1 on node 1: D / 2 columns each) next to a table-row-wise
    table on node 1: the hierarchical push moves, per holder, its columns held ``w`` (node 0: D / 2; node 1:
    D / 2 + D): stage 1 ``N b w`` to each local peer, stage 2 ``b w`` to each rail peer; everything lands, and the
    backward relay and rail push carry the bulk path's volumes."""
    spec = _spec([(4000, 8), (8000, 5), (1000, 3), (50, 1)])
    rows = [("t0", "grid", "0-3;4-7"), ("t1", "table_row_wise", "4-7"), ("t2", "table_wise", "1"),
            ("t3", "data_parallel", "all")]
    plan = _plan(tmp_path, rows, spec, small, "fused")
    simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode="fused", sim_mode="full", plan=plan)
    bulk = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="fused", sim_mode="full", plan=plan,
                            knobs=FusedKnobs(twrw_push="bulk"))
    base_g = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    ranks = np.arange(N_RANKS)
    w = np.where(ranks >= 4, D // 2 + D, D // 2)
    for tag in ("embedding_twrw_push", "embedding_twrw_push:rail", "a2a_bwd_fused", "a2a_bwd_fused:relay"):
        np.testing.assert_allclose(_per_pair(spy, "recv", tag), _per_pair(spy, "sent", tag))  # all landed
    st1 = _per_pair(spy, "sent", "embedding_twrw_push")
    st2 = _per_pair(spy, "sent", "embedding_twrw_push:rail")
    relay = _per_pair(spy, "sent", "a2a_bwd_fused:relay")
    bwd = _per_pair(spy, "sent", "a2a_bwd_fused")
    for r in range(N_RANKS):
        peers = (ranks // G == r // G) & (ranks != r)
        rail = (ranks % G == r % G) & (ranks != r)
        np.testing.assert_allclose(st1[r], np.where(peers, NODES * B_RANK * w[r] * EB, 0.0))
        np.testing.assert_allclose(st1[r], np.where(ranks != r, _node(bulk, r, "a2a_fwd_intra").send_bytes, 0))
        np.testing.assert_allclose(st2[r], np.where(rail, B_RANK * w[r] * EB, 0.0))
        np.testing.assert_allclose(st2[r], np.where(ranks != r, _node(bulk, r, "a2a_fwd_rail").send_bytes, 0))
        np.testing.assert_allclose(bwd[r], np.where(ranks != r, _node(base_g, r, "a2a_bwd").send_bytes, 0))
        np.testing.assert_allclose(relay[r], np.where(ranks != r, _node(bulk, r, "a2a_bwd_intra").send_bytes, 0))
    # every bag owner gets, over the rails, its bags' rows of the columns held off its node: t0's other column
    # block and, on node 0, all of t1 (its own node's share stays there)
    np.testing.assert_allclose(st2.sum(axis=0), np.where(ranks >= 4, D // 2, D // 2 + D) * B_RANK * EB)
