"""One table-row-wise traffic formula (:func:`simfuse.fused.twrw.twrw_stage1_bytes`, :func:`twrw_rail_bytes`) is
what the planner's estimator prices, what the DLRM builder's bulk exchanges send and what the fused operator's
workgroups push: each checked against the formula and the formula against a closed form."""

import numpy as np
import pandas as pd
import pytest

from simfuse.collectives import Layout
from simfuse.fused.knobs import DTYPE_BYTES
from simfuse.fused.twrw import TwrwEmbeddingPush, twrw_rail_bytes, twrw_stage1_bytes
from simfuse.graph import AllToAllVNode
from simfuse.spec import workload_from_dict
from simfuse.system import System
from simfuse.workloads.dlrm import build_dlrm_graph
from simfuse.workloads.dlrm_kernels import _pool_work
from simfuse.workloads.plan_file import load_plan
from simfuse.workloads.planner import _context, _hier_option

from ..conftest import make_topology

CASES = [(2, 4, 1024, 32, "fp32"), (3, 2, 384, 16, "fp16"), (4, 4, 2048, 64, "fp32")]


def _spec(B, D, dtype, tables=2):
    return workload_from_dict({
        "name": "twrw", "kind": "dlrm", "global_batch": B, "dense_features": 8, "bottom_mlp": [16, D],
        "top_mlp": [16, 1], "interaction": {"kind": "dot"},
        "embedding": {"dim": D, "dtype": dtype, "placement": "table_wise",
                      "tables": [{"rows": 4096, "pooling": 4}] * tables}}, "<test>")


@pytest.mark.parametrize("N, g, B, D, dtype", CASES)
def test_formula_is_the_closed_form(N, g, B, D, dtype):
    b, e = B // (N * g), DTYPE_BYTES[dtype]
    for t in (1, 3):
        assert twrw_stage1_bytes(N, b, D, e, t) == N * b * D * e * t      # every rank's bags, to their reducer
        assert twrw_rail_bytes(b, D, e, t) == b * D * e * t               # one rank's bags, to it on its rail
    per_rank = np.array([0.0, 2.0, 3.0])
    assert np.array_equal(twrw_rail_bytes(b, D, e, per_rank), per_rank * b * D * e)


@pytest.mark.parametrize("N, g, B, D, dtype", CASES)
def test_operator_workgroups_push_the_stage1_formula(N, g, B, D, dtype):
    """The per-workgroup destinations of TwrwEmbeddingPush (no closed form) sum to the formula per reducer."""
    lay, e, t = Layout(N, g), DTYPE_BYTES[dtype], 2
    n, b = N * g, B // (N * g)
    bags = TwrwEmbeddingPush.bags_for(b, 4)
    work = _pool_work("embedding_twrw", B, 4.0, D, e, tables=t, bags_per_wg=bags)
    for rank in (0, n - 1):
        op = TwrwEmbeddingPush(work, lay, [t] * n, rank, B, bags, D, e)
        dst, size = op.wg_destinations(rank)
        per_reducer = np.bincount(dst, weights=size, minlength=n)
        node = np.arange(n) // g == rank // g
        assert np.all(per_reducer[node] == twrw_stage1_bytes(N, b, D, e, t)) and not per_reducer[~node].any()
        rd, rb = op.bytes_by_destination(rank)
        assert np.array_equal(per_reducer[rd], rb)


@pytest.mark.parametrize("N, g, B, D, dtype", CASES)
def test_builder_exchanges_send_the_formula(tmp_path, N, g, B, D, dtype):
    """Baseline: table 0 table-row-wise on node 0, table 1 table-wise on the last rank; stage 1 sends the formula
    to each local peer, the rail exchange the rail formula to the same local rank of every node."""
    system = System.from_topology(make_topology(gpus_per_node=g, nics_per_node=g))
    spec, n, e = _spec(B, D, dtype), N * g, DTYPE_BYTES[dtype]
    b = B // n
    path = tmp_path / "plan.csv"
    pd.DataFrame([("t0", "table_row_wise", f"0-{g - 1}"), ("t1", "table_wise", str(n - 1))],
                 columns=["table", "sharding", "ranks"]).to_csv(path, index=False)
    plan = load_plan(path, spec, system, N, g, "baseline")
    graph = build_dlrm_graph(spec, system, N, gpus_per_node=g, mode="baseline", sim_mode="full", plan=plan)
    for rank in range(g):  # the holder node's ranks
        nodes = {nd.name: nd for nd in graph.programs[rank].nodes if isinstance(nd, AllToAllVNode)}
        intra = nodes["a2a_fwd_intra"].send_bytes
        local = np.arange(n) // g == 0
        assert np.all(intra[local] == twrw_stage1_bytes(N, b, D, e)) and not intra[~local].any()
        rail = np.arange(n) % g == rank % g
        assert np.all(nodes["a2a_fwd"].send_bytes[rail] == twrw_rail_bytes(b, D, e))
        assert not nodes["a2a_fwd"].send_bytes[~rail].any()


@pytest.mark.parametrize("N, g, B, D, dtype", CASES)
def test_planner_prices_the_formula(N, g, B, D, dtype):
    system = System.from_topology(make_topology(gpus_per_node=g, nics_per_node=g))
    spec, n, e = _spec(B, D, dtype), N * g, DTYPE_BYTES[dtype]
    b = B // n
    opt = _hier_option(_context(spec, system, n, g, "baseline"), 0, "table_row_wise", 1)
    assert opt.send_intra == 2 * (g - 1) * twrw_stage1_bytes(N, b, D, e)   # fwd + bwd, to each of g - 1 peers
    assert opt.send_inter == 2 * (N - 1) * twrw_rail_bytes(b, D, e)        # fwd + bwd, on the rail to N - 1 nodes
