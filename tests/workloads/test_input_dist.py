"""``embedding.input_dist``: the sparse ids' All-to-All from the rank that reads a sample to the shard holders
(TorchRec's ``input_dist``, HugeCTR's data distributor), per sharding type against its formula, and where it
sits in the iteration (``prefetch`` beside it, ``inline`` before the lookups, ``none`` absent)."""

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfuse.errors import SpecError
from simfuse.graph import AllToAllVNode
from simfuse.spec import load_workload, workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulate_dlrm
from simfuse.workloads.plan_file import load_plan
from simfuse.workloads.planner import plan_tables

from ..conftest import make_topology
from .test_planner import FORCED, TABLES, _plan_csv

G, NODES = 4, 2
N = G * NODES


def _spec(tables=TABLES, batch=1024, dim=32, **emb):
    return workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": batch, "dense_features": 13,
                               "bottom_mlp": [64, dim], "top_mlp": [64, 1], "interaction": {"kind": "dot"},
                               "embedding": {"dim": dim, "placement": "planned",
                                             "tables": [{"rows": r, "pooling": p} for r, p in tables], **emb}},
                              "<test>")


@pytest.fixture(scope="module")
def small():
    return System.from_topology(make_topology(gpus_per_node=G, nics_per_node=G))


def _keys(graph, rank):
    found = [nd for nd in graph.programs[rank].nodes if isinstance(nd, AllToAllVNode) and nd.name == "a2a_input"]
    return found[0] if found else None


@pytest.mark.parametrize("key_dtype,kb", [("int64", 8), ("int32", 4)])
def test_each_sharding_type_receives_its_ids(tmp_path, small, key_dtype, kb):
    """FORCED: t0 (P=3) table-wise on rank 1, t1 (P=8) row-wise on all 8, t2 (P=2) column-wise on 2 and 6,
    t3 (P=5) table-row-wise on 4-7, t4 data-parallel.  Every rank sends holder ``h``, per own bag, the ids of
    the rows ``h`` serves and one 4-byte length per unit ``h`` holds."""
    spec = _spec(key_dtype=key_dtype)
    b = 1024 // N
    plan = load_plan(_plan_csv(tmp_path, FORCED), spec, small, NODES, G, "baseline")
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    ids = np.full(N, 8 / N)                  # t1: a row shard on every rank, P / n of the ids
    units = np.ones(N)
    ids[1] += 3                              # t0: all of its ids
    units[1] += 1
    ids[[2, 6]] += 2                         # t2: each column shard needs every id
    units[[2, 6]] += 1
    ids[4:] += 5 / G                         # t3: row shards on the node's G GPUs
    units[4:] += 1
    expect = b * (ids * kb + units * 4)      # t4 (data-parallel) needs nothing from other ranks
    for r in range(N):
        np.testing.assert_allclose(_keys(graph, r).send_bytes, expect)
    assert graph.meta["input_dist_bytes"] == pytest.approx(expect.sum())


def test_data_parallel_only_has_no_input_exchange(tmp_path, small):
    spec = _spec(tables=[(50, 2), (80, 1)])
    plan = load_plan(_plan_csv(tmp_path, [("t0", "data_parallel", "all"), ("t1", "data_parallel", "all")]),
                     spec, small, NODES, G, "baseline")
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", plan=plan)
    assert all(_keys(graph, r) is None for r in graph.programs)


def _phase_span(res, name):
    spans = [(t0, t1) for (lbl, t0, t1, *_s) in res.phases if lbl == name]
    return min(s[0] for s in spans), max(s[1] for s in spans)


@pytest.mark.parametrize("mode", ["baseline", "fused"])
def test_placement_in_the_iteration(small, mode):
    base = _spec()
    plan = plan_tables(base, small, NODES, G, mode)
    runs = {d: simulate_dlrm(dataclasses.replace(base, input_dist=d), small, NODES, gpus_per_node=G, mode=mode,
                             sim_mode="full", plan=plan) for d in ("none", "prefetch", "inline")}
    assert not any(lbl == "a2a_input" for (lbl, *_r) in runs["none"].phases)
    # prefetch: from the start, beside the iteration, which ends no sooner than it
    k0, k1 = _phase_span(runs["prefetch"], "a2a_input")
    assert k0 == 0.0 and runs["prefetch"].iteration_time_s >= k1
    # inline: the model-parallel lookups wait for this batch's ids
    k0, k1 = _phase_span(runs["inline"], "a2a_input")
    emb = "embedding_fwd" if mode == "baseline" else "embedding_fwd_fused"
    e0 = min(t0 for (lbl, t0, _t1, *_s) in runs["inline"].phases if lbl.startswith(emb))
    assert e0 >= k1 > 0.0
    assert runs["inline"].iteration_time_s >= runs["none"].iteration_time_s  # equal when the lookup is not critical
    assert runs["inline"].iteration_time_s >= runs["prefetch"].iteration_time_s


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables=st.lists(st.tuples(st.integers(20, 20000), st.integers(1, 12)), min_size=1, max_size=5),
       mode=st.sampled_from(["baseline", "fused"]), dist=st.sampled_from(["prefetch", "inline"]))
def test_classes_equal_full_with_input_dist(small, tables, mode, dist):
    spec = _spec(tables=tables, input_dist=dist)
    plan = plan_tables(spec, small, NODES, G, mode)
    full = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="full", plan=plan)
    cls = simulate_dlrm(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="classes", plan=plan)
    if cls.classes == 1:
        assert cls.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    # every rank sends the same ids vector; their sum is the world's received total
    g = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode=mode, sim_mode="full", plan=plan)
    sent = sum(_keys(g, r).send_bytes.sum() for r in range(N)) if _keys(g, 0) is not None else 0.0
    recv = sum(_keys(g, s).send_bytes[r] for r in range(N) for s in range(N)) if sent else 0.0
    assert sent == pytest.approx(recv)


@pytest.mark.parametrize("field,value", [("input_dist", "eager"), ("key_dtype", "int16"), ("key_dtype", 8)])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(SpecError, match=field):
        _spec(**{field: value})


def test_defaults_and_model_files():
    assert _spec().input_dist == "prefetch" and _spec().key_dtype == "int64"
    for f in ("dlrm_dcnv2_mlperf_hugectr", "dlrm_dcnv2_mlperf_hugectr_8n", "dlrm_dcnv2_mlperf_hugectr_16n"):
        s = load_workload(f"models/{f}.yaml")
        assert (s.input_dist, s.key_dtype) == ("prefetch", "int32")  # HugeCTR: uint32 keys, inter-iteration overlap



@pytest.mark.parametrize("dist", ["inline", "prefetch", "none"])
def test_planner_counts_the_ids_per_option(small, dist):
    """The estimator's id traffic per option with ``input_dist: inline``: ``x = b (P_shard k + 4)`` from every
    rank to each holder; a rank sends ``shards x`` split as the uniform volumes; nothing for data-parallel, and
    nothing for prefetched ids (they overlap the iteration, as TorchRec's estimator assumes) or ``none``."""
    from simfuse.workloads.planner import SHARDINGS, _context, enumerate_options

    spec = _spec(dim=64, input_dist=dist)
    ctx = _context(spec, small, N, G, "baseline")
    b, n, g, P = 1024 // N, N, G, 8.0  # table 1: 4,000 rows, 8 lookups per bag
    on = dist == "inline"
    seen = set()
    for o in enumerate_options(ctx, 1, SHARDINGS):
        seen.add(o.kind)
        x = b * (o.pooling * 8 + 4) * on
        if o.kind == "data_parallel":
            assert o.recv_inter_holder == o.u_send_inter == o.u_send_intra == 0.0
            continue
        assert o.pooling == pytest.approx({"table_wise": P, "column_wise": P, "row_wise": P / n}.get(
            o.kind, P / o.shards if o.kind == "table_row_wise" else P / g))
        assert o.recv_inter_holder == pytest.approx((n - g) * x)
        assert o.u_send_inter == pytest.approx(o.shards * x * (n - g) / n)
        assert o.u_send_intra == pytest.approx(o.shards * x * (g - 1) / n)
    assert {"table_wise", "row_wise", "column_wise", "table_row_wise", "grid", "data_parallel"} <= seen


def test_table_row_wise_over_several_nodes_is_enumerated(small):
    """Row shards over m whole nodes (m = 2 here): m g shards at P / (m g) lookups, each holder node sending its
    partial sums on the rails as the one-node option, every rank receiving m of them per bag."""
    from simfuse.workloads.planner import SHARDINGS, _context, enumerate_options

    ctx = _context(_spec(dim=64, input_dist="none"), small, N, G, "baseline")
    opts = {(o.kind, o.shards): o for o in enumerate_options(ctx, 1, SHARDINGS)}
    one, two = opts[("table_row_wise", G)], opts[("table_row_wise", 2 * G)]
    assert two.pooling == pytest.approx(one.pooling / 2) and two.comp_s < one.comp_s
    assert two.send_inter == pytest.approx(one.send_inter) and two.send_intra == pytest.approx(one.send_intra)
    assert two.u_recv_inter == pytest.approx(2 * one.u_recv_inter)
    assert two.storage == pytest.approx(one.storage / 2)


def test_ids_raise_every_sharded_options_estimate(small):
    """Counting inline ids never lowers an option's estimate and raises every sharded one's; a column split pays
    its table's ids once per column shard (every rank sends ``k x``), a row split only once in all."""
    from simfuse.workloads.planner import SHARDINGS, _context, _option_cost_alone, enumerate_options

    def opts(dist):
        ctx = _context(_spec(dim=64, input_dist=dist), small, N, G, "baseline")
        return ctx, {(o.kind, o.shards): o for o in enumerate_options(ctx, 1, SHARDINGS)}

    (c0, off), (c1, on) = opts("none"), opts("inline")
    for key, o in on.items():
        before, after = _option_cost_alone(c0, off[key]), _option_cost_alone(c1, o)
        assert after > before if key[0] != "data_parallel" else after == before
    tw, cw, rw = on[("table_wise", 1)], on[("column_wise", 2)], on[("row_wise", N)]
    assert cw.u_send_inter == pytest.approx(2 * tw.u_send_inter)
    assert rw.u_send_inter == pytest.approx(tw.u_send_inter * (8 / N * 8 + 4) * N / (8 * 8 + 4))
