"""The planner's per-table storage of the units each rank holds (RankUnits) against the straightforward per-rank
lists of Unit objects: same units on every rank, same rank classes, same per-rank summaries, the same DLRM graph and
iteration time, and the same rank-range strings."""

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfuse.graph import AllToAllVNode, ComputeNode
from simfuse.spec import workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulate_dlrm
from simfuse.workloads.placement import Unit, rank_classes
from simfuse.workloads.planner import HIER_SHARDINGS, SHARDINGS, Plan, RankUnits, format_ranks, plan_tables

from ..conftest import make_topology

A2A = ("table_wise", "row_wise", "column_wise")


def _spec(tables, batch, dim=64, memfrac=0.5):
    return workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": batch, "dense_features": 13,
                               "bottom_mlp": [64, dim], "top_mlp": [64, 1], "interaction": {"kind": "dot"},
                               "embedding": {"dim": dim, "placement": "planned", "memory_fraction": memfrac,
                                             "optimizer_state_factor": 1.0,
                                             "tables": [{"rows": r, "pooling": p} for r, p in tables]}}, "<test>")


def _reference_lists(plan, spec) -> list[list[Unit]]:
    """Every rank's units from the plan's table choices, one Unit per holder (the construction RankUnits
    replaces; shard sizes as load_plan derives them from the sharding type)."""
    per_rank: list[list[Unit]] = [[] for _ in range(plan.n_ranks)]
    for tp in plan.tables:
        tab, k = spec.tables[tp.table], len(tp.ranks)
        pooling = tab.pooling / k if tp.sharding in ("row_wise", "table_row_wise") else tab.pooling
        rows = tab.rows if tp.sharding in ("table_wise", "column_wise", "data_parallel") else math.ceil(tab.rows / k)
        dim = spec.dim // k if tp.sharding == "column_wise" else spec.dim
        if tp.sharding == "grid":  # k / g column shards, each row-sharded over the g GPUs of a node
            g = plan.gpus_per_node
            pooling, rows, dim = tab.pooling / g, math.ceil(tab.rows / g), spec.dim // (k // g)
        for i, r in enumerate(tp.ranks):
            per_rank[r].append(Unit(tp.table, rows, pooling, i, k, tp.sharding, dim))
    return per_rank


def _by_table(lists):
    return [sorted(us, key=lambda u: u.table) for us in lists]


def _same_graph(a, b) -> None:
    assert sorted(a.programs) == sorted(b.programs)
    assert (a.class_of_rank is None) == (b.class_of_rank is None)
    if a.class_of_rank is not None:
        assert np.array_equal(a.class_of_rank, b.class_of_rank)
    assert a.meta["classes"] == b.meta["classes"] and a.meta["fused_waves"] == b.meta["fused_waves"]
    for r in a.programs:
        for x, y in zip(a.programs[r].nodes, b.programs[r].nodes, strict=True):
            assert (type(x), x.name, x.deps, x.stream) == (type(y), y.name, y.deps, y.stream)
            if isinstance(x, AllToAllVNode):
                assert np.array_equal(x.send_bytes, y.send_bytes)
            if isinstance(x, ComputeNode):
                assert x.work == y.work


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables=st.lists(st.tuples(st.integers(1, 2_000_000), st.integers(1, 40)), min_size=1, max_size=7),
       shape=st.sampled_from([(1, 4), (2, 2), (2, 4), (3, 2), (4, 1)]), mode=st.sampled_from(["baseline", "fused"]),
       memfrac=st.sampled_from([0.002, 0.02, 0.5]))
def test_planned_units_equal_the_per_rank_construction(tables, shape, mode, memfrac):
    nodes, g = shape
    n = nodes * g
    system = System.from_topology(make_topology(gpus_per_node=g, nics_per_node=g))
    spec = _spec(tables, batch=64 * n, memfrac=memfrac)
    try:
        plan = plan_tables(spec, system, nodes, g, mode)
    except Exception as exc:  # a table that fits no sharding: nothing to compare
        assert "fits no sharding" in str(exc)
        return
    _check_plan(plan, spec, system, nodes, g, mode, simulate=True)


def _check_plan(plan, spec, system, nodes, g, mode, simulate):
    n = nodes * g
    pr = plan.per_rank
    assert isinstance(pr, RankUnits) and len(pr) == n
    lists = [pr[r] for r in range(n)]
    ref = _reference_lists(plan, spec)
    assert _by_table(lists) == _by_table(ref)
    # one placement order on every rank (the builder's float sums run in it)
    before: set = set()
    for us in lists:
        ts = [u.table for u in us]
        pairs = {(x, y) for i, x in enumerate(ts) for y in ts[i + 1:]}
        assert not {(y, x) for x, y in pairs} & before  # never y before x on another rank
        before |= pairs
    cls, keys = pr.rank_classes(g)
    ref_cls, ref_keys = rank_classes(ref, g)
    assert np.array_equal(cls, ref_cls) and keys == ref_keys
    D = spec.dim
    assert np.array_equal(pr.columns(A2A, D), np.array([sum(u.dim or D for u in us if u.kind in A2A) for us in ref],
                                                       dtype=float))
    assert np.array_equal(pr.count("table_row_wise"),
                          np.array([sum(u.kind == "table_row_wise" for u in us) for us in ref], dtype=float))
    assert np.array_equal(pr.columns(HIER_SHARDINGS, D),
                          np.array([sum(u.dim or D for u in us if u.kind in HIER_SHARDINGS) for us in ref], dtype=float))
    assert pr.dims(HIER_SHARDINGS, D) == sorted({u.dim or D for us in ref for u in us if u.kind in HIER_SHARDINGS})
    assert pr.tables_of("data_parallel") == sorted({u.table for us in ref for u in us if u.kind == "data_parallel"})
    row_bytes = 4 * (1.0 + spec.optimizer_state_factor)  # fp32 tables
    assert spec.embedding_dtype == "fp32"
    assert np.array_equal(plan.memory_bytes(spec), np.array([sum(u.rows * u.dim * row_bytes for u in us) for us in ref],
                                                            dtype=float))
    # the builder on the vectorised plan and on the same plan as plain lists: the same graph, the same result
    listed = Plan(plan.mode, plan.n_ranks, plan.gpus_per_node, plan.tables, lists, plan.estimated_critical_s)
    for sim_mode in ("classes", "full"):
        a = build_dlrm_graph(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode=sim_mode, plan=plan)
        b = build_dlrm_graph(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode=sim_mode, plan=listed)
        _same_graph(a, b)
    if not simulate:
        return
    ta = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode="classes", plan=plan)
    tb = simulate_dlrm(spec, system, nodes, gpus_per_node=g, mode=mode, sim_mode="classes", plan=listed)
    assert ta.iteration_time_s == tb.iteration_time_s


@pytest.fixture(scope="module")
def h200_system(root):
    return System.load(root / "topologies" / "h200_nvl8_ib_ndr.yaml")


@pytest.mark.parametrize("nodes,mode", [(2, "fused"), (4, "baseline"), (16, "baseline")])
def test_mlperf_plans_equal_the_per_rank_construction(root, h200_system, nodes, mode):
    """The MLPerf DLRM-DCNv2 plans mix table-wise, column-wise, table-row-wise and data-parallel tables."""
    from simfuse.fused.knobs import ExecutionSpec
    from simfuse.spec import load_workload
    from simfuse.spec.workload import DLRMSettings
    from simfuse.workloads.run import scaled_spec

    spec = scaled_spec(load_workload(root / "models" / "dlrm_dcnv2_mlperf_16n.yaml"), nodes, 8,
                       ExecutionSpec(settings=(DLRMSettings(batch_per_gpu=1056),)))
    plan = plan_tables(spec, h200_system, nodes, 8, mode)
    assert len({tp.sharding for tp in plan.tables}) >= 2
    _check_plan(plan, spec, h200_system, nodes, 8, mode, simulate=False)


_entry = st.tuples(st.sampled_from(SHARDINGS), st.sampled_from([0.5, 1.0, 3.0]), st.sampled_from([16, 32]),
                   st.one_of(st.none(), st.lists(st.integers(0, 15), min_size=1, max_size=6, unique=True)))


@settings(max_examples=60, deadline=None)
@given(shape=st.sampled_from([(1, 1), (1, 4), (2, 2), (4, 2), (2, 8), (8, 2)]),
       entries=st.lists(_entry, min_size=0, max_size=8))
def test_rank_classes_equal_the_per_rank_signatures(shape, entries):
    """Arbitrary holder sets (subsets in any order, the same signature on several tables, every rank): the
    vectorised classes and keys are placement.rank_classes of the materialised lists, with and without nodes."""
    nodes, g = shape
    n = nodes * g
    pr = RankUnits(n)
    for t, (kind, pooling, dim, holders) in enumerate(entries):
        h = list(range(n)) if holders is None else [r for r in holders if r < n] or [0]
        pr.add(t, SimpleNamespace(rows=10, pooling=pooling, shards=len(h), kind=kind, dim=dim), h)
    lists = [pr[r] for r in range(n)]
    for r, us in enumerate(lists):  # shard i on the i-th holder
        for u in us:
            assert pr.entries[u.table][1][u.shard] == r
    for gpn in (g, None):
        cls, keys = pr.rank_classes(gpn)
        ref_cls, ref_keys = rank_classes(lists, gpn)
        assert np.array_equal(cls, ref_cls) and keys == ref_keys


def _format_ranks_reference(ranks, n_ranks):
    rs = list(ranks)
    if rs == list(range(n_ranks)) and n_ranks > 1:
        return "all"
    parts, i = [], 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        parts.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ";".join(parts)


@settings(max_examples=80, deadline=None)
@given(ranks=st.lists(st.integers(0, 40), max_size=20, unique=True), n=st.integers(1, 41), ordered=st.booleans())
def test_format_ranks_equals_the_loop(ranks, n, ordered):
    rs = sorted(ranks) if ordered else ranks
    assert format_ranks(rs, n) == _format_ranks_reference(rs, n)
    assert format_ranks(range(n), n) == _format_ranks_reference(range(n), n)


def test_rank_units_index_like_a_list():
    pr = RankUnits(4)
    pr.add(0, SimpleNamespace(rows=5, pooling=1.0, shards=2, kind="column_wise", dim=16), [3, 1])
    assert pr[-1] == pr[3] == [Unit(0, 5, 1.0, 0, 2, "column_wise", 16)]
    assert pr[1:3] == [[Unit(0, 5, 1.0, 1, 2, "column_wise", 16)], []]
    with pytest.raises(IndexError):
        pr[4]
