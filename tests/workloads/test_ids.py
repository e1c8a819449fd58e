"""The ids' exchange (simfuse/workloads/ids.py): expected distinct ids under uniform and Zipf access against
their closed forms, the wire bytes with and without deduplication, and the builder and the planner using them."""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.errors import SpecError
from simfuse.graph import AllToAllVNode
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph
from simfuse.workloads.ids import INDEX_BYTES, expected_distinct, ids_bytes
from simfuse.workloads.plan_file import load_plan
from simfuse.workloads.planner import SHARDINGS, _context, enumerate_options

from ..conftest import make_topology
from .test_input_dist import _spec
from .test_planner import FORCED, TABLES, _plan_csv

G, NODES = 4, 2
N = G * NODES


def _brute(rows: int, draws: float, s: float) -> float:
    """``sum_i 1 - (1 - p_i)^n`` with ``p_i = i^-s / H`` over every row (the definition)."""
    w = np.arange(1, rows + 1, dtype=float) ** -s
    p = w / w.sum()
    return float((1.0 - (1.0 - p) ** draws).sum())


@pytest.mark.parametrize("rows,draws", [(1, 5), (3, 1), (3, 100), (1000, 1), (1000, 1000), (4e7, 128),
                                        (4e7, 1e6), (7, 2.5)])
def test_uniform_is_the_closed_form(rows, draws):
    # rel 1e-8: the naive ``(1 - 1/R)^n`` loses digits for R = 4e7 (the function uses expm1 / log1p)
    assert expected_distinct(rows, draws) == pytest.approx(min(draws, rows * (1 - (1 - 1 / rows) ** draws)),
                                                           rel=1e-8)


def test_one_draw_and_no_draw():
    assert expected_distinct(4e7, 1, 1.05) == pytest.approx(1.0)
    assert expected_distinct(4e7, 0, 1.05) == 0.0 and expected_distinct(0, 10) == 0.0


@pytest.mark.parametrize("rows", [10, 4096, 50_000, 300_000])
@pytest.mark.parametrize("s", [0.5, 1.0, 1.05, 1.3])
@pytest.mark.parametrize("draws", [1, 128, 20_000])
def test_zipf_matches_the_exact_sum(rows, s, draws):
    assert expected_distinct(rows, draws, s) == pytest.approx(_brute(rows, draws, s), rel=1e-4)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 10**8), draws=st.floats(1, 1e7), s=st.floats(0.0, 2.0))
def test_bounds_and_monotonicity(rows, draws, s):
    d = expected_distinct(rows, draws, s)
    assert 0 < d <= min(rows, draws) * (1 + 1e-12)
    assert expected_distinct(rows, draws * 2, s) >= d * (1 - 1e-9)          # more draws, more distinct
    assert expected_distinct(rows, draws, s + 0.3) <= d * (1 + 1e-6) + 1e-9  # more skew, fewer distinct


def test_wire_bytes():
    b, P = 128, 12.5
    assert ids_bytes(b, P, 4e7, "int64") == b * (P * 8 + 4)
    assert ids_bytes(b, P, 4e7, "int32") == b * (P * 4 + 4)
    d = expected_distinct(4e7, b, 1.05)
    assert d < b  # a skewed law repeats bags
    assert ids_bytes(b, P, 4e7, "int64", True, 1.05) == pytest.approx(d * (P * 8 + 4) + b * INDEX_BYTES)
    # uniform ids over a large table hardly repeat: deduplication then costs the per-bag index
    assert ids_bytes(b, P, 4e7, "int64", True, 0.0) > ids_bytes(b, P, 4e7, "int64")
    # a 3-row table: at most 3 distinct bags
    assert ids_bytes(b, 1, 3, "int64", True, 0.0) <= 3 * 12 + b * INDEX_BYTES
    assert ids_bytes(0, P, 10, "int64") == ids_bytes(b, 0, 10, "int64") == 0.0


@pytest.fixture(scope="module")
def small():
    return System.from_topology(make_topology(gpus_per_node=G, nics_per_node=G))


@pytest.mark.parametrize("dedup,key", [(False, "int64"), (True, "int64"), (True, "int32")])
def test_builder_sends_the_formula(tmp_path, small, dedup, key):
    """Every rank sends holder ``h`` the sum over ``h``'s sharded units of :func:`ids_bytes` (table rows, the
    unit's lookups per bag): t0 table-wise on 1, t1 row-wise on all, t2 column-wise on 2 and 6, t3
    table-row-wise on 4-7, t4 data-parallel (nothing)."""
    spec = _spec(key_dtype=key, ids_dedup=dedup, ids_zipf_s=1.1)
    b = 1024 // N
    plan = load_plan(_plan_csv(tmp_path, FORCED), spec, small, NODES, G, "baseline")
    graph = build_dlrm_graph(spec, small, NODES, gpus_per_node=G, mode="baseline", sim_mode="full", plan=plan)

    def x(t, lookups):
        return ids_bytes(b, lookups, TABLES[t][0], key, dedup, 1.1)

    expect = np.full(N, x(1, TABLES[1][1] / N))
    expect[1] += x(0, TABLES[0][1])
    expect[[2, 6]] += x(2, TABLES[2][1])
    expect[4:] += x(3, TABLES[3][1] / G)
    for r in range(N):
        (keys,) = [nd for nd in graph.programs[r].nodes if isinstance(nd, AllToAllVNode) and nd.name == "a2a_input"]
        np.testing.assert_allclose(keys.send_bytes, expect, rtol=1e-12)
    if dedup and key == "int64":  # skewed ids over a small table repeat bags: fewer bytes than every bag's ids
        assert x(0, 3) < ids_bytes(b, 3, 1000, key)


@pytest.mark.parametrize("dist", ["prefetch", "inline"])
def test_planner_ingress_uses_the_formula(small, dist):
    """Each holder of an option receives ``x`` from every other rank, ``x`` the builder's formula; prefetched ids
    are kept apart from the iteration's traffic (the ingress bound), inline ids join it."""
    spec = _spec(dim=64, input_dist=dist, ids_dedup=True, ids_zipf_s=1.05)
    ctx = _context(spec, small, N, G, "baseline")
    b = 1024 // N
    for o in enumerate_options(ctx, 1, SHARDINGS):
        if o.kind == "data_parallel":
            continue
        x = ids_bytes(b, o.pooling, TABLES[1][0], "int64", True, 1.05)
        got = o.ids_recv_inter_holder if dist == "prefetch" else o.recv_inter_holder
        assert got == pytest.approx((N - G) * x)
        if dist == "prefetch":
            assert o.recv_inter_holder == 0.0 and o.u_send_inter == 0.0
            assert o.u_ids_send_inter == pytest.approx(o.shards * x * (N - G) / N)


def test_prefetched_ids_bound_the_cost(small):
    """The ingress bound: a rank's cost is at least its prefetched ids' time on its links, and equals the
    iteration's cost when they are few."""
    from simfuse.workloads.planner import _option_cost_alone

    for pooling, bound in ((1.0, False), (5000.0, True)):
        tables = [(4000, pooling)]
        pre = _context(_spec(tables=tables, dim=8), small, N, G, "baseline")
        off = _context(_spec(tables=tables, dim=8, input_dist="none"), small, N, G, "baseline")
        o_pre = {o.kind: o for o in enumerate_options(pre, 0, ("table_wise",))}["table_wise"]
        o_off = {o.kind: o for o in enumerate_options(off, 0, ("table_wise",))}["table_wise"]
        ing = pre.link_s(0.0, 0.0, o_pre.ids_recv_intra_holder, o_pre.ids_recv_inter_holder)
        cost = _option_cost_alone(pre, o_pre)
        assert cost == pytest.approx(max(_option_cost_alone(off, o_off), ing))
        assert (ing > _option_cost_alone(off, o_off)) == bound


@pytest.mark.parametrize("field,value", [("ids_dedup", "yes"), ("ids_zipf_s", -0.5), ("ids_zipf_s", 9),
                                         ("data_parallel_below_mib", -1)])
def test_bad_values_name_the_field(field, value):
    with pytest.raises(SpecError, match=field):
        _spec(**{field: value})


def test_defaults():
    s = _spec()
    assert (s.ids_dedup, s.data_parallel_below_bytes) == (False, 0.0)
    assert s.ids_zipf_s == pytest.approx(1.05)
    assert dataclasses.replace(s, ids_dedup=True).ids_dedup
    assert math.isclose(_spec(data_parallel_below_mib=2).data_parallel_below_bytes, 2 * 2**20)
