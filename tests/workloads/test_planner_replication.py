"""The planner's replication of small tables (``embedding.data_parallel_below_mib``), its memory limit, and
plan.csv's ``reason`` column."""

import pandas as pd
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from simfuse.errors import SpecError
from simfuse.spec import load_topology, load_workload, workload_from_dict
from simfuse.system import System
from simfuse.workloads.plan_file import load_plan, write_plans
from simfuse.workloads.planner import plan_tables

from ..conftest import make_topology
from .test_planner import FORCED, TABLES, _plan_csv

G = 4


def _spec(tables, below_mib=0.0, memfrac=0.5, dim=32):
    return workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": 1024, "dense_features": 13,
                               "bottom_mlp": [64, dim], "top_mlp": [64, 1], "interaction": {"kind": "dot"},
                               "embedding": {"dim": dim, "placement": "planned", "memory_fraction": memfrac,
                                             "optimizer_state_factor": 1.0, "data_parallel_below_mib": below_mib,
                                             "tables": [{"rows": r, "pooling": p} for r, p in tables]}}, "<test>")


def _system(memory_gb=141.0):
    return System.from_topology(make_topology(gpus_per_node=G, nics_per_node=G,
                                              device_extra={"memory_gb": memory_gb}))


def _storage(rows, dim=32):
    return rows * dim * 4 * 2.0  # fp32 + one element of optimizer state


@pytest.mark.parametrize("mode", ["baseline", "fused"])
def test_tiny_tables_are_replicated_with_their_reason(mode):
    tables = [(3, 1), (4, 2), (40_000, 8), (2_000_000, 20), (10, 1)]
    spec = _spec(tables, below_mib=0.01)  # 10,485 bytes: tables under 41 rows of 32 fp32 + state
    plan = plan_tables(spec, _system(), 2, G, mode)
    kinds = {tp.table: tp.sharding for tp in plan.tables}
    assert kinds[0] == kinds[1] == kinds[4] == "data_parallel"
    assert kinds[2] != "data_parallel" and kinds[3] != "data_parallel"
    for tp in plan.tables:
        assert tp.reason.startswith("replicated: ") == (tp.table in (0, 1, 4))
        if tp.table in (0, 1, 4):
            assert f"{tables[tp.table][0]} rows" in tp.reason
    # without a cut nothing is forced: the reason names the option's estimate instead
    plan0 = plan_tables(_spec(tables), _system(), 2, G, mode)
    assert not any(tp.reason.startswith("replicated") for tp in plan0.tables)
    assert all("lowest estimate" in tp.reason for tp in plan0.tables)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tables=st.lists(st.tuples(st.integers(1, 600_000), st.integers(1, 40)), min_size=1, max_size=6),
       nodes=st.sampled_from([1, 2, 4]), below_mib=st.sampled_from([0.0, 0.05, 1.0, 20.0]),
       memory_gb=st.sampled_from([0.2, 0.5, 4.0]), mode=st.sampled_from(["baseline", "fused"]))
def test_replicates_below_the_cut_and_never_exceeds_memory(tables, nodes, below_mib, memory_gb, mode):
    spec = _spec(tables, below_mib=below_mib)
    system = _system(memory_gb)
    budget = memory_gb * 1e9 * 0.5
    n = nodes * G
    assume(sum(_storage(r) for r, _p in tables) < 0.5 * budget * n)  # the tables fit the cluster with room
    try:
        plan = plan_tables(spec, system, nodes, G, mode)
    except SpecError as exc:  # only a table too big for every sharding may be refused
        assert "fits no sharding" in str(exc)
        return
    assert sorted(tp.table for tp in plan.tables) == list(range(len(tables)))
    mem = plan.memory_bytes(spec)
    assert len(mem) == n and (mem <= budget * (1 + 1e-9)).all()
    for tp in plan.tables:
        rows = tables[tp.table][0]
        small = n > 1 and _storage(rows) < below_mib * 2**20
        if small and not tp.reason.startswith("replica does not fit"):
            assert tp.sharding == "data_parallel" and tp.reason.startswith("replicated")
        elif not small:
            assert not tp.reason.startswith("replicated")
        assert tp.reason


def test_hugectr_model_replicates_the_tables_hugectr_does():
    """The HugeCTR model file's cut (DP_SHARDING_THRESHOLD) replicates the 14 tables the submission's own plan
    replicates (models/plans/hugectr_v4.1_16n.csv), at the submission's 16 nodes."""
    spec = load_workload("models/dlrm_dcnv2_mlperf_hugectr_16n.yaml")
    system = System.from_topology(load_topology("topologies/h100_nvl8_ib_ndr_sharp.yaml"))
    ref = pd.read_csv("models/plans/hugectr_v4.1_16n.csv")
    theirs = {int(t[1:]) for t, k in zip(ref.table, ref.sharding, strict=True) if k == "data_parallel"}
    assert len(theirs) == 14
    ctx_small = {t for t in range(len(spec.tables))
                 if spec.tables[t].rows * spec.dim * 4 * (1 + spec.optimizer_state_factor)
                 < spec.data_parallel_below_bytes}
    assert ctx_small == theirs
    plan = plan_tables(spec, system, 16, 8, "baseline")
    assert {tp.table for tp in plan.tables if tp.sharding == "data_parallel"} >= theirs


def test_mlperf_model_replicates_its_tiny_tables():
    spec = load_workload("models/dlrm_dcnv2_mlperf.yaml")
    system = System.from_topology(load_topology("topologies/h100_nvl8_ib_ndr.yaml"))
    plan = plan_tables(spec, system, 2, 8, "baseline")
    tiny = {t for t, tab in enumerate(spec.tables) if tab.rows < 128}
    assert len(tiny) == 7
    assert {tp.table for tp in plan.tables if tp.reason.startswith("replicated")} == tiny


def test_plan_csv_has_a_reason_for_every_table(tmp_path):
    spec = _spec(TABLES, below_mib=0.02)  # 20,971 B: t4 (50 rows, 12,800 B) only
    system = _system()
    plans = {m: plan_tables(spec, system, 2, G, m) for m in ("baseline", "fused")}
    df = pd.read_csv(write_plans(tmp_path, plans), keep_default_na=False)
    assert "reason" in df.columns and len(df) == 2 * len(TABLES)
    assert (df.reason.str.len() > 0).all()
    assert df[df.table == "t4"].reason.str.startswith("replicated: 50 rows").all()
    # a forced plan says so
    forced = load_plan(_plan_csv(tmp_path, FORCED), spec, system, 2, G, "baseline")
    assert all(r.startswith("forced: ") for r in forced.to_frame().reason)


def test_replicated_tables_run_as_one_group(tmp_path):
    """bucketed: the replicated tables share one pooling kernel, one local reduce and one optimizer kernel, each
    the sum of the per-table ones (``bucketed_per_table``), and their gradients join the last DDP bucket: its
    all-reduce carries the per-table all-reduces' bytes and waits for the local reduce."""
    from simfuse.graph import CollectiveNode, ComputeNode
    from simfuse.workloads.dlrm import build_dlrm_graph

    tables = [(1000, 3), (50, 1), (20, 2), (4000, 8)]
    rows = [("t0", "table_wise", "1"), ("t1", "data_parallel", "all"), ("t2", "data_parallel", "all"),
            ("t3", "row_wise", "all")]
    system = _system()
    got = {}
    for allreduce in ("bucketed", "bucketed_per_table"):
        d = {"name": "t", "kind": "dlrm", "global_batch": 1024, "dense_features": 13, "bottom_mlp": [64, 32],
             "top_mlp": [64, 1], "interaction": {"kind": "dot"}, "dense_allreduce": allreduce,
             "embedding": {"dim": 32, "placement": "planned",
                           "tables": [{"rows": r, "pooling": p} for r, p in tables]}}
        spec = workload_from_dict(d, "<test>")
        plan = load_plan(_plan_csv(tmp_path, rows), spec, system, 2, G, "baseline")
        graph = build_dlrm_graph(spec, system, 2, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
        nodes = graph.programs[0].nodes
        colls = [nd for nd in nodes if isinstance(nd, CollectiveNode) and nd.op == "all_reduce"]
        upd = [nd for nd in nodes if isinstance(nd, ComputeNode) and nd.phase == "embedding_update"
               and any(c.id in nd.deps for c in colls)]
        got[allreduce] = (
            [nd for nd in nodes if isinstance(nd, ComputeNode) and nd.phase == "embedding_dp_fwd"],
            [nd for nd in colls if nd.name.startswith("ddp_allreduce")],
            [nd for nd in colls if nd.phase == "allreduce_dp_tables"], upd, nodes)
    (pool1, ddp1, dp1, upd1, nodes1), (pool2, ddp2, dp2, upd2, _n) = got["bucketed"], got["bucketed_per_table"]
    assert len(pool1) == len(upd1) == 1 and not dp1 and len(pool2) == len(upd2) == len(dp2) == 2

    def total(ws):
        return sum(w.work.bytes_per_wg * w.work.num_workgroups for w in ws)

    assert total(pool1) == pytest.approx(total(pool2)) and total(upd1) == pytest.approx(total(upd2))
    assert sum(a.size_bytes for a in dp2) == (50 + 20) * 32 * 4
    assert ddp1[-1].size_bytes == pytest.approx(ddp2[-1].size_bytes + (50 + 20) * 32 * 4)
    (red,) = [nodes1[i] for i in ddp1[-1].deps[1:]]  # the last bucket waits for the replicated tables' reduce
    assert red.phase == "embedding_update" and upd1[0].deps[-1] == ddp1[-1].id


def test_hot_table_is_spread_by_its_ids_ingress():
    """A hot table's ids (prefetched, the ingress bound) make the planner spread it over more holders than the
    plan that ignores them, each holder then receiving fewer ids; plan.csv says it is hot."""
    from simfuse.workloads.planner import _context, _option_for

    tables = [(200_000, 50), (100_000, 2), (50_000, 3), (80_000, 1)]
    system = _system()
    got = {}
    for dist in ("none", "prefetch"):
        spec = workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": 4096, "dense_features": 13,
                                   "bottom_mlp": [64, 16], "top_mlp": [64, 1], "interaction": {"kind": "dot"},
                                   "embedding": {"dim": 16, "placement": "planned", "input_dist": dist,
                                                 "tables": [{"rows": r, "pooling": p} for r, p in tables]}},
                                  "<test>")
        plan = plan_tables(spec, system, 2, G, "baseline")
        got[dist] = (spec, plan, plan.tables[0])
    (_s0, plan0, off), (spec1, plan1, on) = got["none"], got["prefetch"]
    assert len(on.ranks) > len(off.ranks)
    assert on.reason.startswith(f"{on.sharding} over ") and "hot (50 lookups per bag" in on.reason
    ctx = _context(spec1, system, 2 * G, G, "baseline")
    ingress = {k: _option_for(ctx, p.per_rank[t.ranks[0]], 0).ids_recv_inter_holder
               for k, p, t in (("off", plan0, off), ("on", plan1, on))}
    assert ingress["on"] < ingress["off"]
