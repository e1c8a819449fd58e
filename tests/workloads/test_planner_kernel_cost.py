"""The planner prices a shard's forward pooling as the simulator prices its kernel: with a System, the cost
model's time of the pooling kernel of that shape (a calibrated model knows a narrow shard's layout and its
per-program cost, which the roofline does not); with a bare topology, the roofline.  The proposer's
candidates include the greedy without table-row-wise (as without grid), and the plan it returns is the
cheapest of its candidates."""

import dataclasses

import pytest

from simfuse.engine.compute import kernel_time_s
from simfuse.spec import load_workload
from simfuse.system import System
from simfuse.workloads.dlrm_kernels import _pool_work
from simfuse.workloads.planner import CANDIDATES, _context, plan_tables


@pytest.fixture(scope="module")
def h200(root):
    return System.load(root / "topologies" / "h200_nvl8_ib_ndr.yaml")


@pytest.fixture(scope="module")
def mlperf(root):
    return dataclasses.replace(load_workload(root / "models" / "dlrm_dcnv2_mlperf.yaml"), global_batch=131072)


@pytest.mark.parametrize("dim, lookups, rows", [(32, 3.0, 40_000_000), (128, 12.5, 5_000_000), (64, 1.0, 4000)])
def test_pooling_is_priced_by_the_systems_kernel_model(h200, mlperf, dim, lookups, rows):
    ctx = _context(mlperf, h200, 64, 8, "baseline")
    B, hbm = mlperf.global_batch, ctx.rates.hbm_bytes_per_s
    work = _pool_work("embedding_bag", B, lookups, dim, ctx.eb, bags_per_wg=4, rows=rows, out_eb=ctx.ceb)
    backward = ctx.pool_update_bytes(B, lookups, dim, rows) - ctx.pool_fwd_bytes(B, lookups, dim)
    assert ctx.pool_update_s(B, lookups, dim, rows) == pytest.approx(kernel_time_s(h200.cost, work) + backward / hbm)
    # a hierarchical shard's kernel: 4 bags a workgroup and no rows (the DLRM program's table-row-wise kernel)
    hier = _pool_work("embedding_bag", B, lookups, dim, ctx.eb, bags_per_wg=4, out_eb=ctx.ceb)
    assert ctx.pool_update_s(B, lookups, dim, rows, hier=True) == pytest.approx(
        kernel_time_s(h200.cost, hier) + backward / hbm)
    bare = _context(mlperf, h200.topology, 64, 8, "baseline")
    assert bare.pool_update_s(B, lookups, dim, rows) == pytest.approx(
        bare.pool_update_bytes(B, lookups, dim, rows) / hbm)


def test_a_narrow_shard_costs_more_per_column_where_the_kernel_model_says_so(h200, mlperf):
    """On the calibrated H200 model four 32-column shards pool slower than one 128-column shard (more programs,
    a narrower layout); the roofline prices them alike, give or take the ids."""
    ctx, bare = _context(mlperf, h200, 64, 8, "baseline"), _context(mlperf, h200.topology, 64, 8, "baseline")
    B, rows = mlperf.global_batch, 40_000_000

    def fwd(c, dim):
        return c.pool_update_s(B, 3.0, dim, rows) - c.pool_update_s(B, 0.0, dim, rows)

    assert 4 * fwd(ctx, 32) > 1.5 * fwd(ctx, 128)
    assert 4 * fwd(bare, 32) == pytest.approx(fwd(bare, 128), rel=0.25)


def test_eight_h200_nodes_drop_table_row_wise(h200, mlperf):
    """The case behind the fifth candidate: on 8 H200 nodes the greedy takes table-row-wise nodes for the hot
    tables first, and the baseline plan without them is estimated cheaper (and simulates faster)."""
    plan = plan_tables(mlperf, h200, 8, 8, "baseline")
    assert plan.candidates["greedy_no_twrw"] < plan.candidates["greedy"]
    assert plan.candidate == "greedy_no_twrw"
    assert not any(t.sharding == "table_row_wise" for t in plan.tables)


@pytest.mark.parametrize("nodes, mode", [(8, "baseline"), (8, "fused"), (16, "baseline")])
def test_the_plan_is_the_cheapest_candidate(h200, mlperf, nodes, mode):
    plan = plan_tables(mlperf, h200, nodes, 8, mode)
    assert "greedy_no_twrw" in CANDIDATES and set(plan.candidates) <= set(CANDIDATES)
    assert plan.estimated_critical_s == min(plan.candidates.values())
    if plan.candidate == "greedy_no_twrw":
        assert not any(t.sharding == "table_row_wise" for t in plan.tables)
