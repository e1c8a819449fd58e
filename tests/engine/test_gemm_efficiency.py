"""``device.gemm_efficiency``: the measured small-M GEMM curve (closed forms, precedence, bad input)."""

import csv
import math
from dataclasses import replace

import pytest
import yaml

from simfuse.costs import RooflineCostModel
from simfuse.costs.calibrated import CalibratedCostModel, DenseFit
from simfuse.engine import simulate_kernel
from simfuse.errors import SpecError
from simfuse.spec import load_topology
from simfuse.system import System
from simfuse.workloads.dense import gemm_work

from ..conftest import make_topology

# round numbers: 1000 TFLOP/s bf16, 4 TB/s, efficiencies 1, launch 2 us (make_topology); floor 5 us per call
CURVE = {"source": "test", "dtype": "bf16", "floor_us": 5.0, "points": [[64, 0.25], [1024, 0.5], [4096, 1.0]]}


def _device(curve=CURVE):
    return make_topology(device_extra={} if curve is None else {"gemm_efficiency": curve}).device


def test_closed_form_under_the_curve():
    dev = _device()
    # M = 256 lies halfway (in log M) between 64 and 1024: eff = (0.25 + 0.5) / 2
    m, n, k = 256, 4096, 4096
    roof_s = max(2.0 * m * n * k / 1e15, (m * k + k * n + m * n) * 2 / 4e12)
    r = simulate_kernel(gemm_work("g", m, n, k, "bf16"), RooflineCostModel(dev))
    assert r.time_s == pytest.approx(2e-6 + roof_s / 0.375, rel=1e-12)


def test_floor_includes_the_launch_latency_once():
    # a tiny GEMM costs the measured per-call floor in total: launch (2 us) + floor less launch (3 us)
    r = simulate_kernel(gemm_work("g", 64, 64, 64, "bf16"), RooflineCostModel(_device()))
    assert r.time_s == pytest.approx(5e-6, rel=1e-12)


def test_below_the_first_point_holds_its_efficiency():
    m, n, k = 16, 8192, 8192
    roof_s = max(2.0 * m * n * k / 1e15, (m * k + k * n + m * n) * 2 / 4e12)
    r = simulate_kernel(gemm_work("g", m, n, k, "bf16"), RooflineCostModel(_device()))
    assert r.time_s == pytest.approx(2e-6 + roof_s / 0.25, rel=1e-12)


@pytest.mark.parametrize("work", [gemm_work("big", 8192, 4096, 4096, "bf16"),  # M beyond the last point
                                  gemm_work("fp32", 256, 4096, 4096, "fp32"),  # another dtype than measured
                                  replace(gemm_work("fused", 256, 4096, 4096, "bf16"), variant="fused")],
                         ids=["large-M", "fp32", "fused-variant"])
def test_outside_the_curve_unchanged(work):
    with_curve = simulate_kernel(work, RooflineCostModel(_device())).time_s
    without = simulate_kernel(work, RooflineCostModel(_device(None))).time_s
    assert with_curve == without


def test_profile_dense_fit_wins_over_the_curve():
    dev = _device()
    fit = DenseFit("gemm", "bf16", 500e12, 0.0, 64, 16384)
    cm = CalibratedCostModel({}, RooflineCostModel(dev), dense_fits={("gemm", "bf16"): fit})
    w = gemm_work("g", 256, 4096, 4096, "bf16")
    assert simulate_kernel(w, cm).time_s == pytest.approx(2e-6 + 2.0 * 256 * 4096 * 4096 / 500e12, rel=1e-12)
    # without a dense fit the calibrated model prices it by the curve, with the device's launch latency
    bare = CalibratedCostModel({}, RooflineCostModel(dev))
    assert simulate_kernel(w, bare).time_s == simulate_kernel(w, RooflineCostModel(dev)).time_s


def test_shipped_h200_describes_its_measurement_better(root):
    """The shipped H200 device (profile applied: launch latency 2.2 us) against the table the curve was fitted on:
    the curve alone (roofline model of that device) beats the tiled roofline by far (fit report: 16% rms against
    70%); the whole shipped cost model (the profile's Kineto GEMM fit where it covers the shape, the curve
    elsewhere) also beats the same model without the curve."""
    topo = load_topology(root / "topologies" / "h200_nvl8_ib_ndr.yaml")
    assert topo.device.gemm_efficiency is not None
    with open(root / topo.device.gemm_efficiency.source) as fh:
        rows = list(csv.DictReader(fh))

    def rms(cost):
        errs = []
        for r in rows:
            w = gemm_work("g", int(r["m"]), int(r["n"]), int(r["k"]), "bf16")
            errs.append(simulate_kernel(w, cost).time_s / (float(r["median_us"]) * 1e-6) - 1.0)
        return math.sqrt(sum(e * e for e in errs) / len(errs))

    system = System.from_topology(topo)
    no_curve = replace(system.topology.device, gemm_efficiency=None)
    curve_alone = rms(RooflineCostModel(system.topology.device))
    assert curve_alone < 0.25 and curve_alone < rms(RooflineCostModel(no_curve)) / 2
    off = System.from_topology(topo.replace(device=replace(topo.device, gemm_efficiency=None)))
    assert rms(system.cost) < rms(off.cost)


def test_frozen_regression_topologies_have_no_curve(root):
    for name in ("h200_nvl8_ib_ndr.yaml", "h100_nvl8_ib_ndr.yaml"):
        assert load_topology(root / "tests" / "data" / "regression" / name).device.gemm_efficiency is None
    # the shipped H100 files carry the curve measured on an H100 (2026-12-05), the same in both, not the H200's
    h200 = load_topology(root / "topologies" / "h200_nvl8_ib_ndr.yaml").device.gemm_efficiency
    h100 = [load_topology(root / "topologies" / name).device.gemm_efficiency
            for name in ("h100_nvl8_ib_ndr.yaml", "h100_nvl8_ib_ndr_sharp.yaml")]
    assert h100[0] == h100[1] and h100[0] != h200 and h100[0].source.endswith("gemm_small_m_h100.csv")


def test_shipped_h100_describes_its_measurement_better(root):
    """The H100 topology's curve (no calibration profile: the roofline model prices GEMMs) against the H100 table
    it was fitted on: far closer than the tiled roofline without it."""
    topo = load_topology(root / "topologies" / "h100_nvl8_ib_ndr.yaml")
    with open(root / topo.device.gemm_efficiency.source) as fh:
        rows = list(csv.DictReader(fh))
    assert {r["device"] for r in rows} == {"NVIDIA H100 80GB HBM3"} and len(rows) >= 50

    def rms(dev):
        errs = [simulate_kernel(gemm_work("g", int(r["m"]), int(r["n"]), int(r["k"]), "bf16"),
                                RooflineCostModel(dev)).time_s / (float(r["median_us"]) * 1e-6) - 1.0 for r in rows]
        return math.sqrt(sum(e * e for e in errs) / len(errs))

    with_curve = rms(topo.device)
    assert with_curve < 0.25 and with_curve < rms(replace(topo.device, gemm_efficiency=None)) / 2


def _with_curve(root, tmp_path, curve):
    data = yaml.safe_load((root / "topologies" / "h200_nvl8_ib_ndr.yaml").read_text())
    data["device"]["gemm_efficiency"] = curve
    data.pop("calibration")
    p = tmp_path / "topo.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


BAD = [
    ("M not increasing", {"points": [[64, 0.3], [64, 0.4]]}, "device.gemm_efficiency.points[1]"),
    ("M decreasing", {"points": [[128, 0.3], [64, 0.4]]}, "device.gemm_efficiency.points[1]"),
    ("zero efficiency", {"points": [[64, 0.0]]}, "device.gemm_efficiency.points[0]"),
    ("efficiency above 1", {"points": [[64, 1.5]]}, "device.gemm_efficiency.points[0]"),
    ("M below 1", {"points": [[0, 0.5]]}, "device.gemm_efficiency.points[0]"),
    ("point not a pair", {"points": [[64]]}, "device.gemm_efficiency.points[0]"),
    ("string in point", {"points": [["64", 0.5]]}, "device.gemm_efficiency.points[0]"),
    ("no points", {"points": []}, "device.gemm_efficiency.points"),
    ("negative floor", {"floor_us": -1.0}, "device.gemm_efficiency.floor_us"),
    ("floor in seconds", {"floor_us": None, "floor_s": 4e-6}, "device.gemm_efficiency.floor_us"),
    ("no source", {"source": None}, "device.gemm_efficiency.source"),
    ("unknown dtype", {"dtype": "bf17"}, "device.gemm_efficiency.dtype"),
    ("unknown key", {"efficiency_unit": "%"}, "device.gemm_efficiency.efficiency_unit"),
]


@pytest.mark.parametrize("label,change,field", BAD, ids=[b[0] for b in BAD])
def test_bad_curve_names_file_and_field(root, tmp_path, label, change, field):
    curve = {**CURVE, **change}
    curve = {k: v for k, v in curve.items() if v is not None}
    p = _with_curve(root, tmp_path, curve)
    with pytest.raises(SpecError) as exc:
        load_topology(p)
    assert exc.value.field == field
    assert str(p) in str(exc.value)


def test_fixed_overhead_adds_to_the_roofline_part():
    """``overhead_us``: a fixed kernel time per call beside the work: launch + max(floor - launch, overhead +
    roofline / eff) (here the device declares no in-graph latency, so the floor is net of the eager 2 us)."""
    dev = _device(dict(CURVE, overhead_us=3.0))
    m, n, k = 256, 4096, 4096
    roof_s = max(2.0 * m * n * k / 1e15, (m * k + k * n + m * n) * 2 / 4e12)
    r = simulate_kernel(gemm_work("g", m, n, k, "bf16"), RooflineCostModel(dev))
    assert r.time_s == pytest.approx(2e-6 + 3e-6 + roof_s / 0.375, rel=1e-12)
    # the tiniest GEMM: overhead (3 us) above the floor's 3 us net of launch -> launch + overhead
    tiny = simulate_kernel(gemm_work("g", 64, 64, 64, "bf16"), RooflineCostModel(dev)).time_s
    tiny_roof = max(2.0 * 64 ** 3 / 1e15, 3 * 64 * 64 * 2 / 4e12)
    assert tiny == pytest.approx(2e-6 + 3e-6 + tiny_roof / 0.25, rel=1e-12)


@pytest.mark.parametrize("value", [-0.5, "x", float("inf")])
def test_bad_overhead_names_the_field(value):
    with pytest.raises(SpecError, match="overhead_us"):
        _device(dict(CURVE, overhead_us=value))
