"""Grid sharding (``grid``, TorchRec's GRID_SHARD): ``k`` column shards of ``D / k`` columns, each table-row-wise
on the ``g`` GPUs of its own node (simfuse/workloads/planner.py, the DLRM builder's hierarchical path).

Volumes and per-rank loads against their closed forms, the world's bytes sent against those received, the grid
with ``k = 1`` against table-row-wise (the same formula and code path: equal estimates, graphs and iterations),
the planner's memory budget and choices (grid where it dominates, table-row-wise where that is cheaper), and the
rank-class fast path against full simulation on planned placements with grid shards."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simfuse.errors import SpecError
from simfuse.graph import AllToAllVNode, ComputeNode, FusedNode
from simfuse.spec import workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulate_dlrm
from simfuse.workloads.plan_file import load_plan, write_plans
from simfuse.workloads.planner import (
    SHARDINGS,
    _context,
    _hier_option,
    _partition,
    enumerate_options,
    estimate_plan,
    plan_tables,
)

from ..conftest import make_topology

G, NODES, D, EB = 4, 2, 64, 4   # 2 nodes x 4 GPUs; dim 64 fp32: grid k = 2 (32 columns = MIN_COLUMN_DIM)
N_RANKS = G * NODES
TABLES = [(1000, 3), (4000, 8), (8000, 5), (2000, 2), (50, 1)]
#: t1 grid over both nodes (column shard 0 on node 1, shard 1 on node 0), t2 table-row-wise on node 1
MIXED = [("t0", "table_wise", "1"), ("t1", "grid", "4-7;0-3"), ("t2", "table_row_wise", "4-7"),
         ("t3", "column_wise", "2;6"), ("t4", "data_parallel", "all")]


def _spec(tables, batch=1024, dim=D, memfrac=0.5, dtype="fp32"):
    return workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": batch, "dense_features": 13,
                               "bottom_mlp": [64, dim], "top_mlp": [64, 1], "interaction": {"kind": "dot"},
                               "embedding": {"dim": dim, "placement": "planned", "memory_fraction": memfrac,
                                             "optimizer_state_factor": 1.0, "dtype": dtype,
                                             "tables": [{"rows": r, "pooling": p} for r, p in tables]}}, "<test>")


def _system(g=G):
    return System.from_topology(make_topology(gpus_per_node=g, nics_per_node=g))


@pytest.fixture(scope="module")
def small():
    return _system()


def _plan(tmp_path, rows, spec, system, mode, nodes=NODES, g=G, name="plan.csv"):
    p = tmp_path / name
    pd.DataFrame(rows, columns=["table", "sharding", "ranks"]).to_csv(p, index=False)
    return load_plan(p, spec, system, nodes, g, mode)


def _node(graph, rank, name):
    return next(nd for nd in graph.programs[rank].nodes if nd.name == name)


def _distinct(rows, lookups):
    """Expected distinct ids of ``lookups`` uniform draws over ``rows`` (closed form)."""
    return rows * (1.0 - (1.0 - 1.0 / rows) ** lookups)


def _twrw_kernels(graph, rank):
    """The baseline graph's hierarchical pooling kernel (the producer of the stage-1 exchange) and update kernel
    (the consumer of the backward stage 1) of ``rank``, as total HBM bytes."""
    nodes = graph.programs[rank].nodes
    pool = nodes[_node(graph, rank, "a2a_fwd_intra").deps[0]]
    i_bwd = nodes.index(_node(graph, rank, "a2a_bwd_intra"))
    first = next(nd for nd in nodes if isinstance(nd, ComputeNode) and i_bwd in nd.deps)
    assert first.name == "emb_update_twrw_sort_hist"  # the sparse backward starts with the sort of its ids
    upd = _node(graph, rank, "emb_update_twrw")
    assert isinstance(pool, ComputeNode) and pool.work.name == "embedding_bag" and upd.phase == "embedding_update"
    return (pool.work.bytes_per_wg * pool.work.num_workgroups, upd.work.bytes_per_wg * upd.work.num_workgroups)


def test_grid_volumes_and_loads_match_their_formulas(tmp_path, small):
    spec = _spec(TABLES)
    B, n, g, N = 1024, N_RANKS, G, NODES
    b, opt = B // n, 1.0
    plan = _plan(tmp_path, MIXED, spec, small, "baseline")
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    P1, P2, R1 = TABLES[1][1], TABLES[2][1], TABLES[1][0]
    ranks = np.arange(n)
    # each of the 8 holders: shard i (column block i // g, row shard i % g) of P / g lookups over D / 2 columns
    for i, r in enumerate([4, 5, 6, 7, 0, 1, 2, 3]):
        assert [u for u in plan.per_rank[r] if u.table == 1] == [
            type(plan.per_rank[r][0])(1, math.ceil(R1 / g), P1 / g, i, 2 * g, "grid", D // 2)]
    # columns each rank holds in hierarchical shards: t1's D / 2 everywhere, t2's D on node 1
    hcols = D // 2 + D * (ranks >= 4)
    a2a_cols = D * (ranks == 1) + (D // 2) * np.isin(ranks, (2, 6))
    sent_rail = np.zeros((n, n))
    for r in range(n):
        rail = ranks % g == r % g
        peers = ranks // g == r // g
        fwd = _node(graph, r, "a2a_fwd").send_bytes
        # stage 2: b x (its hierarchical columns) to its rail peer on every node; the All-to-All shards' b x cols
        np.testing.assert_allclose(fwd, np.full(n, b * a2a_cols[r] * EB) + np.where(rail, b * hcols[r] * EB, 0.0))
        sent_rail[r] = fwd - b * a2a_cols[r] * EB
        # stage 1: N b (its hierarchical columns) to each local peer (reduce-scatter inside the node)
        np.testing.assert_allclose(_node(graph, r, "a2a_fwd_intra").send_bytes,
                                   np.where(peers, N * b * hcols[r] * EB, 0.0))
        # backward: the transposes
        np.testing.assert_allclose(_node(graph, r, "a2a_bwd").send_bytes,
                                   [_node(graph, o, "a2a_fwd").send_bytes[r] for o in range(n)])
        np.testing.assert_allclose(_node(graph, r, "a2a_bwd_intra").send_bytes,
                                   [_node(graph, o, "a2a_fwd_intra").send_bytes[r] for o in range(n)])
    # what every bag owner receives on the rails: its b bags' full pooled rows, b D per hierarchical table (t1's
    # two column blocks, one from each node, and t2's) -- the world receives what it sent
    np.testing.assert_allclose(sent_rail.sum(axis=0), np.full(n, 2 * b * D * EB))
    assert sent_rail.sum() == pytest.approx(n * 2 * b * D * EB)
    # stage 1 in total: every holder's N b w to each of its g - 1 peers (w: D / 2 for t1, D for t2)
    intra = sum(_node(graph, r, "a2a_fwd_intra").send_bytes.sum() - N * b * hcols[r] * EB for r in range(n))
    assert intra == pytest.approx((g - 1) * N * b * EB * (n * D // 2 + g * D))
    # per-rank loads on node 0 (t1's column block alone): pooling B bags at P / g lookups over D / 2 columns
    # (rows, int64 ids, outputs) and the sparse update (each distinct row and its optimizer state read and
    # written, each lookup's gradient gathered, each sorted (id, position) pair read)
    w, p = D // 2, P1 / g
    r1, r2 = math.ceil(R1 / g), math.ceil(TABLES[2][0] / g)
    pool0, upd0 = _twrw_kernels(graph, 0)
    assert pool0 == pytest.approx(B * p * (w * EB + 8) + B * w * EB)
    assert upd0 == pytest.approx(_distinct(r1, B * p) * w * EB * (2 + 2 * opt) + B * p * w * EB + B * p * 8)
    # node 1 holds t1's block and t2's row shard: the update adds both exactly
    p2 = P2 / g
    assert _twrw_kernels(graph, 5)[1] == pytest.approx(
        (_distinct(r1, B * p) * w + _distinct(r2, B * p2) * D) * EB * (2 + 2 * opt)
        + B * (p * w + p2 * D) * EB + B * (p + p2) * 8)


def test_grid_estimator_formulas(small):
    # the embedding exchange's volumes; the ids of the input distribution are tests/workloads/test_input_dist.py's
    spec = dataclasses.replace(_spec(TABLES, dim=128), input_dist="none")
    ctx = _context(spec, small, N_RANKS, G, "baseline")
    opts = {(o.kind, o.shards): o for o in enumerate_options(ctx, 1, SHARDINGS)}
    b, Dm, g, N = 1024 // N_RANKS, 128, G, NODES
    assert ("grid", 4 * g) not in opts  # k <= nodes
    tr, gr = opts[("table_row_wise", g)], opts[("grid", 2 * g)]
    # per holder: 1/k of table-row-wise's stage-1 and rail bytes, P / g lookups over D / k columns
    assert gr.send_intra == pytest.approx(2 * N * b * (Dm // 2) * EB * (g - 1)) == pytest.approx(tr.send_intra / 2)
    assert gr.send_inter == pytest.approx(2 * (N - 1) * b * (Dm // 2) * EB) == pytest.approx(tr.send_inter / 2)
    assert gr.recv_intra_holder == gr.send_intra
    assert (gr.rows, gr.dim, gr.pooling) == (math.ceil(4000 / g), Dm // 2, 8 / g)
    assert gr.storage == pytest.approx(tr.storage / 2)
    # every rank receives the same bytes as from one table-row-wise table: b D / k from each of k nodes
    assert gr.u_recv_inter == pytest.approx(tr.u_recv_inter) == pytest.approx(2 * b * Dm * EB * (N - 1) / N)
    pool = 1024 * (8 / g) * ((Dm // 2) * EB + 8) + 1024 * (Dm // 2) * EB
    n, r = 1024 * (8 / g), math.ceil(4000 / g)
    upd = (_distinct(r, n) * (Dm // 2) * EB * 4 + n * (Dm // 2) * EB + 8 * n  # sorted update, index calculation:
           + 4 * n + 2 * 16 * n + 4 * n + 8 * _distinct(r, n))                # 1,000 rows: 10 bits, 2 digits
    assert gr.comp_s == pytest.approx((pool + upd) / ctx.rates.hbm_bytes_per_s)
    # k = 1 is the table-row-wise option (one formula)
    one = _hier_option(ctx, 1, "grid", 1)
    assert {k: v for k, v in vars(one).items() if k != "kind"} == {k: v for k, v in vars(tr).items() if k != "kind"}


def test_grid_with_one_column_shard_is_table_row_wise(tmp_path, small):
    """grid over one node (k = 1) and table-row-wise are one sharding: the same estimate, the same graph volumes,
    the same iteration in both modes, fast path and full simulation."""
    spec = _spec(TABLES, batch=2048)
    twrw = [("t0", "table_row_wise", "0-3"), ("t1", "table_row_wise", "4-7"), ("t2", "table_wise", "2"),
            ("t3", "column_wise", "1;5"), ("t4", "data_parallel", "all")]
    grid1 = [(t, "grid" if k == "table_row_wise" else k, r) for t, k, r in twrw]
    for mode in ("baseline", "fused"):
        a = _plan(tmp_path, twrw, spec, small, mode, name="a.csv")
        c = _plan(tmp_path, grid1, spec, small, mode, name="c.csv")
        assert a.estimated_critical_s == c.estimated_critical_s
        assert [[(u.table, u.rows, u.pooling, u.shard, u.shards, u.dim) for u in us] for us in a.per_rank] == \
            [[(u.table, u.rows, u.pooling, u.shard, u.shards, u.dim) for u in us] for us in c.per_rank]
        ga = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="full", plan=a)
        gc = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="full", plan=c)
        for r in range(N_RANKS):
            for x, y in zip(ga.programs[r].nodes, gc.programs[r].nodes, strict=True):
                assert (type(x), x.name, x.deps) == (type(y), y.name, y.deps)
                if isinstance(x, AllToAllVNode):
                    assert np.array_equal(x.send_bytes, y.send_bytes)
                if isinstance(x, ComputeNode):
                    assert x.work == y.work
        for sim_mode in ("full", "classes"):
            ta = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode=sim_mode, plan=a)
            tc = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode=sim_mode, plan=c)
            assert ta.iteration_time_s == tc.iteration_time_s


def test_baseline_and_fused_both_run_a_grid_plan(tmp_path, small):
    spec = _spec(TABLES, batch=2048)
    for mode in ("baseline", "fused"):
        plan = _plan(tmp_path, MIXED, spec, small, mode)
        res = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="full", plan=plan)
        names = {nd.name for nd in build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="full",
                                                    plan=plan).programs[0].nodes}
        if mode == "fused":  # the hierarchical push carries the grid's column block
            assert {"embedding_twrw_fused", "a2a_bwd_twrw"} <= names
        else:
            assert {"a2a_fwd_intra", "a2a_bwd_intra"} <= names
        assert res.iteration_time_s > res.compute_time_s > 0


def test_plan_csv_round_trips_grid(tmp_path):
    system = _system(2)
    spec = _spec([(2_000_000, 100), (2_000_000, 60), (50, 1)], batch=1024 * 8, dim=128)
    plans = {m: plan_tables(spec, system, 4, 2, m) for m in ("baseline", "fused")}
    assert all(any(tp.sharding == "grid" for tp in p.tables) for p in plans.values())
    path = write_plans(tmp_path, plans)
    df = pd.read_csv(path)
    grid_shards = set(df[df["sharding"] == "grid"]["shards"])
    assert grid_shards and all(s % 2 == 0 and 2 <= s // 2 <= 4 for s in grid_shards)  # k = 2..4 nodes x 2 GPUs
    for m, p in plans.items():
        q = load_plan(path, spec, system, 4, 2, m)
        assert [sorted(us, key=lambda u: u.table) for us in q.per_rank] == \
               [sorted(us, key=lambda u: u.table) for us in p.per_rank]
        assert q.estimated_critical_s == pytest.approx(p.estimated_critical_s, rel=1e-9)
        a = simulate_dlrm(spec, system, 4, gpus_per_node=2, mode=m, plan=p).iteration_time_s
        b = simulate_dlrm(spec, system, 4, gpus_per_node=2, mode=m, plan=q).iteration_time_s
        assert a == b


def test_planner_grids_tables_where_grid_dominates():
    """Two huge-pooling tables, 8 nodes, a large batch: a table-row-wise node (or a row-wise spread over every
    rank, or table-wise ...) leaves the holder pooling the whole table's lookups over all columns for the whole
    batch; grid at k = 4 cuts each holder's pooling, stage-1 and rail bytes by 4.  The planner grids both tables
    in both modes, and the simulated iteration beats the best plan without grid."""
    nodes, g = 8, 2
    system = _system(g)
    spec = _spec([(2_000_000, 100), (2_000_000, 60)], batch=1024 * nodes * g, dim=128)
    for mode in ("baseline", "fused"):
        plan = plan_tables(spec, system, nodes, g, mode)
        assert [(tp.sharding, len(tp.ranks)) for tp in plan.tables] == [("grid", 4 * g)] * 2
        held = [sorted({r // g for r in tp.ranks}) for tp in plan.tables]
        assert not set(held[0]) & set(held[1])  # the second table's nodes: the least loaded ones
        ctx = _context(spec, system, nodes * g, g, mode)
        no_grid = _partition(ctx, tuple(k for k in SHARDINGS if k != "grid"), "no_grid")
        assert plan.estimated_critical_s < no_grid.estimated_critical_s
        t_grid = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=mode, plan=plan).iteration_time_s
        t_none = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=mode, plan=no_grid).iteration_time_s
        assert t_grid < t_none


def test_planner_keeps_table_row_wise_where_it_is_cheaper(tmp_path, small):
    """Two equal tables on two nodes: one table-row-wise node each balances the nodes, and grid over both nodes
    would only add index reads (each holder reads P / g ids for D / 2 columns).  The estimator says so, and the
    planner keeps table-row-wise (the greedy alone takes grid for the first table: ``greedy_no_grid``)."""
    # the index-read term alone: with the ids' exchange counted too the two estimates tie here (both are bound
    # by the rail bytes), tests/workloads/test_input_dist.py covers the ids
    spec = dataclasses.replace(_spec([(400_000, 40)] * 2, batch=1024 * N_RANKS), input_dist="none")
    twrw = [("t0", "table_row_wise", "0-3"), ("t1", "table_row_wise", "4-7")]
    grid = [("t0", "grid", "0-3;4-7"), ("t1", "grid", "0-3;4-7")]
    for mode in ("baseline", "fused"):
        est_twrw = _plan(tmp_path, twrw, spec, small, mode, name="a.csv").estimated_critical_s
        est_grid = _plan(tmp_path, grid, spec, small, mode, name="b.csv").estimated_critical_s
        assert est_twrw < est_grid
        plan = plan_tables(spec, small, NODES, G, mode)
        assert [tp.sharding for tp in plan.tables] == ["table_row_wise"] * 2
        assert plan.estimated_critical_s == pytest.approx(est_twrw, rel=1e-12)
        assert plan.candidates["greedy_no_grid"] < plan.candidates["greedy"]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables=st.lists(st.tuples(st.integers(1, 3_000_000), st.integers(1, 120)), min_size=1, max_size=6),
       mode=st.sampled_from(["baseline", "fused"]), memfrac=st.sampled_from([0.001, 0.004, 0.02, 0.5]),
       shape=st.sampled_from([(2, 4), (4, 2), (8, 2)]), dim=st.sampled_from([64, 128]))
def test_grid_placements_never_exceed_memory(tables, mode, memfrac, shape, dim):
    nodes, g = shape
    system = _system(g)
    spec = _spec(tables, batch=64 * nodes * g, dim=dim, memfrac=memfrac)
    budget = system.topology.device.memory_bytes * memfrac
    ctx = _context(spec, system, nodes * g, g, mode)
    for allowed in (("grid", "table_wise"), SHARDINGS):  # grid on whatever nodes have room, and the full greedy
        try:
            plan = _partition(ctx, allowed, "x")
        except SpecError as exc:  # only when a table fits no option
            assert exc.field.startswith("embedding.rows")
            continue
        assert plan.memory_bytes(spec).max() <= budget * (1 + 1e-9)
        for tp in plan.tables:
            if tp.sharding == "grid":  # whole nodes, a distinct node per column shard
                runs = [tp.ranks[i:i + g] for i in range(0, len(tp.ranks), g)]
                assert all(list(run) == list(range(run[0], run[0] + g)) and run[0] % g == 0 for run in runs)
                assert len({run[0] for run in runs}) == len(runs) and dim % len(runs) == 0
                assert tp.dim_per_shard == dim // len(runs) >= 32
    # the proposer's plan: within the budget, and never estimated worse than the plan without grid
    try:
        plan = plan_tables(spec, system, nodes, g, mode)
    except SpecError as exc:  # only when a table fits no option, as above
        assert exc.field.startswith("embedding.rows")
        return
    assert plan.memory_bytes(spec).max() <= budget * (1 + 1e-9)
    assert plan.estimated_critical_s <= plan.candidates["greedy_no_grid"] * (1 + 1e-12)
    assert estimate_plan(spec, system, [plan.per_rank[r] for r in range(nodes * g)], nodes, g, mode) == \
        pytest.approx(plan.estimated_critical_s, rel=1e-9)


@settings(max_examples=8, deadline=None)
@given(tables=st.lists(st.tuples(st.integers(500_000, 2_000_000), st.integers(40, 100)), min_size=1, max_size=3),
       extra=st.lists(st.tuples(st.integers(10, 50_000), st.integers(1, 8)), max_size=3),
       mode=st.sampled_from(["baseline", "fused"]), nodes=st.sampled_from([4, 8]), dim=st.sampled_from([64, 128]))
def test_classes_fast_path_equals_full_with_grid_shards(tables, extra, mode, nodes, dim):
    """Planned placements with grid shards: large-pooling tables (the planner grids most such draws; the others
    are left out) and a few small ones that go elsewhere, on 4 or 8 nodes x 2 GPUs; at dim 64 (k = 2) a grid
    table holds only some nodes, so the placement is uneven (several rank classes)."""
    g = 2
    system = _system(g)
    spec = _spec(tables + extra, batch=256 * nodes * g, dim=dim)
    plan = plan_tables(spec, system, nodes, g, mode)
    assume(any(tp.sharding == "grid" for tp in plan.tables))
    fast = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode="classes", plan=plan)
    full = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode="full", plan=plan)
    # uneven placements: the class fast path approximates (Fabric.set_rank_classes); over 30 random draws of this
    # strategy (stop 24, a one-off script) its largest deviation was 2.5% without the ids' exchange and 2.4% with it,
    # and hypothesis found a 2.8% case with it; the bound was 2% before the ids were modelled
    assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=0.03)


def test_forced_grid_plans_classes_equal_full(tmp_path, small):
    spec = _spec(TABLES, batch=2048)
    for mode in ("baseline", "fused"):
        plan = _plan(tmp_path, MIXED, spec, small, mode)
        graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="classes", plan=plan)
        assert graph.meta["classes"] > 1
        if mode == "fused":
            assert any(isinstance(nd, FusedNode) and nd.name == "embedding_twrw_fused"
                       for p in graph.programs.values() for nd in p.nodes)
        fast = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="classes", plan=plan)
        full = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="full", plan=plan)
        assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=0.02)


@pytest.mark.parametrize("ranks,text", [
    ("0-5", "whole nodes"),
    ("0-2;4;3;5-7", "not the 4 ranks of one node"),
    ("0;1;2;4;3;5;6;7", "not the 4 ranks of one node"),
])
def test_bad_grid_ranks_name_file_and_field(tmp_path, small, ranks, text):
    rows = [r for r in MIXED if r[0] != "t1"] + [("t1", "grid", ranks)]
    with pytest.raises(SpecError) as exc:
        _plan(tmp_path, rows, _spec(TABLES), small, "baseline")
    assert exc.value.field == f"ranks (line {len(rows) + 1})" and text in exc.value.message


def test_grid_needs_a_dim_divisible_by_its_nodes(tmp_path):
    system = _system(2)
    spec = _spec(TABLES, batch=960, dim=64)
    rows = [("t0", "grid", "0-5"), ("t1", "table_wise", "0"), ("t2", "table_wise", "1"), ("t3", "table_wise", "2"),
            ("t4", "table_wise", "3")]
    with pytest.raises(SpecError) as exc:
        _plan(tmp_path, rows, spec, system, "baseline", nodes=3, g=2)
    assert exc.value.field == "ranks (line 2)" and "not divisible by 3" in exc.value.message


def test_hierarchical_pooling_kernel_flop_and_rows_per_workgroup(tmp_path, small):
    """The table-row-wise / grid pooling kernel: one workgroup pools 4 bags of one (column-equivalent) table, so it
    gathers 4 x that table's share of the lookups; the kernel's FLOP are B x (lookups x columns) summed over the
    rank's shards, whatever the number of tables (a kernel of several tables once priced each workgroup as all of
    them)."""
    spec = _spec(TABLES)
    B, g = 1024, G
    plan = _plan(tmp_path, MIXED, spec, small, "baseline")
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    P1, P2 = TABLES[1][1], TABLES[2][1]
    nodes = graph.programs[5].nodes
    pool = nodes[_node(graph, 5, "a2a_fwd_intra").deps[0]].work
    # rank 5 holds t1's 32-column block and t2's 64-column row shard: 1 + 2 column-equivalent tables of 32 columns
    w = D // 2
    assert pool.num_workgroups == 3 * (B // 4)
    assert pool.flops_per_wg * pool.num_workgroups == pytest.approx(B * (P1 / g * w + P2 / g * D))
    # rows per workgroup = FLOP / columns = 4 bags x the mean per-table share of the lookups
    assert pool.flops_per_wg / w == pytest.approx(4 * (P1 / g + 2 * P2 / g) / 3)
    assert dict(pool.shape)["pooling"] == pytest.approx((P1 / g + 2 * P2 / g) / 3)
