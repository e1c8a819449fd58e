"""The sharding planner (simfuse/workloads/planner.py) and planned placements in the DLRM builder."""

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfuse.errors import SpecError
from simfuse.fused.knobs import ExecutionSpec, parse_execution
from simfuse.graph import AllToAllVNode, CollectiveNode
from simfuse.spec import workload_from_dict
from simfuse.spec.workload import DLRMSettings
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulate_dlrm
from simfuse.workloads.plan_file import load_plan, write_plans
from simfuse.workloads.planner import (
    SHARDINGS,
    enumerate_options,
    format_ranks,
    parse_ranks,
    plan_tables,
)
from simfuse.workloads.run import scaled_spec, simulate_workload

from ..conftest import make_topology

G, NODES = 4, 2  # small system: 2 nodes x 4 GPUs
N_RANKS = G * NODES


def _spec(tables, batch=1024, dim=32, placement="planned", memfrac=0.5, opt=1.0):
    return workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": batch, "dense_features": 13,
                               "bottom_mlp": [64, dim], "top_mlp": [64, 1], "interaction": {"kind": "dot"},
                               "embedding": {"dim": dim, "placement": placement, "memory_fraction": memfrac,
                                             "optimizer_state_factor": opt,
                                             "tables": [{"rows": r, "pooling": p} for r, p in tables]}}, "<test>")


@pytest.fixture(scope="module")
def small():
    return System.from_topology(make_topology(gpus_per_node=G, nics_per_node=G))


def _plan_csv(tmp_path, rows, name="plan.csv"):
    p = tmp_path / name
    pd.DataFrame(rows, columns=["table", "sharding", "ranks"]).to_csv(p, index=False)
    return p


def _a2a(graph, rank, name):
    return next(nd for nd in graph.programs[rank].nodes if isinstance(nd, AllToAllVNode) and nd.name == name)


FORCED = [("t0", "table_wise", "1"), ("t1", "row_wise", "all"), ("t2", "column_wise", "2;6"),
          ("t3", "table_row_wise", "4-7"), ("t4", "data_parallel", "all")]
TABLES = [(1000, 3), (4000, 8), (2000, 2), (8000, 5), (50, 1)]


def test_each_sharding_type_sends_its_formula_volumes(tmp_path, small):
    spec = _spec(TABLES)
    B, D, eb, n, g, N = 1024, 32, 4, N_RANKS, G, NODES
    b = B // n
    plan = load_plan(_plan_csv(tmp_path, FORCED), spec, small, NODES, G, "baseline")
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    legacy = build_dlrm_graph(dataclasses.replace(spec, dense_allreduce="bucketed_per_table"), small, NODES,
                              gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    units = plan.per_rank
    # per-rank loads: row-wise shards serve P/n lookups, table-row-wise P/g, column-wise P over D/k columns
    assert [u.pooling for u in units[0] if u.table == 1] == [pytest.approx(8 / n)]
    assert [(u.pooling, u.dim) for u in units[2] if u.table == 2] == [(2, D // 2)]
    assert [u.pooling for u in units[5] if u.table == 3] == [pytest.approx(5 / g)]
    assert all(any(u.table == 4 and u.kind == "data_parallel" for u in us) for us in units)
    # forward All-to-All, per destination: b x (columns of the rank's table/row/column-wise shards), plus the
    # table-row-wise stage 2 (b x D to its rail)
    for r in range(n):
        cols = D * (r == 1) + D + (D // 2) * (r in (2, 6))
        rail = np.arange(n) % g == r % g
        expect = np.full(n, b * cols * eb) + np.where(rail, (4 <= r) * b * D * eb, 0.0)
        np.testing.assert_allclose(_a2a(graph, r, "a2a_fwd").send_bytes, expect)
        # stage 1: N * b * D to each local peer on the table-row-wise node, nothing elsewhere
        peers = np.arange(n) // g == r // g
        np.testing.assert_allclose(_a2a(graph, r, "a2a_fwd_intra").send_bytes,
                                   np.where(peers, (4 <= r) * N * b * D * eb, 0.0))
        # backward is the transpose of the forward
        bwd = _a2a(graph, r, "a2a_bwd").send_bytes
        np.testing.assert_allclose(bwd, [_a2a(graph, o, "a2a_fwd").send_bytes[r] for o in range(n)])
        # the replicated table's fp32 gradient: in the last DDP bucket (bucketed_per_table: its own all-reduce)
        ddp = [nd.size_bytes for nd in graph.programs[r].nodes if isinstance(nd, CollectiveNode)]
        old = [nd.size_bytes for nd in legacy.programs[r].nodes if isinstance(nd, CollectiveNode)
               and nd.name.startswith("ddp_")]
        assert len(ddp) == len(old) and ddp[-1] == pytest.approx(old[-1] + 50 * D * 4)
    # the world's received bytes equal the sent ones (nothing lost)
    sent = sum(_a2a(graph, r, "a2a_fwd").send_bytes.sum() for r in range(n))
    assert sent == pytest.approx(n * b * eb * (D + n * D + 2 * D // 2) + g * N * b * D * eb)


def test_estimator_formulas(small):
    spec = _spec(TABLES, dim=64)
    from simfuse.workloads.planner import _context

    ctx = _context(spec, small, N_RANKS, G, "baseline")
    opts = {(o.kind, o.shards): o for o in enumerate_options(ctx, 1, SHARDINGS)}
    b, D, eb, n, g = 1024 // N_RANKS, 64, 4, N_RANKS, G
    tw, rw = opts[("table_wise", 1)], opts[("row_wise", n)]
    assert tw.send_inter == pytest.approx(2 * (n - g) * b * D * eb)       # fwd + bwd to the other node
    assert rw.send_inter == tw.send_inter and rw.comp_s < tw.comp_s      # same bytes out, 1/n of the lookups
    assert rw.u_recv_inter == pytest.approx(n * tw.u_recv_inter)          # n partial sums per bag
    cw = opts[("column_wise", 2)]
    assert cw.send_inter == pytest.approx(tw.send_inter / 2) and cw.storage == pytest.approx(tw.storage / 2)
    dp = opts[("data_parallel", n)]
    assert dp.send_inter == 0 and dp.storage == pytest.approx(4000 * D * eb * 2)
    tr = opts[("table_row_wise", g)]
    assert tr.send_intra == pytest.approx(2 * NODES * b * D * eb * (g - 1))


def test_rank_format_round_trip():
    for ranks in [(0,), (0, 1, 2, 3), (3, 5, 6, 7), tuple(range(8))]:
        assert parse_ranks(format_ranks(ranks, 8), 8, "<t>", "ranks") == ranks


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables=st.lists(st.tuples(st.integers(1, 3_000_000), st.integers(1, 60)), min_size=1, max_size=8),
       mode=st.sampled_from(["baseline", "fused"]), memfrac=st.sampled_from([0.002, 0.01, 0.5]))
def test_planner_never_exceeds_memory(small, tables, mode, memfrac):
    spec = _spec(tables, memfrac=memfrac)
    budget = small.topology.device.memory_bytes * memfrac
    try:
        plan = plan_tables(spec, small, NODES, G, mode)
    except SpecError as exc:  # only when a table fits no sharding at all
        assert exc.field.startswith("embedding.rows")
        return
    assert plan.memory_bytes(spec).max() <= budget * (1 + 1e-9)
    assert sorted(tp.table for tp in plan.tables) == list(range(len(tables)))
    assert plan.estimated_critical_s <= min(plan.candidates.values()) * (1 + 1e-12)


def test_planner_prefers_the_dominant_option(small):
    # a 10-row table: replicating it costs nothing on the fabric but a 10-row all-reduce -> data_parallel
    plan = plan_tables(_spec([(10, 1)]), small, NODES, G, "baseline")
    assert plan.tables[0].sharding == "data_parallel"
    # a table too big for one GPU's budget but not for all of them: never table-wise
    big = _spec([(2_000_000, 4)], memfrac=0.002)
    plan = plan_tables(big, small, NODES, G, "baseline")
    assert plan.tables[0].sharding != "table_wise"


def test_plan_csv_round_trips(tmp_path, small):
    spec = _spec(TABLES)
    plans = {m: plan_tables(spec, small, NODES, G, m) for m in ("baseline", "fused")}
    path = write_plans(tmp_path, plans)
    for m, p in plans.items():
        q = load_plan(path, spec, small, NODES, G, m)
        assert [sorted(us, key=lambda u: u.table) for us in q.per_rank] == \
               [sorted(us, key=lambda u: u.table) for us in p.per_rank]
        assert q.estimated_critical_s == pytest.approx(p.estimated_critical_s, rel=1e-9)
        a = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=m, plan=p).iteration_time_s
        b = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=m, plan=q).iteration_time_s
        assert a == b


@pytest.mark.parametrize("row,field,text", [
    (("t9", "table_wise", "0"), "table (line 6)", "unknown table"),
    (("t0", "table_wise", "8"), "ranks (line 6)", "out of range"),
    (("t0", "table_wise", "0;1"), "ranks (line 6)", "exactly one rank"),
    (("t0", "diagonal", "0"), "sharding (line 6)", "unknown"),
    (("t3", "table_row_wise", "2-5"), "ranks (line 6)", "one node"),
    (("t3", "grid", "0-5"), "ranks (line 6)", "whole nodes"),
    (("t3", "grid", "2-5;0;1;6;7"), "ranks (line 6)", "not the 4 ranks of one node"),
])
def test_forced_plan_errors_name_file_and_field(tmp_path, small, row, field, text):
    rows = [r for r in FORCED if r[0] != row[0]] + [row]
    p = _plan_csv(tmp_path, rows)
    with pytest.raises(SpecError) as exc:
        load_plan(p, _spec(TABLES), small, NODES, G, "baseline")
    field = field.replace("line 6", f"line {len(rows) + 1}")  # the last CSV line (header is line 1)
    assert exc.value.source == str(p) and exc.value.field == field and text in exc.value.message


def test_forced_plan_memory_exceeded(tmp_path, small):
    spec = _spec([(3_000_000, 1), (3_000_000, 1)], memfrac=0.005)   # each table alone fits, both on one rank do not
    p = _plan_csv(tmp_path, [("t0", "table_wise", "0"), ("t1", "table_wise", "0")])
    with pytest.raises(SpecError) as exc:
        load_plan(p, spec, small, NODES, G, "baseline")
    assert exc.value.source == str(p) and exc.value.field == "ranks" and "rank 0" in exc.value.message
    p2 = _plan_csv(tmp_path, [("t0", "table_wise", "0")], "short.csv")
    with pytest.raises(SpecError) as exc:
        load_plan(p2, spec, small, NODES, G, "baseline")
    assert exc.value.field == "table" and "t1" in exc.value.message


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables=st.lists(st.tuples(st.integers(10, 400_000), st.integers(1, 40)), min_size=2, max_size=6),
       mode=st.sampled_from(["baseline", "fused"]))
def test_classes_fast_path_equals_full_on_planned_placements(small, tables, mode):
    spec = _spec(tables, batch=2048)
    plan = plan_tables(spec, small, NODES, G, mode)
    fast = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="classes", plan=plan)
    full = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="full", plan=plan)
    assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=0.02)


def test_forced_mixed_plan_classes_equal_full(tmp_path, small):
    spec = _spec(TABLES, batch=2048)
    for mode in ("baseline", "fused"):
        plan = load_plan(_plan_csv(tmp_path, FORCED), spec, small, NODES, G, mode)
        fast = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="classes", plan=plan)
        full = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="full", plan=plan)
        assert fast.iteration_time_s == pytest.approx(full.iteration_time_s, rel=0.02)


def test_scaling_modes_give_the_documented_batch(small):
    spec = _spec(TABLES)
    weak = parse_execution({"batch_per_gpu": "96"})
    strong = parse_execution({"global_batch": "4096"})
    for nodes in (1, 2):
        assert scaled_spec(spec, nodes, G, weak).global_batch == 96 * nodes * G
        assert scaled_spec(spec, nodes, G, strong).global_batch == 4096
        assert scaled_spec(spec, nodes, G, ExecutionSpec()).global_batch == spec.global_batch
    assert tuple(e.settings_of(DLRMSettings).scaling for e in (weak, strong, ExecutionSpec())) == (
        "weak", "strong", "model")
    with pytest.raises(SpecError) as exc:
        parse_execution({"batch_per_gpu": "96", "global_batch": "4096"})
    assert exc.value.field == "batch_per_gpu"
    res = simulate_workload(spec, small, 2, gpus_per_node=G, execution=parse_execution(
        {"batch_per_gpu": "64", "mode": "baseline"}))
    assert res["baseline"].extras.global_batch == 64 * 2 * G


def test_fused_knobs_tuned_only_when_left_at_defaults(small):
    spec = _spec(TABLES, batch=2048)
    res = simulate_workload(spec, small, 2, gpus_per_node=G, execution=parse_execution({"mode": "fused"}))
    assert res["fused"].extras.tuned and res["fused"].extras.knobs.slice_wgs in (1, 8)
    fixed = simulate_workload(spec, small, 2, gpus_per_node=G,
                              execution=parse_execution({"mode": "fused", "slice_wgs": "4"}))
    assert fixed["fused"].extras.knobs.slice_wgs == 4 and not fixed["fused"].extras.tuned
    off = simulate_workload(spec, small, 2, gpus_per_node=G,
                            execution=parse_execution({"mode": "fused", "tune_knobs": "off"}))
    assert not off["fused"].extras.tuned
    # the tuned run is never slower than the default knobs
    assert res["fused"].iteration_time_s <= off["fused"].iteration_time_s * (1 + 1e-12)


def test_cli_run_writes_plan_and_replays_it(root, tmp_path):
    import subprocess
    import sys

    import yaml

    m = tmp_path / "m.yaml"
    d = {"name": "t", "kind": "dlrm", "global_batch": 2048, "dense_features": 13, "bottom_mlp": [64, 32],
         "top_mlp": [64, 1], "interaction": {"kind": "dot"},
         "embedding": {"dim": 32, "placement": "planned", "tables": [{"rows": r, "pooling": p} for r, p in TABLES]}}
    m.write_text(yaml.safe_dump(d))
    topo = str(root / "topologies/h200_nvl8_ib_ndr.yaml")

    def run(*extra):
        r = subprocess.run([sys.executable, "-m", "simfuse.cli", "run", "--model", str(m), "--topology", topo,
                            "--nodes", "1", "--set", "tune_knobs=off", *extra], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    run("--out", str(tmp_path / "a"), "--batch-per-gpu", "256")
    plan = pd.read_csv(tmp_path / "a" / "plan.csv")
    assert set(plan["mode"]) == {"baseline", "fused"} and set(plan["sharding"]) <= set(SHARDINGS)
    assert {"table", "sharding", "ranks", "bytes", "estimated_cost_s"} <= set(plan.columns)
    run("--out", str(tmp_path / "b"), "--batch-per-gpu", "256", "--plan", str(tmp_path / "a" / "plan.csv"))
    a, b = pd.read_csv(tmp_path / "a" / "summary.csv"), pd.read_csv(tmp_path / "b" / "summary.csv")
    assert list(a["iteration_time_s"]) == list(b["iteration_time_s"])
    assert set(a["scaling"]) == {"weak"} and set(a["batch_per_gpu"]) == {256}
    assert set(b["placement"]) == {"forced"}


def test_bench_planner_smoke(root, tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_planner", root / "experiments/bench/bench_planner.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    out = tmp_path / "b.csv"
    df = mod.main(["--points", "planner:1,run:1:none", "--batch-per-gpu", "64", "--out", str(out)])
    assert set(df["what"]) == {"planner_baseline", "planner_fused", "planner_both", "run_both_modes"}
    assert {"machine", "date", "commit", "peak_rss_gib", "process_wall_s", "meets_target"} <= set(df.columns)
    assert math.isfinite(df["wall_s"].sum()) and (df["peak_rss_gib"] > 0).all()
    run = df[df["what"] == "run_both_modes"].iloc[0]
    assert run["uncertainty"] == "none" and run["gpus"] == 8 and run["global_batch"] == 64 * 8
    assert len(mod.main(["--points", "planner:1", "--batch-per-gpu", "64", "--out", str(out)])) == len(df) + 3
    with pytest.raises(SpecError):
        mod.main(["--points", "run:1", "--out", str(out)])


def test_sweep_carries_scaling_modes(root, tmp_path):
    import yaml

    from simfuse.sweeps import run_sweep

    m = tmp_path / "m.yaml"
    m.write_text(yaml.safe_dump({"name": "t", "kind": "dlrm", "global_batch": 2048, "dense_features": 13,
                                 "bottom_mlp": [64, 32], "top_mlp": [64, 1], "interaction": {"kind": "dot"},
                                 "embedding": {"dim": 32, "placement": "planned",
                                               "tables": [{"rows": r, "pooling": p} for r, p in TABLES]}}))
    topo = str(root / "topologies/h200_nvl8_ib_ndr.yaml")
    for scaling, settings_ in (("weak", {"batch_per_gpu": "32"}), ("strong", {"global_batch": "512"})):
        df = run_sweep(str(m), topo, [1, 2], tmp_path / scaling, mode="baseline", workers=1, progress=False,
                       settings={**settings_, "tune_knobs": "off"})
        assert set(df["scaling"]) == {scaling}
        expect = df["gpus"] * 32 if scaling == "weak" else 512
        assert (df["global_batch"] == expect).all()
        assert (tmp_path / scaling / "breakdown.png").exists()
