"""Eager and CUDA-graph kernel launches: ``device.kernel_launch_latency_us`` / ``graph_launch_latency_us``, the
workload's ``launch`` field and ``--set launch=`` (closed forms, the calibrated model, bad input)."""

import pickle
from pathlib import Path

import numpy as np
import pytest
import yaml

from simfuse.costs import RooflineCostModel
from simfuse.engine import simulate_kernel
from simfuse.errors import SpecError
from simfuse.fused.knobs import parse_execution
from simfuse.spec import load_workload, topology_from_dict, workload_from_dict
from simfuse.system import System
from simfuse.workloads.dense import elementwise_work, gemm_work
from simfuse.workloads.run import simulate_workload, summary_rows

from ..conftest import make_topology

ROOT = Path(__file__).resolve().parents[2]
CURVE = {"source": "test", "dtype": "bf16", "floor_us": 5.0, "points": [[64, 0.25], [1024, 0.5], [4096, 1.0]]}


def _system(graph_us=0.5, curve=None):
    extra = {} if graph_us is None else {"graph_launch_latency_us": graph_us}
    if curve:
        extra["gemm_efficiency"] = curve
    return System.from_topology(make_topology(device_extra=extra))  # eager latency 2 us


def test_device_fields():
    dev = _system(0.5).topology.device
    assert dev.kernel_launch_latency_s == pytest.approx(2e-6) and dev.graph_launch_s == pytest.approx(0.5e-6)
    # not declared: a graph launch costs what an eager one does (no saving assumed)
    assert _system(None).topology.device.graph_launch_s == pytest.approx(2e-6)


@pytest.mark.parametrize("value", [-1.0, "fast", float("nan")])
def test_bad_graph_latency_names_the_field(value):
    with pytest.raises(SpecError, match="graph_launch_latency_us"):
        make_topology(device_extra={"graph_launch_latency_us": value})


def test_graph_charges_every_kernel_the_graph_latency():
    sysm = _system(0.5)
    g = sysm.with_launch("graph")
    assert (sysm.launch, g.launch) == ("eager", "graph")
    assert g.with_launch("graph") is g and g.with_launch("eager").launch == "eager"
    work = elementwise_work("ew", 64e6, 0.0, "bf16")
    eager_t = simulate_kernel(work, sysm.cost).time_s
    graph_t = simulate_kernel(work, g.cost).time_s
    # the kernel itself is the same; only the launch differs: 2 us -> 0.5 us
    assert eager_t - graph_t == pytest.approx(1.5e-6, rel=1e-9)
    assert g.cost.launch_latency_s(work) == pytest.approx(0.5e-6)
    with pytest.raises(ValueError, match="launch"):
        sysm.with_launch("lazy")


def test_graph_mode_survives_quantiles_draws_and_pickling():
    shipped = System.load(ROOT / "topologies" / "h200_nvl8_ib_ndr.yaml")
    g = shipped.with_launch("graph")
    lat = shipped.topology.device.graph_launch_s
    work = gemm_work("g", 1056, 512, 256, "bf16")
    for s in (g, g.at_quantile(0.9), g.draw(np.random.default_rng(0)), pickle.loads(pickle.dumps(g))):
        assert s.launch == "graph" and s.cost.launch_latency_s(work) == pytest.approx(lat)


def test_gemm_curve_floor_is_net_of_the_in_graph_latency():
    """The curve was measured in CUDA graphs: a tiny GEMM in a graph costs the measured floor (5 us); launched
    eagerly it costs the floor plus the eager-over-graph launch difference (2 - 0.5 us)."""
    sysm = _system(0.5, CURVE)
    work = gemm_work("g", 64, 64, 64, "bf16")
    assert simulate_kernel(work, sysm.with_launch("graph").cost).time_s == pytest.approx(5e-6, rel=1e-12)
    assert simulate_kernel(work, sysm.cost).time_s == pytest.approx(6.5e-6, rel=1e-12)
    # above the floor: launch + roofline / eff in either mode
    m, n, k = 256, 4096, 4096
    roof_s = max(2.0 * m * n * k / 1e15, (m * k + k * n + m * n) * 2 / 4e12)
    big = gemm_work("g", m, n, k, "bf16")
    assert simulate_kernel(big, RooflineCostModel(sysm.topology.device)).time_s == \
        pytest.approx(2e-6 + roof_s / 0.375, rel=1e-12)


def _dlrm(launch=None):
    data = yaml.safe_load((ROOT / "models" / "dlrm_synthetic.yaml").read_text())
    if launch is not None:
        data["launch"] = launch
    return workload_from_dict(data, "<test dlrm>")


def test_workload_launch_field_and_bad_values():
    assert _dlrm().launch == "eager" and _dlrm("graph").launch == "graph"
    with pytest.raises(SpecError, match="launch"):
        _dlrm("lazy")
    for name in ("dlrm_dcnv2_mlperf_hugectr", "dlrm_dcnv2_mlperf_hugectr_8n", "dlrm_dcnv2_mlperf_hugectr_16n"):
        assert load_workload(ROOT / "models" / f"{name}.yaml").launch == "graph"  # HugeCTR's use_cuda_graph
    with pytest.raises(SpecError, match="launch"):
        parse_execution({"launch": "sometimes"}, source="<test>")


def test_graph_run_is_shorter_by_the_launches_and_equal_without_a_saving():
    """A DLRM iteration under a CUDA graph: shorter than eager (each kernel on the critical path saves 1.5 us),
    and exactly the eager run when the device declares no in-graph saving.  The model file's ``launch`` and
    ``--set launch=`` agree; the summary row says which was used."""
    ex = parse_execution({"mode": "baseline", "uncertainty": "none"}, source="<test>")
    exg = parse_execution({"mode": "baseline", "uncertainty": "none", "launch": "graph"}, source="<test>")
    sysm = _system(0.5)
    eager = simulate_workload(_dlrm(), sysm, 1, execution=ex)["baseline"]
    graph = simulate_workload(_dlrm(), sysm, 1, execution=exg)["baseline"]
    from_file = simulate_workload(_dlrm("graph"), sysm, 1, execution=ex)["baseline"]
    assert graph.iteration_time_s == from_file.iteration_time_s < eager.iteration_time_s
    from simfuse.workloads.run import workload_graph

    prog = workload_graph(_dlrm(), sysm, 1, "baseline", execution=ex).programs[0]
    kernels = sum(1 for nd in prog.nodes if getattr(nd, "work", None) is not None)
    assert 1.5e-6 <= eager.iteration_time_s - graph.iteration_time_s <= 1.5e-6 * kernels * (1 + 1e-9)
    assert summary_rows("m", "t", 1, 8, {"baseline": graph}, exg)[0]["launch"] == "graph"
    assert summary_rows("m", "t", 1, 8, {"baseline": eager}, ex)[0]["launch"] == "eager"
    same = _system(None)
    assert simulate_workload(_dlrm(), same, 1, execution=exg)["baseline"].iteration_time_s == \
        simulate_workload(_dlrm(), same, 1, execution=ex)["baseline"].iteration_time_s


def test_shipped_topologies_declare_both_latencies():
    for name in ("h100_nvl8_ib_ndr", "h100_nvl8_ib_ndr_sharp", "h200_nvl8_ib_ndr", "h200_3tier_pods"):
        topo = topology_from_dict(yaml.safe_load((ROOT / "topologies" / f"{name}.yaml").read_text()), name)
        dev = topo.device
        assert dev.graph_launch_latency_s is not None
        assert 0 < dev.graph_launch_s < dev.kernel_launch_latency_s


def test_fused_op_under_a_cuda_graph():
    """``simfuse op --launch graph``: GEMV + AllReduce runs one compute kernel in either mode (the baseline's
    collective keeps NCCL's own launch cost), so each mode is shorter by exactly eager - graph = 1.5 us."""
    import simfuse
    from simfuse.fused.ops import make_op
    from simfuse.workloads.op import run_op

    sysm = _system(0.5)
    op = make_op("gemv_all_reduce", {"n": 4096, "k": 4096}, 1, 8)
    eager = run_op(op, sysm, 1, uncertainty="none")
    graph = run_op(op, sysm, 1, uncertainty="none", launch="graph")
    assert eager.baseline_time_s - graph.baseline_time_s == pytest.approx(1.5e-6, rel=1e-6)
    assert eager.fused_time_s - graph.fused_time_s == pytest.approx(1.5e-6, rel=1e-6)
    assert (eager.params["launch"], graph.params["launch"]) == ("eager", "graph")
    df = simfuse.op("gemv_all_reduce", sysm, 1, launch="graph", n=4096, k=4096)
    assert df["baseline_time_s"].iloc[0] == pytest.approx(graph.baseline_time_s, rel=1e-12)
    with pytest.raises(SpecError, match="launch"):
        simfuse.op("gemv_all_reduce", sysm, 1, launch="sometimes")
