"""``embedding.sparse_backward``: the model-parallel embedding backward as real implementations run it (HugeCTR's
index calculation + local reduce + update, FBGEMM's TBE backward) -- radix sort of the lookups' ids, run-length
encode, one fused segment-reduce + optimizer kernel over the distinct rows -- against closed forms, the expected
distinct rows against sampling, where the kernels sit in the iteration, and ``bytes`` (the model before
2026-12-05) unchanged."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.engine.compute import simulate_kernel
from simfuse.errors import SpecError
from simfuse.graph import ComputeNode
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph, simulate_dlrm
from simfuse.workloads.dlrm_kernels import sparse_update_works
from simfuse.workloads.plan_file import load_plan
from simfuse.workloads.sparse_backward import expected_distinct_rows, sparse_update_bytes

from ..conftest import make_topology
from .test_input_dist import NODES, G, _spec
from .test_planner import FORCED, _plan_csv


@pytest.fixture(scope="module")
def small():
    return System.from_topology(make_topology(gpus_per_node=G, nics_per_node=G))


def _bytes(work):
    return work.bytes_per_wg * work.num_workgroups


@given(rows=st.integers(1, 10**7), lookups=st.floats(0, 1e7))
@settings(max_examples=200, deadline=None)
def test_expected_distinct_rows_closed_form_and_bounds(rows, lookups):
    d = expected_distinct_rows(rows, lookups)
    assert 0.0 <= d <= min(rows, lookups) * (1 + 1e-12) + 1e-9
    if lookups >= 1:
        assert d >= 1.0 - 1e-9
    if rows > 1 and 1 <= lookups < 1e5:
        assert d == pytest.approx(rows * (1.0 - (1.0 - 1.0 / rows) ** lookups), rel=1e-9)


def test_expected_distinct_rows_matches_sampling():
    rng = np.random.default_rng(7)
    for rows, n in ((1000, 500), (40_000, 135_168), (1_000_000, 55_296), (16, 10_000)):
        seen = [np.unique(rng.integers(0, rows, n)).size for _ in range(20)]
        assert expected_distinct_rows(rows, n) == pytest.approx(np.mean(seen), rel=0.01)


def test_kernels_and_their_bytes():
    """Sort histogram (ids read), one scatter pass per 8-bit digit of the key space (pairs read and written, a
    strided copy), the run-length encode (ids read, distinct ids and counts written), then the update."""
    spec = _spec()
    B = 1024
    shards = [(1000, 3.0, 32), (300, 2.0, 16)]
    works = sparse_update_works("emb_update", spec, B, shards)
    names = [n for n, _ in works]
    n = B * 5.0
    assert names == ["emb_update_sort_hist", "emb_update_sort_pass0", "emb_update_sort_pass1",
                     "emb_update_unique", "emb_update"]  # 1,300 rows: 11 bits, 2 digits
    w = dict(works)
    assert _bytes(w["emb_update_sort_hist"]) == pytest.approx(4 * n)
    for i in (0, 1):
        assert _bytes(w[f"emb_update_sort_pass{i}"]) == pytest.approx(16 * n)
        assert dict(w[f"emb_update_sort_pass{i}"].shape).get("strided") == 1.0
    dist = [r * (1 - (1 - 1 / r) ** (B * p)) for r, p, _ in shards]
    assert _bytes(w["emb_update_unique"]) == pytest.approx(4 * n + 8 * sum(dist))
    eb, opt = 4, spec.optimizer_state_factor  # fp32 tables, comm dtype = table dtype
    want = sum(d * c * eb * (2 + 2 * opt) + B * p * c * eb + B * p * 8
               for d, (_, p, c) in zip(dist, shards, strict=True))
    assert _bytes(w["emb_update"]) == pytest.approx(want)
    assert sum(sparse_update_bytes(eb, eb, opt, B, r, p, c) for r, p, c in shards) == pytest.approx(want)


@pytest.mark.parametrize("rows,digits", [(2, 1), (256, 1), (257, 2), (65_536, 2), (65_537, 3), (10**7, 3),
                                         (2**24 + 1, 4)])
def test_radix_digits_follow_the_key_space(rows, digits):
    works = sparse_update_works("u", _spec(), 64, [(rows, 1.0, 32)])
    assert sum(1 for n, _ in works if n.startswith("u_sort_pass")) == digits


def test_no_lookups_no_kernels():
    assert sparse_update_works("u", _spec(), 64, [(100, 0.0, 32)]) == []
    assert sparse_update_works("u", _spec(), 0, [(100, 1.0, 32)]) == []


def test_uncongested_time_is_launches_plus_bytes_over_bandwidth(small):
    """Closed form on the round-number topology (efficiencies 1, no strided_copy): each kernel is its launch
    latency plus bytes / HBM bandwidth, up to the engine's wave quantisation (a partial last wave)."""
    spec = _spec()
    works = sparse_update_works("u", spec, 65_536, [(4_000_000, 8.0, 32)])
    dev = small.topology.device
    for _, w in works:
        t = simulate_kernel(w, small.cost).time_s
        lower = _bytes(w) / (dev.hbm_bw_bytes_per_s * dev.hbm_efficiency)
        assert t >= lower * (1 - 1e-9)
        assert t == pytest.approx(lower + small.cost.launch_latency_s(w), rel=0.05)


def test_in_the_iteration_after_the_gradients_arrive(tmp_path, small):
    """The chain starts on the backward All-to-All and runs sort -> passes -> encode -> update; every rank with a
    model-parallel shard has one chain, and the bytes model has a single update kernel."""
    spec = _spec()
    plan = load_plan(_plan_csv(tmp_path, FORCED), spec, small, NODES, G, "baseline")
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)
    for r in range(G * NODES):
        nodes = graph.programs[r].nodes
        chain = [nd for nd in nodes if isinstance(nd, ComputeNode) and nd.name.startswith("emb_update")
                 and not nd.name.startswith("emb_update_twrw") and not nd.name.startswith("emb_update_dp")]
        assert chain[0].name == "emb_update_sort_hist" and chain[-1].name == "emb_update"
        assert nodes[chain[0].deps[0]].name == "a2a_bwd"
        for a, b in zip(chain, chain[1:], strict=False):
            assert b.deps == (nodes.index(a),)
    old = _spec(sparse_backward="bytes")
    g_old = build_dlrm_graph(old, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full",
                             plan=load_plan(_plan_csv(tmp_path, FORCED), old, small, NODES, G, "baseline"))
    for r in range(G * NODES):
        names = [nd.name for nd in g_old.programs[r].nodes if nd.name.startswith("emb_update")
                 and not nd.name.startswith(("emb_update_twrw", "emb_update_dp"))]
        assert names == ["emb_update"]


def test_bytes_model_is_the_old_formula():
    spec = _spec(sparse_backward="bytes")
    ((_, w),) = sparse_update_works("u", spec, 512, [(1000, 3.0, 32), (50, 1.0, 32)])
    assert _bytes(w) == pytest.approx(512 * (4 * 32) * 4 * (2 + 2 * spec.optimizer_state_factor) + 512 * 64 * 4)


def test_sorted_backward_costs_more_than_bytes_where_lookups_are_distinct(small):
    """Large tables (every lookup a distinct row): the sorted model adds the sort and the per-lookup gradient
    gathers to the same row traffic, so a step cannot get shorter."""
    big = [(2_000_000, 8), (3_000_000, 6), (1_000_000, 4), (4_000_000, 2)]
    t_new = simulate_dlrm(_spec(big, batch=4096), small, NODES, mode="baseline").iteration_time_s
    t_old = simulate_dlrm(_spec(big, batch=4096, sparse_backward="bytes"), small, NODES,
                          mode="baseline").iteration_time_s
    assert t_new > t_old


def test_unknown_sparse_backward_is_rejected():
    with pytest.raises(SpecError) as exc:
        _spec(sparse_backward="hashed")
    assert exc.value.field.endswith("sparse_backward")
