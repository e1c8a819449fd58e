"""Dense-compute calibration from Kineto traces (simfuse.calibrate.dense) and NCCL rows from Kineto traces.

Real traces: tests/data/kineto/README.md (HolisticTraceAnalysis test data: MI250 with shapes, A100 DDP with NCCL)
and the team's H200 trace (recorded without shapes)."""

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from simfuse.calibrate.dense import fit_saturating, gemm_shape, read_dense_samples
from simfuse.calibrate.kineto_nccl import read_kineto_nccl
from simfuse.calibrate.profile import load_profile, profile_from_dict
from simfuse.cli import main
from simfuse.errors import SpecError
from simfuse.spec import load_topology, load_workload
from simfuse.system import System
from simfuse.workloads.dense import elementwise_work, gemm_work
from simfuse.workloads.run import simulate_workload

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "tests" / "data" / "kineto"
MI250 = KINETO / "mi250_minitoy_train_ROCm6_2_kineto.json.gz"
A100_NCCL = KINETO / "a100_ddp_nccl_excerpt.json.gz"
H200_NO_SHAPES = ROOT / "experiments" / "results" / "h200_traces" / "torch_profiler_h200.json.gz"
HANDMADE = ROOT / "tests" / "data" / "calibrate" / "torch_nccl_kineto.json"


def test_gemm_shapes_of_the_aten_ops():
    assert gemm_shape("aten::mm", [[5, 128], [128, 64]]) == (1, 5, 64, 128)
    assert gemm_shape("aten::addmm", [[128], [5, 128], [128, 128], [], []]) == (1, 5, 128, 128)
    assert gemm_shape("aten::bmm", [[8, 16, 32], [8, 32, 4]]) == (8, 16, 4, 32)
    assert gemm_shape("aten::linear", [[4, 10, 128], [256, 128], [256]]) == (1, 40, 256, 128)
    assert gemm_shape("aten::matmul", [[4, 10, 128], [128, 256]]) == (1, 40, 256, 128)
    assert gemm_shape("aten::matmul", [[1, 4096], [4096, 4096]]) == (1, 1, 4096, 4096)
    assert gemm_shape("aten::mm", [[5, 128], [64, 3]]) is None  # inner dimensions disagree


def test_saturating_fit_recovers_its_parameters():
    m = np.array([16.0, 64, 256, 1024, 4096, 16384])
    peak, half = 7.0e14, 300.0
    flops = 2.0 * m * 4096 * 4096
    t = flops / (peak * m / (m + half))
    p, h = fit_saturating(m, flops, t)
    assert p == pytest.approx(peak, rel=0.03)
    assert h == pytest.approx(half, rel=0.05)
    p1, h1 = fit_saturating(m[:1], flops[:1], t[:1])  # one size: a constant rate, nothing invented
    assert h1 == 0.0 and p1 == pytest.approx(flops[0] / t[0])


def test_real_mi250_trace_gives_gemm_and_elementwise_samples():
    samples = read_dense_samples(MI250)
    gemm = [s for s in samples if s.family == "gemm"]
    assert {s.op for s in gemm} == {"aten::addmm", "aten::mm"}
    assert all(s.dtype == "fp32" and s.kernels[0].startswith("Cijk_") for s in gemm)
    addmm = next(s for s in gemm if s.op == "aten::addmm")
    assert dict(addmm.shape) == {"batch": 1, "m": 5, "n": 128, "k": 128}
    assert addmm.time_s == pytest.approx(17.6e-6)  # the Cijk kernel's dur in the trace
    assert addmm.work == 2 * 5 * 128 * 128
    assert any(s.family == "elementwise" for s in samples)


def test_trace_without_shapes_says_why_nothing_is_fitted():
    skipped: dict = {}
    assert read_dense_samples(H200_NO_SHAPES, skipped) == []
    assert skipped == {"embedding_bag: no Input Dims (record the trace with record_shapes=True)": 3,
                       "gemm: no Input Dims (record the trace with record_shapes=True)": 6}


def _calibrate(tmp_path, trace, name="dense.yaml", *extra):
    out = tmp_path / name
    assert main(["calibrate", str(trace), "--kind", "kineto", "--out", str(out), *extra]) == 0
    return out


def test_calibrate_kind_kineto_writes_a_dense_section(tmp_path, capsys):
    out = _calibrate(tmp_path, MI250)
    data = yaml.safe_load(out.read_text())
    fits = {(f["family"], f["dtype"]): f for f in data["dense"]["fits"]}
    g = fits[("gemm", "fp32")]
    # addmm [5,128]x[128,128] in 17.6 us and mm [128,5]x[5,128] in 12.64 us, both 163840 FLOP: two shapes are
    # too few for the saturation term, so a constant rate (their geometric mean)
    assert g["m_half"] == 0.0 and (g["m_min"], g["m_max"]) == (5, 128)
    assert g["peak_flops_per_s"] == pytest.approx(163840 / math.sqrt(17.6e-6 * 12.64e-6), rel=1e-4)
    assert g["fit"]["points"] == 2 and g["fit"]["rel_residual_max"] < 0.2
    assert "constant rate" in g["note"]
    assert ("elementwise", "fp32") in fits
    prof = load_profile(out)
    assert set(prof.dense) == {("gemm", "fp32"), ("elementwise", "fp32")}
    assert "dense gemm/fp32" in capsys.readouterr().out


def test_calibrate_kind_kineto_refuses_other_formats(tmp_path, capsys):
    log = ROOT / "tests" / "data" / "calibrate" / "all_reduce_perf_1node.log"
    assert main(["calibrate", str(log), "--kind", "kineto", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "not a torch_profiler" in capsys.readouterr().err
    assert not (tmp_path / "x.yaml").exists()


def test_bad_dense_section_names_the_field():
    base = {"simfuse_calibration": 1, "dense": {"fits": [
        {"family": "gemm", "dtype": "bf16", "peak_flops_per_s": -1.0, "m_half": 0.0, "m_min": 1, "m_max": 2}]}}
    with pytest.raises(SpecError, match=r"dense\.fits\[0\]\.peak_flops_per_s"):
        profile_from_dict(base, "p.yaml")
    base["dense"]["fits"][0].update(peak_flops_per_s=1e12, family="conv")
    with pytest.raises(SpecError, match=r"dense\.fits\[0\]\.family"):
        profile_from_dict(base, "p.yaml")


def _topology_with(tmp_path, profile: Path | None, name: str) -> System:
    text = (ROOT / "topologies" / "h200_nvl8_ib_ndr.yaml").read_text()
    data = yaml.safe_load(text)
    data.pop("calibration", None)
    if profile is not None:
        data["calibration"] = str(profile)
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return System.load(path)


def test_simfuse_run_uses_the_dense_section_in_the_direction_of_the_trace(tmp_path):
    """dlrm_synthetic (fp32 dense MLPs) on the H200 topology: with a profile whose dense section comes from the
    MI250 trace (fp32 GEMMs at ~10 GFLOP/s, far below the H200 roofline), its GEMM kernels get slower by the
    ratio of the rates and the iteration time grows; the same profile without the dense section changes
    nothing."""
    with_dense = _calibrate(tmp_path, MI250)
    data = yaml.safe_load(with_dense.read_text())
    data.pop("dense")
    data["sources"] = []
    without = tmp_path / "no_dense.yaml"
    without.write_text(yaml.safe_dump(data))
    s_dense = _topology_with(tmp_path, with_dense, "t_dense.yaml")
    s_plain = _topology_with(tmp_path, without, "t_plain.yaml")
    s_nominal = _topology_with(tmp_path, None, "t_nominal.yaml")

    spec = load_workload(ROOT / "models" / "dlrm_synthetic.yaml")
    w = gemm_work("top0", 2048, 1024, 1024, spec.dense_dtype)
    fit = s_dense.profile.dense[("gemm", "fp32")]
    t_fit = 2.0 * 2048 * 1024 * 1024 / fit.peak_per_s  # m_half = 0: the constant fitted rate
    t_dense = sum(s_dense.cost.workgroup_time_s(w, n) * k for n, k in _waves(w, s_dense))
    t_plain = sum(s_plain.cost.workgroup_time_s(w, n) * k for n, k in _waves(w, s_plain))
    t_nominal = sum(s_nominal.cost.workgroup_time_s(w, n) * k for n, k in _waves(w, s_nominal))
    assert t_dense == pytest.approx(t_fit, rel=1e-9)
    assert t_plain == t_nominal  # no dense section: the roofline, as before
    assert t_dense > 100 * t_plain  # the MI250 toy trace is far slower than an H200's fp32 roofline
    # an elementwise kernel of dlrm (the dot interaction) follows the elementwise fit
    e = elementwise_work("dot", 64e6, 1e6, "fp32")
    assert s_dense.cost.workgroup_time_s(e, 1) != s_plain.cost.workgroup_time_s(e, 1)

    r_dense = simulate_workload(spec, s_dense, 1, mode="baseline")["baseline"]
    r_plain = simulate_workload(spec, s_plain, 1, mode="baseline")["baseline"]
    r_nominal = simulate_workload(spec, s_nominal, 1, mode="baseline")["baseline"]
    assert r_plain.iteration_time_s == r_nominal.iteration_time_s
    assert r_dense.iteration_time_s > 10 * r_plain.iteration_time_s


def test_dense_fit_not_used_below_the_traced_sizes(tmp_path):
    """The H100 hand-made fixture traces a 4096^3 bf16 GEMM: a 16-row GEMM is >4x below, so the roofline stays."""
    s = _topology_with(tmp_path, _calibrate(tmp_path, HANDMADE), "t.yaml")
    nominal = _topology_with(tmp_path, None, "n.yaml")
    thin = gemm_work("x", 16, 4096, 4096, "bf16")
    big = gemm_work("y", 8192, 4096, 4096, "bf16")
    assert s.cost.workgroup_time_s(thin, 132) == nominal.cost.workgroup_time_s(thin, 132)
    fit = s.profile.dense[("gemm", "bf16")]
    assert sum(s.cost.workgroup_time_s(big, n) * k for n, k in _waves(big, s)) == \
        pytest.approx(2.0 * 8192 * 4096 * 4096 / fit.peak_per_s)


def _waves(work, system):
    slots = system.cost.slots(work)
    full, rest = divmod(work.num_workgroups, slots)
    return [(slots, full)] + ([(rest, 1)] if rest else [])


def test_frozen_regression_topologies_have_no_dense_section():
    for name in ("h100_nvl8_ib_ndr.yaml", "h200_nvl8_ib_ndr.yaml"):
        topo = load_topology(ROOT / "tests" / "data" / "regression" / name)
        sysm = System.from_topology(topo)
        assert getattr(sysm.cost.inner, "dense_fits", {}) == {}


# ------------------------------------------------------------------------------------------------ NCCL rows
def test_kineto_nccl_rows_from_a_real_a100_trace():
    log = read_kineto_nccl(A100_NCCL)
    assert log.collective == "all_reduce" and log.ranks == 2 and log.nodes == 1
    sizes = [r.size_bytes for r in log.rows]
    assert sizes == sorted(sizes) and len(sizes) == 5
    assert sizes[0] == 2049000 * 4  # In msg nelems x 4 bytes (Float)
    for r in log.rows:
        assert r.busbw_gbyte_per_s == pytest.approx(r.algbw_gbyte_per_s * 2 * (2 - 1) / 2)
        assert r.algbw_gbyte_per_s == pytest.approx(r.size_bytes / r.time_s / 1e9)
    bc = read_kineto_nccl(A100_NCCL, "broadcast")
    assert bc.collective == "broadcast" and bc.rows
    assert any("nodes" in n for n in log.notes)


def test_fit_fabric_takes_a_kineto_trace(tmp_path, capsys):
    """The A100 DDP trace has 5 all-reduce sizes: fit-fabric reads them and refuses the fit with a reason."""
    rc = main(["fit-fabric", str(A100_NCCL), "--topology", str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "distinct message sizes" in err and "5" in err


def test_fit_fabric_on_synthetic_kineto_rows_matches_the_nccl_tests_path(tmp_path):
    """Rows from a Kineto trace and the same rows as an nccl-tests log give one NcclTestLog shape."""
    log = read_kineto_nccl(HANDMADE, "all_reduce")
    row = log.rows[0]
    assert dataclasses.asdict(row).keys() >= {"size_bytes", "time_s", "algbw_gbyte_per_s", "busbw_gbyte_per_s"}
    assert row.size_bytes == 16777216 * 4 and row.time_s == pytest.approx(351e-6)
