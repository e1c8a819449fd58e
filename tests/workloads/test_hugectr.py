"""The HugeCTR execution options of the DLRM builder (docs/hugectr_baseline.md): ``embedding.comm_dtype``,
``grad_dtype``, ``dense_allreduce``, ``schedule``, ``dense_optimizer``; multi-node table-row-wise forced plans;
the HugeCTR model files, plans and topology."""

import dataclasses
import sys

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfuse.errors import SpecError
from simfuse.graph import AllToAllVNode, CollectiveNode, ComputeNode
from simfuse.spec import load_topology, load_workload, workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulate_dlrm
from simfuse.workloads.plan_file import load_plan
from simfuse.workloads.planner import _context, enumerate_options

from ..conftest import make_topology

G, NODES = 4, 2
N_RANKS = G * NODES
DIM = 32
TABLES = [(1000, 3), (4000, 8), (2000, 2), (8000, 5), (50, 1)]
FORCED = [("t0", "table_wise", "1"), ("t1", "row_wise", "all"), ("t2", "column_wise", "2;6"),
          ("t3", "table_row_wise", "4-7"), ("t4", "data_parallel", "all")]


def _spec(tables=TABLES, batch=1024, dim=DIM, placement="planned", **kw):
    emb = {"dim": dim, "placement": placement, "optimizer_state_factor": 1.0,
           "tables": [{"rows": r, "pooling": p} for r, p in tables]}
    emb.update(kw.pop("embedding", {}))
    d = {"name": "t", "kind": "dlrm", "global_batch": batch, "dense_features": 13, "bottom_mlp": [64, dim],
         "top_mlp": [64, 1], "interaction": {"kind": "dot"}, "embedding": emb}
    d.update(kw)
    return workload_from_dict(d, "<test>")


@pytest.fixture(scope="module")
def small():
    return System.from_topology(make_topology(gpus_per_node=G, nics_per_node=G))


def _plan_csv(tmp_path, rows, name="plan.csv"):
    p = tmp_path / name
    pd.DataFrame(rows, columns=["table", "sharding", "ranks"]).to_csv(p, index=False)
    return p


def _nodes(graph, rank, kind, prefix=""):
    return [nd for nd in graph.programs[rank].nodes if isinstance(nd, kind) and nd.name.startswith(prefix)]


def _named(graph, rank, name):
    (nd,) = [x for x in graph.programs[rank].nodes if x.name == name]
    return nd


def _dense_params(spec) -> int:
    """Weights + biases of the dot-interaction model of :func:`_spec`, by hand: bottom 13-64-D, top
    (F(F-1)/2 + D)-64-1 with F = tables + 1."""
    F = len(spec.tables) + 1
    top_in = F * (F - 1) // 2 + spec.dim
    return (13 * 64 + 64) + (64 * spec.dim + spec.dim) + (top_in * 64 + 64) + (64 * 1 + 1)


# ------------------------------------------------------------------------------------------------ spec errors
@pytest.mark.parametrize("mutate,field", [
    ({"embedding": {"comm_dtype": "int8"}}, "embedding.comm_dtype"),
    ({"grad_dtype": "fp64"}, "grad_dtype"),
    ({"dense_allreduce": "bucket"}, "dense_allreduce"),
    ({"schedule": "async"}, "schedule"),
    ({"dense_optimizer": "adam"}, "dense_optimizer"),
    ({"schedule": 3}, "schedule"),
])
def test_bad_hugectr_options_name_file_and_field(mutate, field):
    with pytest.raises(SpecError) as exc:
        _spec(**mutate)
    assert exc.value.source == "<test>" and exc.value.field == field


def test_defaults_keep_the_old_meaning():
    s = _spec()
    assert (s.comm_dtype, s.grad_dtype, s.dense_allreduce, s.schedule, s.dense_optimizer) == \
        ("fp32", "fp32", "bucketed", "bulk", "none")
    assert _spec(embedding={"dtype": "fp16"}).comm_dtype == "fp16"  # follows the tables' dtype unless given
    assert _spec(embedding={"comm_dtype": "fp16"}).embedding_dtype == "fp32"


# ------------------------------------------------------------------------------------------------ bytes by formula
@pytest.mark.parametrize("comm", ["fp32", "bf16", "fp16"])
def test_all_to_all_bytes_scale_with_comm_dtype(tmp_path, small, comm):
    """Every embedding All-to-All volume (forward, backward, table-row-wise stages) is the closed-form volume
    with the comm dtype's element size; the tables' pooling kernels keep reading fp32 rows."""
    spec = _spec(embedding={"comm_dtype": comm})
    ref = _spec()
    e = {"fp32": 4, "bf16": 2, "fp16": 2}[comm]
    B, D, n, g, N = 1024, DIM, N_RANKS, G, NODES
    b = B // n
    plan = load_plan(_plan_csv(tmp_path, FORCED), spec, small, NODES, G, "baseline")
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    rgraph = build_dlrm_graph(ref, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    for r in range(n):
        cols = D * (r == 1) + D + (D // 2) * (r in (2, 6))
        rail = np.arange(n) % g == r % g
        expect = np.full(n, b * cols * e) + np.where(rail, (4 <= r) * b * D * e, 0.0)
        np.testing.assert_allclose(_named(graph, r, "a2a_fwd").send_bytes, expect)
        peers = np.arange(n) // g == r // g
        np.testing.assert_allclose(_named(graph, r, "a2a_fwd_intra").send_bytes,
                                   np.where(peers, (4 <= r) * N * b * D * e, 0.0))
        # the backward is the transpose of the forward
        np.testing.assert_allclose(_named(graph, r, "a2a_bwd").send_bytes,
                                   [_named(graph, o, "a2a_fwd").send_bytes[r] for o in range(n)])
        # pooling kernels: the same rows read (fp32) and FLOP; the pooled rows that go on the wire are written in
        # the comm dtype (B bags x the rank's All-to-All / table-row-wise columns), the data-parallel ones not
        pools = _nodes(graph, r, ComputeNode, "embedding")
        refs = _nodes(rgraph, r, ComputeNode, "embedding")
        assert pools and len(pools) == len(refs)
        saved = 0.0
        for p, q in zip(pools, refs, strict=True):
            w, v = p.work, q.work
            assert (w.num_workgroups, w.flops_per_wg) == (v.num_workgroups, v.flops_per_wg)
            if dict(w.shape)["bags"] == b:  # a data-parallel table's local pooling: its output stays local
                assert w == v
            saved += (v.bytes_per_wg - w.bytes_per_wg) * w.num_workgroups
        assert saved == pytest.approx(B * (cols + (4 <= r) * D) * (4 - e))


def test_planner_prices_the_wire_in_comm_dtype(small):
    ctx32 = _context(_spec(), small, N_RANKS, G, "baseline")
    ctx16 = _context(_spec(embedding={"comm_dtype": "fp16"}), small, N_RANKS, G, "baseline")
    for t in range(len(TABLES)):
        a = {(o.kind, o.shards): o for o in enumerate_options(ctx32, t, ("table_wise", "row_wise", "table_row_wise"))}
        h = {(o.kind, o.shards): o for o in enumerate_options(ctx16, t, ("table_wise", "row_wise", "table_row_wise"))}
        for key, o in a.items():
            assert h[key].send_inter == pytest.approx(o.send_inter / 2)
            assert h[key].send_intra == pytest.approx(o.send_intra / 2)
            assert h[key].storage == o.storage
            # the pooled rows written and their gradients read in fp16: less compute, never more
            assert h[key].comp_s < o.comp_s
    # the estimator's bytes are the builder's: pooling B bags of P lookups over D columns and its sparse update
    for c, e in ((ctx32, 4), (ctx16, 2)):
        B, P, D, R = 1024, 8.0, DIM, 5000
        n = B * P
        distinct = R * (1 - (1 - 1 / R) ** n)
        sort = 4 * n + 2 * 16 * n + 4 * n + 8 * distinct  # histogram, 2 digit passes (13 bits), run-length encode
        assert c.pool_update_bytes(B, P, D, R) == pytest.approx(
            n * (D * 4 + 8) + B * D * e + distinct * D * 4 * (2 + 2 * 1.0) + n * D * e + 8 * n + sort)


def test_fused_operator_pushes_comm_dtype(small):
    from simfuse.collectives import Layout
    from simfuse.fused.ops import EmbeddingAllToAll

    p = {"tables_per_gpu": 2, "rows": 1000, "dim": 64, "pooling": 4, "global_batch": 1024}
    a = EmbeddingAllToAll(p, Layout(NODES, G))
    h = EmbeddingAllToAll({**p, "comm_dtype": "fp16"}, Layout(NODES, G))
    assert h.collective_size_bytes() == a.collective_size_bytes() / 2 == 1024 * 2 * 64 * 2
    # pooling reads fp32 rows either way and writes its pooled rows in the payload's dtype
    wa, wh = a.work("fused"), h.work("fused")
    assert (wh.num_workgroups, wh.flops_per_wg) == (wa.num_workgroups, wa.flops_per_wg)
    assert wa.bytes_per_wg - wh.bytes_per_wg == pytest.approx(a.bags * 64 * (4 - 2))
    # the closed-form destination summary carries the payload's dtype too (the default reads wg_destinations)
    from simfuse.fused.base import FusedOp
    for op in (a, h):
        np.testing.assert_array_equal(op.destination_summary(1)[2], FusedOp.destination_summary(op, 1)[2])
    np.testing.assert_array_equal(h.wg_destinations(0)[1] * 2, a.wg_destinations(0)[1])


def test_grad_dtype_halves_every_gradient_all_reduce(tmp_path, small):
    plan = load_plan(_plan_csv(tmp_path, FORCED), _spec(), small, NODES, G, "baseline")
    sizes = {}
    for gd in ("fp32", "fp16"):
        graph = build_dlrm_graph(_spec(grad_dtype=gd), small, NODES, gpus_per_node=G, mode="baseline",
                                 sim_mode="full", plan=plan)
        sizes[gd] = [nd.size_bytes for nd in _nodes(graph, 0, CollectiveNode)]
    assert len(sizes["fp16"]) == len(sizes["fp32"]) >= 1  # the replicated table rides in the last DDP bucket
    assert sum(sizes["fp32"]) == pytest.approx(4 * (_dense_params(_spec()) + 50 * DIM))
    np.testing.assert_allclose(np.array(sizes["fp16"]) * 2, sizes["fp32"])


def test_grouped_all_reduce_is_one_call_of_every_gradient(tmp_path, small):
    """grouped: no DDP bucket, no per-table all-reduce; one all-reduce of (dense parameters + data-parallel
    table rows x dim) gradients, after the whole backward; the table's optimizer step waits for it."""
    spec = _spec(grad_dtype="fp16", dense_allreduce="grouped")
    plan = load_plan(_plan_csv(tmp_path, FORCED), spec, small, NODES, G, "baseline")
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    for r in range(N_RANKS):
        colls = _nodes(graph, r, CollectiveNode)
        assert [c.name for c in colls] == ["grouped_allreduce"]
        assert colls[0].size_bytes == 2 * (_dense_params(spec) + 50 * DIM)
        nodes = graph.programs[r].nodes
        ar = colls[0].id
        bwd = [nd.id for nd in nodes if isinstance(nd, ComputeNode) and nd.phase.endswith("_bwd")]
        assert max(bwd) < ar  # issued after the last backward kernel
        # the data-parallel table's optimizer step (after the all-reduce) and, before it, its local reduce
        assert [nd.deps for nd in nodes if nd.phase == "embedding_update" and ar in nd.deps] == [(ar,)]
        assert sum(1 for nd in nodes[:ar] if nd.phase == "embedding_update") == 1


def test_bucketed_data_parallel_table_reduces_all_reduces_then_updates(tmp_path, small):
    """bucketed (DDP-style): a data-parallel table's local gradients are scatter-added into its dense gradient
    (after the interaction backward), that gradient is all-reduced, and the table's optimizer step waits for the
    all-reduce; the bytes of the scatter-add and the step together are those of the grouped path."""
    for grad in ("fp32", "fp16"):
        spec = _spec(grad_dtype=grad)
        e = 4 if grad == "fp32" else 2
        plan = load_plan(_plan_csv(tmp_path, FORCED), spec, small, NODES, G, "baseline")
        graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
        legacy = build_dlrm_graph(dataclasses.replace(spec, dense_allreduce="bucketed_per_table"), small, NODES,
                                  gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
        last_dense = {grad: [nd for nd in legacy.programs[0].nodes if isinstance(nd, CollectiveNode)
                             and nd.name.startswith("ddp_allreduce")][-1].size_bytes}
        assert _named(legacy, 0, "dp_table_allreduce4").size_bytes == TABLES[4][0] * DIM * e
        b, P, rows = 1024 // N_RANKS, TABLES[4][1], TABLES[4][0]
        for r in range(N_RANKS):
            nodes = graph.programs[r].nodes
            # the replicated table's gradient rides in the last DDP bucket (bucketed_per_table: its own all-reduce)
            ar = [nd for nd in nodes if isinstance(nd, CollectiveNode) and nd.name.startswith("ddp_allreduce")][-1]
            (red,) = [nodes[i] for i in ar.deps[1:]]
            (upd,) = [nd for nd in nodes if ar.id in nd.deps and nd.phase == "embedding_update"]
            assert isinstance(red, ComputeNode) and red.phase == upd.phase == "embedding_update"
            assert ar.size_bytes == pytest.approx(last_dense[grad] + rows * DIM * e)
            assert red.work.bytes_per_wg * red.work.num_workgroups == pytest.approx(b * P * DIM * e)
            assert upd.work.bytes_per_wg * upd.work.num_workgroups == pytest.approx(
                rows * DIM * (4 * (2 + 2 * 1.0) + e))
            # the scatter-add follows the interaction backward (the kernel producing d(embeddings))
            inter = [nd.id for nd in nodes if isinstance(nd, ComputeNode) and nd.phase == "interaction_bwd"]
            assert red.deps and red.deps[0] == max(inter)


def test_dense_optimizer_bytes_and_dependencies(small):
    """adagrad: per parameter fp32 weight read + write, accumulator read + write, the gradient read, and the cast
    of the fp32 weights to the (bf16) dense dtype; after every gradient all-reduce."""
    for allreduce in ("bucketed", "grouped"):
        spec = _spec(grad_dtype="fp16", dense_allreduce=allreduce, dense_optimizer="adagrad", placement="table_wise")
        graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full")
        (upd,) = [nd for nd in graph.programs[0].nodes if nd.phase == "dense_update"]
        assert upd.work.bytes_per_wg * upd.work.num_workgroups == pytest.approx(_dense_params(spec) * (4 * 4 + 2 + 4 + 2))
        assert set(upd.deps) == {nd.id for nd in _nodes(graph, 0, CollectiveNode)} and upd.deps
    plain = _spec(placement="table_wise")
    assert not [nd for nd in build_dlrm_graph(plain, small, NODES, gpus_per_node=G, mode="baseline").programs[0].nodes
                if nd.phase == "dense_update"]


# ------------------------------------------------------------------------------------------------ the schedule
def test_overlap_issues_the_embedding_before_the_bottom_mlp(tmp_path, small):
    spec = _spec(schedule="overlap")
    plan = load_plan(_plan_csv(tmp_path, FORCED), spec, small, NODES, G, "baseline")
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    nodes = graph.programs[5].nodes  # a rank holding a table-row-wise shard and the row-wise shard
    order = [nd.phase for nd in nodes if isinstance(nd, ComputeNode)][:5]
    assert order == ["embedding_fwd", "embedding_fwd", "embedding_dp_fwd", "bottom_mlp_fwd", "bottom_mlp_fwd"]
    st1 = _named(graph, 5, "a2a_fwd_intra")
    (dp,) = [nd for nd in nodes if nd.phase == "embedding_dp_fwd"]
    assert dp.deps == (st1.id,)  # the model forward (intra-node reduction included) gates the rest, as in HugeCTR
    bulk = build_dlrm_graph(_spec(), small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    # the bottom MLP: its GEMMs and (dense_fusion epilogue) the last ReLU layer's mask copy
    n_bottom = len(_spec().bottom_mlp) + 1
    assert [nd.phase for nd in bulk.programs[5].nodes if isinstance(nd, ComputeNode)][:n_bottom + 2] == \
        ["bottom_mlp_fwd"] * n_bottom + ["embedding_dp_fwd", "embedding_fwd"]


def _lower_bound(res) -> float:
    """The critical rank's compute busy time, and each serial communication stream's busy time."""
    a2a = sum(t1 - t0 for lbl, t0, t1 in res.phases if lbl.startswith("a2a"))
    ar = sum(t1 - t0 for lbl, t0, t1 in res.phases if lbl.startswith("allreduce"))
    return max(res.compute_time_s, a2a, ar)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables=st.lists(st.tuples(st.integers(10, 300_000), st.integers(1, 40)), min_size=2, max_size=5),
       batch=st.sampled_from([512, 2048]), mode=st.sampled_from(["baseline", "fused"]),
       comm=st.sampled_from(["fp32", "fp16"]), allreduce=st.sampled_from(["bucketed", "grouped"]))
def test_overlap_never_slower_than_bulk_and_above_the_lower_bound(small, tables, batch, mode, comm, allreduce):
    kw = {"embedding": {"comm_dtype": comm}, "dense_allreduce": allreduce}
    bulk_spec = _spec(tables, batch=batch, **kw)
    ovl_spec = _spec(tables, batch=batch, schedule="overlap", **kw)
    from simfuse.workloads.planner import plan_tables

    plan = plan_tables(bulk_spec, small, NODES, G, mode)  # the same placement for both schedules
    bulk = simulate_dlrm(bulk_spec, small, NODES, gpus_per_node=G, mode=mode, plan=plan)
    ovl = simulate_dlrm(ovl_spec, small, NODES, gpus_per_node=G, mode=mode, plan=plan)
    assert ovl.iteration_time_s <= bulk.iteration_time_s * (1 + 1e-9)
    assert ovl.iteration_time_s >= ovl.compute_time_s * (1 - 1e-9)
    if mode == "baseline":  # bulk exchanges: each communication stream runs its nodes one after another
        assert ovl.iteration_time_s >= _lower_bound(ovl) * (1 - 1e-9)


# ------------------------------------------------------------------------------------------------ fast path == full
G3, NODES3 = 2, 3


@pytest.fixture(scope="module")
def three_nodes():
    return System.from_topology(make_topology(gpus_per_node=G3, nics_per_node=G3))


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(mode=st.sampled_from(["baseline", "fused"]), comm=st.sampled_from(["fp32", "bf16"]),
       grad=st.sampled_from(["fp32", "fp16"]), allreduce=st.sampled_from(["bucketed", "grouped"]),
       schedule=st.sampled_from(["bulk", "overlap"]), opt=st.sampled_from(["none", "adagrad"]),
       rows=st.integers(1000, 200_000), pooling=st.integers(1, 30))
def test_classes_equal_full_under_the_hugectr_options(tmp_path_factory, three_nodes, mode, comm, grad, allreduce,
                                                       schedule, opt, rows, pooling):
    """A HugeCTR-like plan on 3 nodes x 2 GPUs: a table row-sharded over two whole nodes (hierarchical), one over
    one node, a table-wise and a row-wise table on a few GPUs, a data-parallel table."""
    tables = [(rows, pooling), (5000, 4), (3000, 2), (7000, 6), (40, 1)]
    spec = _spec(tables, batch=1536, embedding={"comm_dtype": comm}, grad_dtype=grad, dense_allreduce=allreduce,
                 schedule=schedule, dense_optimizer=opt)
    rows_ = [("t0", "table_row_wise", "0-3"), ("t1", "table_row_wise", "4-5"), ("t2", "table_wise", "5"),
             ("t3", "row_wise", "1;4"), ("t4", "data_parallel", "all")]
    path = _plan_csv(tmp_path_factory.mktemp("plan"), rows_)
    plan = load_plan(path, spec, three_nodes, NODES3, G3, mode)
    fast = simulate_dlrm(spec, three_nodes, NODES3, gpus_per_node=G3, mode=mode, sim_mode="classes", plan=plan)
    full = simulate_dlrm(spec, three_nodes, NODES3, gpus_per_node=G3, mode=mode, sim_mode="full", plan=plan)
    assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=0.02)


def test_multi_node_table_row_wise_plan(tmp_path, three_nodes):
    """A table row-sharded over two whole nodes: 4 shards of rows / 4 at pooling / 4; each node reduces its
    partial inside the node and sends b x D on the rail (the one-node volumes, per holder node)."""
    spec = _spec([(8000, 8), (100, 1)], batch=1536)
    plan = load_plan(_plan_csv(tmp_path, [("t0", "table_row_wise", "0-3"), ("t1", "data_parallel", "all")]),
                     spec, three_nodes, NODES3, G3, "baseline")
    u = [x for x in plan.per_rank[2] if x.table == 0]
    assert [(x.rows, x.pooling, x.kind) for x in u] == [(2000, 2.0, "table_row_wise")]
    graph = build_dlrm_graph(spec, three_nodes, NODES3, gpus_per_node=G3, mode="baseline", sim_mode="full", plan=plan)
    b, D, n = 1536 // 6, DIM, 6
    for r in range(n):
        (st1,) = _nodes(graph, r, AllToAllVNode, "a2a_fwd_intra")
        peers = np.arange(n) // G3 == r // G3
        np.testing.assert_allclose(st1.send_bytes, np.where(peers, (r < 4) * NODES3 * b * D * 4, 0.0))
        fwd = _nodes(graph, r, AllToAllVNode, "a2a_fwd")[1]
        np.testing.assert_allclose(fwd.send_bytes, np.where(np.arange(n) % G3 == r % G3, (r < 4) * b * D * 4, 0.0))
    for bad in ("0-2", "1-4"):  # not whole nodes
        with pytest.raises(SpecError) as exc:
            load_plan(_plan_csv(tmp_path, [("t0", "table_row_wise", bad), ("t1", "data_parallel", "all")], "b.csv"),
                      spec, three_nodes, NODES3, G3, "baseline")
        assert exc.value.field == "ranks (line 2)" and "whole nodes" in exc.value.message


# ------------------------------------------------------------------------------------------------ shipped files
@pytest.mark.parametrize("name,nodes", [("hugectr_v3.0_1n", 1), ("hugectr_v3.1_1n", 1), ("hugectr_v4.0_h200_1n", 1),
                                        ("hugectr_v3.0_8n", 8), ("hugectr_v3.1_8n", 8), ("hugectr_v3.0_16n", 16),
                                        ("hugectr_v3.1_16n", 16), ("hugectr_v4.1_16n", 16)])
def test_committed_plans_load_against_the_hugectr_models(root, name, nodes):
    model = {1: "dlrm_dcnv2_mlperf_hugectr", 8: "dlrm_dcnv2_mlperf_hugectr_8n", 16: "dlrm_dcnv2_mlperf_hugectr_16n"}
    spec = load_workload(root / "models" / f"{model[nodes]}.yaml")
    topo = "h200_nvl8_ib_ndr" if "h200" in name else "h100_nvl8_ib_ndr_sharp"
    system = System.load(root / "topologies" / f"{topo}.yaml")
    plan = load_plan(root / "models" / "plans" / f"{name}.csv", spec, system, nodes, 8, "baseline")
    kinds = {t.sharding for t in plan.tables}
    assert kinds <= ({"table_row_wise", "data_parallel"} if nodes > 1 else {"table_wise", "row_wise",
                                                                             "data_parallel"})
    assert ("data_parallel" in kinds) == ("v3.0" not in name)  # DP_SHARDING_THRESHOLD from v3.1 on
    assert spec.comm_dtype == "fp16" and spec.schedule == "overlap" and spec.dense_allreduce == "grouped"


def test_plan_rows_convert_hugectr_shard_matrices(root):
    sys.path.insert(0, str(root / "experiments" / "scaling"))
    try:
        from hugectr_plans import plan_rows
    finally:
        sys.path.pop(0)
    # two nodes of 8: table 0 on node 0, table 1 on both nodes, table 2 data-parallel
    matrix = [["0", "1", "2"]] * 8 + [["1", "2"]] * 8
    rows = plan_rows(matrix, [("mp", ["0", "1"]), ("dp", ["2"])], 2)
    assert rows == [("t0", "table_row_wise", "0-7"), ("t1", "table_row_wise", "all"), ("t2", "data_parallel", "all")]
    one = [["0"], ["1", "0"], ["1"], ["1"], ["2"], ["2"], ["2"], ["2"]]
    assert plan_rows(one, [("mp", ["0", "1", "2"])], 1) == [("t0", "row_wise", "0-1"), ("t1", "row_wise", "1-3"),
                                                              ("t2", "row_wise", "4-7")]
    assert plan_rows([["0"]] + [["1"]] * 7, [("mp", ["0", "1"])], 1)[0] == ("t0", "table_wise", "0")
    with pytest.raises(SpecError):  # hierarchical plans hold tables on whole nodes
        plan_rows([["0"]] + [["1"]] * 15, [("mp", ["0", "1"])], 2)


def test_sharp_topology_is_the_h100_file_with_sharp(root):
    a = load_topology(root / "topologies" / "h100_nvl8_ib_ndr.yaml")
    b = load_topology(root / "topologies" / "h100_nvl8_ib_ndr_sharp.yaml")
    assert b.scale_out.sharp and not a.scale_out.sharp
    import dataclasses

    assert dataclasses.replace(b, name=a.name, source=a.source,
                               scale_out=dataclasses.replace(b.scale_out, sharp=False)) == a
