"""The cost guard on the symmetric graph workloads (MoE layer, TP decode): flows grouped by route class, and the
fused operators' per-rank arrays priced once per run (simfuse/guard.py SYMMETRIC_ROUTE_CLASSES,
MOE_SECONDS_PER_GPU, DECODE_SECONDS_PER_GPU)."""

import pytest

from simfuse import guard
from simfuse.guard import estimate_run
from simfuse.spec import load_topology
from simfuse.spec.workload import load_workload

from .conftest import ROOT


@pytest.fixture(scope="module")
def topo():
    return load_topology(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml")


@pytest.mark.parametrize("model,per_gpu", [("moe_layer", guard.MOE_SECONDS_PER_GPU),
                                           ("transformer_tp_decode", guard.DECODE_SECONDS_PER_GPU)])
def test_estimate_grows_by_the_array_term_per_gpu(topo, model, per_gpu):
    spec = load_workload(ROOT / "models" / f"{model}.yaml")
    small, big = (estimate_run(spec, topo, n, 8).seconds for n in (64, 512))
    # past 64 nodes the flows no longer grow (grouped by route class, or capped at the MoE's tiles): only the
    # per-rank arrays do
    assert big - small == pytest.approx(per_gpu * (512 - 64) * 8, rel=1e-6)


def test_symmetric_flows_do_not_grow_with_peers(topo):
    spec = load_workload(ROOT / "models" / "transformer_tp_decode.yaml")
    from simfuse.workloads import workload_for

    w = workload_for(spec)
    few, many = (w.estimate(guard, topo, n, 8, "auto", None, 1) for n in (2, 256))
    assert few.flows == many.flows > 0
    waves = few.waves_per_rank
    assert few.flows <= waves * guard.SYMMETRIC_ROUTE_CLASSES
