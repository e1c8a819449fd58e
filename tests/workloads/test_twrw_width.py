"""Each rank's hierarchical kernel pools at the width of the shards that rank holds (the gcd of its own
table-row-wise and grid widths), not at the narrowest width anywhere in the plan: a node holding only a
full-width table-row-wise table runs the same kernel whatever other nodes hold.  The volumes stay the columns
each rank holds (stage 1 ``N b w e`` to each local peer, the rail ``b w e``), and the fused operator refuses a
width that differs between the GPUs of one node."""

import numpy as np
import pandas as pd
import pytest

from simfuse.collectives import Layout
from simfuse.errors import SpecError
from simfuse.fused.twrw import TwrwEmbeddingPush
from simfuse.graph import FusedNode
from simfuse.spec import workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulate_dlrm
from simfuse.workloads.plan_file import load_plan

from ..conftest import make_topology

G, NODES, D, EB, B = 4, 3, 64, 4, 1536
TABLES = [(1000, 3), (4000, 8), (8000, 5), (50, 1)]
#: t1 grid (2 column blocks of 32) on nodes 1 and 2; t2 table-row-wise (all 64 columns) on node 0
ROWS = [("t0", "table_wise", "1"), ("t1", "grid", "4-7;8-11"), ("t2", "table_row_wise", "0-3"),
        ("t3", "data_parallel", "all")]
#: the same without the grid table: t1 table-wise
ROWS_NO_GRID = [("t0", "table_wise", "1"), ("t1", "table_wise", "5"), ("t2", "table_row_wise", "0-3"),
                ("t3", "data_parallel", "all")]


def _spec():
    return workload_from_dict({"name": "w", "kind": "dlrm", "global_batch": B, "dense_features": 13,
                               "bottom_mlp": [64, D], "top_mlp": [64, 1], "interaction": {"kind": "dot"},
                               "embedding": {"dim": D, "placement": "planned", "memory_fraction": 0.5,
                                             "tables": [{"rows": r, "pooling": p} for r, p in TABLES]}}, "<test>")


@pytest.fixture(scope="module")
def system():
    return System.from_topology(make_topology(gpus_per_node=G, nics_per_node=G))


def _graph(tmp_path, system, rows, mode, name):
    p = tmp_path / f"{name}.csv"
    pd.DataFrame(rows, columns=["table", "sharding", "ranks"]).to_csv(p, index=False)
    plan = load_plan(p, _spec(), system, NODES, G, mode)
    return plan, build_dlrm_graph(_spec(), system, NODES, gpus_per_node=G, mode=mode, sim_mode="full", plan=plan)


def _node(graph, rank, name):
    return next(nd for nd in graph.programs[rank].nodes if nd.name == name)


def test_baseline_kernel_pools_at_the_ranks_own_width(tmp_path, system):
    _plan, graph = _graph(tmp_path, system, ROWS, "baseline", "a")
    _plan2, alone = _graph(tmp_path, system, ROWS_NO_GRID, "baseline", "b")
    P2, P1 = TABLES[2][1], TABLES[1][1]
    for r in range(G):  # node 0: t2 alone, 64 columns: one table of 64, as without the grid elsewhere
        pool = graph.programs[r].nodes[_node(graph, r, "a2a_fwd_intra").deps[0]].work
        assert dict(pool.shape)["dim"] == D and pool.num_workgroups == B // 4
        assert pool.flops_per_wg * pool.num_workgroups == pytest.approx(B * P2 / G * D)
        assert pool == alone.programs[r].nodes[_node(alone, r, "a2a_fwd_intra").deps[0]].work
    for r in range(G, 3 * G):  # nodes 1 and 2: one grid block of 32 columns
        pool = graph.programs[r].nodes[_node(graph, r, "a2a_fwd_intra").deps[0]].work
        assert dict(pool.shape)["dim"] == D // 2 and pool.num_workgroups == B // 4
        assert pool.flops_per_wg * pool.num_workgroups == pytest.approx(B * P1 / G * D // 2)


def test_volumes_are_the_columns_each_rank_holds(tmp_path, system):
    _plan, graph = _graph(tmp_path, system, ROWS, "baseline", "a")
    n, b = NODES * G, B // (NODES * G)
    ranks = np.arange(n)
    hcols = np.where(ranks < G, D, D // 2)
    sent = 0.0
    for r in range(n):
        peers = ranks // G == r // G
        np.testing.assert_allclose(_node(graph, r, "a2a_fwd_intra").send_bytes,
                                   np.where(peers, NODES * b * hcols[r] * EB, 0.0))
        rail = ranks % G == r % G
        fwd = _node(graph, r, "a2a_fwd").send_bytes
        a2a = b * D * EB if r == 1 else 0.0   # t0 table-wise on rank 1
        np.testing.assert_allclose(fwd, a2a + np.where(rail, b * hcols[r] * EB, 0.0))
        sent += (fwd - a2a).sum()
    # every bag owner receives its bags' pooled rows of t2 (64 columns) and of t1 (two blocks of 32)
    assert sent == pytest.approx(n * 2 * b * D * EB)


def test_fused_push_uses_each_nodes_width(tmp_path, system):
    _plan, graph = _graph(tmp_path, system, ROWS, "fused", "a")
    for r, width in ((0, D), (G, D // 2), (2 * G + 1, D // 2)):
        op = _node(graph, r, "embedding_twrw_fused").op
        assert isinstance(_node(graph, r, "embedding_twrw_fused"), FusedNode)
        assert op.D == width and op.t == 1
        assert op.collective_size_bytes() == pytest.approx(B * width * EB)
    res = simulate_dlrm(_spec(), system, NODES, gpus_per_node=G, mode="fused", sim_mode="full", plan=_plan)
    assert res.iteration_time_s > res.compute_time_s > 0


def test_fused_push_refuses_a_width_that_differs_inside_a_node():
    lay = Layout(2, 2)
    with pytest.raises(SpecError) as exc:
        TwrwEmbeddingPush(None, lay, [1, 1, 0, 0], 0, 64, 4, [32, 64, 64, 64], 4)
    assert exc.value.field == "dim" and "one width" in exc.value.message
    for bad in (0, [32, 32, 32]):
        with pytest.raises(SpecError) as exc:
            TwrwEmbeddingPush(None, lay, [1, 1, 0, 0], 0, 64, 4, bad, 4)
        assert exc.value.field == "dim"
