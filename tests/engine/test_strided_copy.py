"""``device.strided_copy``: the measured rate of the DLRM concat copies beyond the L2 (closed forms, where it
applies, bad input)."""

import dataclasses

import pytest

from simfuse.costs import RooflineCostModel
from simfuse.engine import simulate_kernel
from simfuse.errors import SpecError
from simfuse.spec import workload_from_dict
from simfuse.system import System
from simfuse.workloads.dense import elementwise_work
from simfuse.workloads.dlrm_kernels import dense_elementwise

from ..conftest import make_topology

# round numbers: 4 TB/s at efficiency 0.8 (3.2 TB/s achievable), strided copies at 0.2 of 4 TB/s, L2 10 MB;
# kernels of 400 workgroups = two full waves of the 200 slots (no partial-wave term)
SC = {"source": "test", "efficiency": 0.2, "l2_mb": 10}


def _device(sc=SC):
    return make_topology(device_extra={"hbm_efficiency": 0.8, **({} if sc is None else {"strided_copy": sc})}).device


@pytest.mark.parametrize("nbytes", [40e6, 400e6])
def test_beyond_the_l2_a_strided_copy_runs_at_the_measured_rate(nbytes):
    r = simulate_kernel(elementwise_work("concat", nbytes, 0.0, "bf16", wgs=400, strided=True),
                        RooflineCostModel(_device()))
    assert r.time_s == pytest.approx(2e-6 + nbytes / (0.2 * 4e12), rel=1e-9)


def test_inside_the_l2_or_not_strided_or_not_declared_it_is_element_wise():
    plain = 2e-6 + 8e6 / 3.2e12
    assert simulate_kernel(elementwise_work("c", 8e6, 0.0, "bf16", wgs=400, strided=True),
                           RooflineCostModel(_device())).time_s == pytest.approx(plain, rel=1e-9)
    big = 2e-6 + 400e6 / 3.2e12
    assert simulate_kernel(elementwise_work("c", 400e6, 0.0, "bf16", wgs=400),
                           RooflineCostModel(_device())).time_s == pytest.approx(big, rel=1e-9)
    assert simulate_kernel(elementwise_work("c", 400e6, 0.0, "bf16", wgs=400, strided=True),
                           RooflineCostModel(_device(None))).time_s == pytest.approx(big, rel=1e-9)


def test_a_measured_rate_above_the_element_wise_one_never_speeds_a_copy_up():
    dev = _device({**SC, "efficiency": 0.95})  # faster than hbm_efficiency 0.8: the element-wise rate holds
    r = simulate_kernel(elementwise_work("c", 400e6, 0.0, "bf16", wgs=400, strided=True), RooflineCostModel(dev))
    assert r.time_s == pytest.approx(2e-6 + 400e6 / 3.2e12, rel=1e-9)


def test_h200_concat_at_the_one_node_batch_is_priced_as_measured():
    """The shipped H200 (calibrated cost model): the 92 MB embedding concat at 6,912 per GPU against the
    1.846-1.852 TB/s it was measured at (dense_ew_concat_h200_vs_sim.csv); the 28 MB one at 2,112 unchanged."""
    system = System.load("topologies/h200_nvl8_ib_ndr.yaml")
    big = elementwise_work("concat_embeddings", 92012544.0, 0.0, "fp16", strided=True)
    t = simulate_kernel(big, system.cost).time_s - system.cost.launch_latency_s(big)
    assert 92012544.0 / t / 1e12 == pytest.approx(1.848, rel=0.01)
    small = elementwise_work("concat_embeddings", 28114944.0, 0.0, "fp16", strided=True)
    plain = dataclasses.replace(small, shape=(("bytes", 28114944.0),))
    assert simulate_kernel(small, system.cost).time_s == simulate_kernel(plain, system.cost).time_s


def test_only_the_concat_copies_are_strided():
    spec = workload_from_dict({"name": "t", "kind": "dlrm", "global_batch": 64, "dense_features": 13,
                               "bottom_mlp": [64, 32], "top_mlp": [64, 1], "interaction": {"kind": "dcn"},
                               "embedding": {"dim": 32, "tables": [{"rows": 100, "pooling": 2}] * 3}}, "<test>")
    for fusion in ("epilogue", "unfused"):
        dew = dense_elementwise(dataclasses.replace(spec, dense_fusion=fusion), 64)
        kernels = dict(dew.all())
        flagged = {lbl for lbl, w in kernels.items() if dict(w.shape).get("strided")}
        assert flagged and flagged == {lbl for lbl in kernels if lbl.startswith("concat")}


@pytest.mark.parametrize("bad,field", [({"efficiency": 1.5}, "efficiency"), ({"efficiency": 0}, "efficiency"),
                                       ({"source": " "}, "source"), ({"l2_mb": -1}, "l2_mb"),
                                       ({"speed": 1}, "speed")])
def test_bad_values_name_the_field(bad, field):
    with pytest.raises(SpecError, match=field):
        _device({**SC, **bad})
