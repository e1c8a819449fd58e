"""Calibration profiles: writer/loader round trip, validation errors, topology overrides, the calibrated model."""

from __future__ import annotations

import copy
import math

import pytest
import yaml

from simfuse.calibrate.build import build_profile, read_inputs, write_yaml_atomic
from simfuse.costs.analytic import RooflineCostModel
from simfuse.costs.base import KernelWork
from simfuse.costs.calibrated import CalibratedCostModel, KernelFit, trace_kernel_name
from simfuse.errors import SpecError
from simfuse.profile.load import apply_to_topology, cost_model_for, load_profile, profile_from_dict

from .test_calibrate_fit import TRUE, make_synthetic_traces
from .test_calibrate_readers import DATA


@pytest.fixture(scope="module")
def profile_dict(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("prof")
    paths = make_synthetic_traces(tmp) + [DATA / "alltoall_perf_1node.log", DATA / "all_reduce_perf_1node.log",
                                          DATA / "nccl_2nodes.log", DATA / "torch_nccl_kineto.json"]
    return build_profile(read_inputs(paths))


def test_profile_round_trip(profile_dict, tmp_path):
    path = tmp_path / "p.yaml"
    write_yaml_atomic(path, profile_dict)
    prof = load_profile(path)
    assert {(k.kernel, k.variant, k.dtype) for k in prof.kernels} == {(*key, "fp32") for key in TRUE}
    assert prof.compute_units == 132
    assert set(prof.fabric) == {"scale_up", "scale_out"}
    assert prof.fabric["scale_up"].collective == "alltoall"
    assert prof.kernel_launch_latency_s == pytest.approx(5.5e-6, rel=0.1)
    assert [p for p in prof.points if p["kind"] == "collective"]
    assert prof.data["torch_ops"]
    assert [q for q in tmp_path.iterdir()] == [path]  # no temporary files left behind


@pytest.mark.parametrize("mutate, key", [
    (lambda d: d.pop("simfuse_calibration"), "simfuse_calibration"),
    (lambda d: d["kernels"][0].update(overhead_s=-1.0), "kernels[0].overhead_s"),
    (lambda d: d["kernels"][1].update(slots="many"), "kernels[1].slots"),
    (lambda d: d["kernels"][0].update(bw_gbps=3.0), "kernels[0].bw_gbps"),
    (lambda d: d["fabric"]["scale_up"].update(use="broadcast"), "fabric.scale_up.use"),
    (lambda d: d["fabric"].update(scale_sideways={}), "fabric.scale_sideways"),
    (lambda d: d["fabric"]["scale_out"]["collectives"]["all_reduce"].update(alpha_s="fast"),
     "fabric.scale_out.collectives.all_reduce.alpha_s"),
    (lambda d: d["points"][0].update(measured_s=0), "points[0].measured_s"),
])
def test_profile_validation_names_file_and_key(profile_dict, tmp_path, mutate, key):
    d = copy.deepcopy(profile_dict)
    mutate(d)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(d))
    with pytest.raises(SpecError) as err:
        load_profile(path)
    assert err.value.source == str(path) and err.value.field == key


def test_profile_not_yaml(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("kernels: [\n  - {a: 1\n")
    with pytest.raises(SpecError, match=r"bad.yaml: line \d+: not valid YAML"):
        load_profile(path)


def test_apply_to_topology(profile_dict, h200, tmp_path):
    prof = profile_from_dict(profile_dict, "<test>")
    spec = apply_to_topology(h200, prof)
    up = prof.fabric["scale_up"]
    assert spec.scale_up.latency_s == pytest.approx(up.alpha_s)
    assert spec.scale_up.effective_bw_bytes_per_s == pytest.approx(up.beta_bytes_per_s)
    assert spec.scale_up.bw_bytes_per_s == h200.scale_up.bw_bytes_per_s  # beta < nominal: efficiency only
    out = prof.fabric["scale_out"]
    assert spec.scale_out.latency_s == pytest.approx(out.alpha_s)
    assert spec.scale_out.effective_nic_bw_bytes_per_s == pytest.approx(out.beta_bytes_per_s)  # 1 NIC per GPU
    assert spec.device.kernel_launch_latency_s == pytest.approx(prof.kernel_launch_latency_s)
    assert spec.device.compute_units == h200.device.compute_units


def test_apply_never_raises_a_link_above_line_rate(profile_dict, h200):
    """Wherever a profile is applied (not only ``calibrate --topology``): a fitted rate above the line rate is
    refused with the reason; within the measurement tolerance the link runs at its line rate."""
    d = copy.deepcopy(profile_dict)
    d["fabric"]["scale_up"]["collectives"]["alltoall"]["beta_bytes_per_s"] = 480e9
    with pytest.raises(SpecError, match="fabric.scale_up: fitted rate 480 GB/s per GPU is above the topology's "
                                        "line rate 450 GB/s"):
        apply_to_topology(h200, profile_from_dict(d))
    d["fabric"]["scale_up"]["collectives"]["alltoall"]["beta_bytes_per_s"] = 455e9  # within 3%
    spec = apply_to_topology(h200, profile_from_dict(d))
    assert spec.scale_up.bw_bytes_per_s == h200.scale_up.bw_bytes_per_s and spec.scale_up.efficiency == 1.0


def test_apply_refuses_a_nic_above_its_line_rate_and_a_huge_latency(profile_dict, h200):
    # issue 35: a profile written without --topology raised a 200 Gb/s (25 GB/s) NIC to 26.2 GB/s
    gh200 = h200.with_overrides({"scale_out.nic_bw_bytes_per_s": 25e9, "scale_out.nics_per_node": 1,
                                 "scale_up.gpus_per_node": 1})
    d = copy.deepcopy(profile_dict)
    lv = d["fabric"]["scale_out"]
    lv["ranks"], lv["hosts"] = 2, 2
    for c in lv["collectives"].values():
        c["beta_bytes_per_s"], c["ranks"] = 26.2e9, 2
    with pytest.raises(SpecError, match="fitted rate 26.2 GB/s per NIC is above the topology's line rate 25 GB/s"):
        apply_to_topology(gh200, profile_from_dict(d))
    d = copy.deepcopy(profile_dict)
    for c in d["fabric"]["scale_out"]["collectives"].values():
        c["alpha_s"] = 3.53e-3  # issue 35's DGX Spark all-gather fit
    with pytest.raises(SpecError, match="fitted latency 3530 us is above the physical bound"):
        apply_to_topology(h200, profile_from_dict(d))


def test_apply_maps_per_nic_with_the_logs_gpus_per_node(profile_dict, h200):
    """A log of 2 GPUs per node on an 8-GPU / 4-NIC topology: its 2 GPUs share min(4, 2) = 2 NICs, so the per-GPU
    bus bandwidth is the per-NIC rate (not x 8 / 4: the false positive of issue 35)."""
    topo = h200.with_overrides({"scale_out.nics_per_node": 4})
    d = copy.deepcopy(profile_dict)
    lv = d["fabric"]["scale_out"]
    lv["ranks"], lv["hosts"] = 4, 2
    for c in lv["collectives"].values():
        c["beta_bytes_per_s"], c["ranks"] = 40e9, 4
    spec = apply_to_topology(topo, profile_from_dict(d))
    assert spec.scale_out.effective_nic_bw_bytes_per_s == pytest.approx(40e9)


def test_cost_model_for(profile_dict, h200, tmp_path):
    assert isinstance(cost_model_for(h200.replace(calibration=None)), RooflineCostModel)
    path = tmp_path / "p.yaml"
    write_yaml_atomic(path, profile_dict)
    cm = cost_model_for(h200.replace(calibration=str(path)))
    assert isinstance(cm, CalibratedCostModel)
    # Simulator names map to the trace kernels; the fit is used at full occupancy.
    work = KernelWork("embedding_bag", 10_000, 0.0, 65536.0, dtype="fp32", variant="fused")
    true = TRUE[("embedding_all_to_all", "fused")]
    assert cm.slots(work) == true.slots
    assert cm.workgroup_time_s(work, true.slots) == pytest.approx(true.full_occupancy_time_s(65536.0, 0.0), rel=0.02)
    assert cm.launch_latency_s(work) == pytest.approx(true.launch_latency_s, rel=0.02)
    # Partial waves are faster, never slower.
    assert cm.workgroup_time_s(work, 10) < cm.workgroup_time_s(work, true.slots)
    # Unknown kernels and dtypes fall back to the roofline of the calibrated device.
    mlp = KernelWork("mlp", 100, 1e9, 1e6, dtype="bf16")
    roof = RooflineCostModel(apply_to_topology(h200, load_profile(path)).device)
    assert cm.workgroup_time_s(mlp, 50) == roof.workgroup_time_s(mlp, 50)
    assert cm.launch_latency_s(mlp) == roof.launch_latency_s(mlp)
    bf16 = KernelWork("embedding_bag", 100, 0.0, 1e4, dtype="bf16")
    assert cm.slots(bf16) == roof.slots(bf16)


def test_fused_falls_back_to_compute_fit_times_slowdown(h200):
    fit = KernelFit("gemv_all_reduce", "compute", "bf16", 1e-6, 1e10, None, 200, 4e-6)
    cm = CalibratedCostModel({("gemv_all_reduce", "compute", "bf16"): fit}, RooflineCostModel(h200.device),
                             fused_slowdown={("gemv_all_reduce", "bf16"): 1.25}, compute_units=132)
    work = KernelWork("gemv", 400, 0.0, 1e4, dtype="bf16", variant="fused")
    base = KernelWork("gemv", 400, 0.0, 1e4, dtype="bf16", variant="compute")
    assert cm.workgroup_time_s(work, 200) == pytest.approx(1.25 * cm.workgroup_time_s(base, 200))
    assert trace_kernel_name("gemm") == "gemm_all_to_all" and trace_kernel_name("custom") == "custom"
    assert math.isclose(cm.workgroup_time_s(base, 200), 2e-6)


def test_calibrated_model_falls_back_outside_traced_range(profile_dict, h200, tmp_path):
    from simfuse.costs.calibrated import traced_ranges

    path = tmp_path / "p.yaml"
    write_yaml_atomic(path, profile_dict)
    spec = h200.replace(calibration=str(path))
    cm = cost_model_for(spec)
    ranges = traced_ranges(cm_points(path))
    if not ranges:
        pytest.skip("profile fixture carries no kernel points")
    (kernel, dtype), (b_lo, b_hi, f_lo, f_hi) = next(iter(ranges.items()))
    sim_name = {"embedding_all_to_all": "embedding_bag", "gemv_all_reduce": "gemv", "gemm_all_to_all": "gemm"}[kernel]
    inside = KernelWork(sim_name, 1000, f_hi, b_hi, dtype=dtype, variant="compute")
    outside = KernelWork(sim_name, 1000, f_hi * 100, b_hi * 100, dtype=dtype, variant="compute")
    assert cm.lookup(inside) is not None
    assert cm.lookup(outside) is None  # roofline beyond 4x the traced range
    roof = RooflineCostModel(spec.device)
    assert cm.workgroup_time_s(outside, 100) == pytest.approx(roof.workgroup_time_s(outside, 100))
    assert cost_model_for(spec, extrapolate=True).lookup(outside) is not None


def cm_points(path):
    from simfuse.profile.load import load_profile

    return load_profile(path).points


def test_system_reads_its_profile_once(profile_dict, h200, tmp_path, monkeypatch):
    """``System.from_topology`` hands the profile it loaded to ``cost_model_for`` (the 100 KB H200 profile was
    parsed twice per ``simfuse run``); the cost model is the same as one built from the file."""
    import simfuse.profile.load as prof
    from simfuse.system import System

    path = tmp_path / "p.yaml"
    write_yaml_atomic(path, profile_dict)
    spec = h200.replace(calibration=str(path))
    reads = []
    real = prof.load_profile
    monkeypatch.setattr(prof, "load_profile", lambda p: reads.append(p) or real(p))
    system = System.from_topology(spec)
    assert len(reads) == 1
    work = KernelWork("embedding_bag", 10_000, 0.0, 65536.0, dtype="fp32", variant="fused")
    direct = cost_model_for(spec)
    assert len(reads) == 2
    assert system.cost.inner.workgroup_time_s(work, 100) == direct.workgroup_time_s(work, 100)
