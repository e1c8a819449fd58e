"""Physics invariants as properties.

* A collective on one rank moves nothing and costs nothing.
* A fused operator is never faster than its own compute kernel (the compute-only kernel of the baseline).
* The existing conservation/capacity checks live in tests/network (flows never exceed link capacity).

The first is enforced in ``run_collective`` and the executor; the second by the System's cost model
(:class:`simfuse.costs.base.FusedFloor`).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simfuse.collectives import OPS as COLLECTIVE_OPS
from simfuse.collectives import run_collective
from simfuse.fused.ops import make_op
from simfuse.spec import load_topology
from simfuse.system import System
from simfuse.workloads.op import run_op

from .conftest import TOPO

FEW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(scope="module")
def topo_plain():
    return load_topology(TOPO).replace(calibration=None)


@pytest.fixture(scope="module")
def topo_calibrated():
    return System.load(TOPO)


@FEW
@given(op=st.sampled_from(list(COLLECTIVE_OPS)), size=st.integers(1, 2**30))
def test_a_collective_on_one_rank_costs_nothing(topo_plain, op, size):
    r = run_collective(topo_plain, 1, op, size, gpus_per_node=1)
    assert r.time_s == 0.0


@FEW
@given(op=st.sampled_from(list(COLLECTIVE_OPS)), size=st.integers(1, 2**30), nodes=st.sampled_from([1, 2]))
def test_collective_time_is_finite_and_nonnegative(topo_plain, op, size, nodes):
    r = run_collective(topo_plain, nodes, op, size)
    assert 0.0 <= r.time_s < 10.0


def _op_params(name: str, scale: int) -> dict:
    return {"embedding_all_to_all": {"global_batch": 1024 * scale},
            "gemv_all_reduce": {"n": 1024 * scale, "k": 4096},
            "gemm_all_to_all": {"tokens": 256 * scale}}[name]


@FEW
@given(name=st.sampled_from(["embedding_all_to_all", "gemv_all_reduce", "gemm_all_to_all"]),
       scale=st.sampled_from([1, 2, 4, 8]), gpus=st.sampled_from([1, 2, 8]), calibrated=st.booleans())
def test_a_fused_operator_is_never_faster_than_its_compute_kernel(topo_plain, topo_calibrated, name, scale, gpus,
                                                                  calibrated):
    topo = topo_calibrated if calibrated else System.from_topology(topo_plain)
    op = make_op(name, _op_params(name, scale), 1, gpus)
    res = run_op(op, topo, 1)
    assert res.fused_time_s >= res.baseline_compute_s * (1 - 1e-9)


def test_one_gpu_shows_no_fused_speedup_from_communication(topo_plain):
    """On one GPU there is nothing to communicate: the baseline's collective costs nothing and the fused kernel
    is never faster than the plain one, so fusing cannot help."""
    for name in ("embedding_all_to_all", "gemv_all_reduce", "gemm_all_to_all"):
        op = make_op(name, _op_params(name, 1), 1, 1)
        res = run_op(op, System.from_topology(topo_plain), 1)
        assert res.speedup <= 1.0 + 1e-9
        assert res.baseline_exposed_comm_s == 0.0  # the baseline's collective on one rank costs nothing
