"""Dense-compute calibration from Kineto traces (simfuse.calibrate.dense) and NCCL rows from Kineto traces.

Real traces: the team's H200 traces (experiments/results/h200_traces/: one recorded with shapes by
experiments/gpu_campaigns/dense_trace.py, one without).  Formats only public traces had -- ROCm/Tensile kernels, NCCL kernels of a
2-rank DDP run with record_param_comms -- come from synthetic fixtures of our own (tests/data/kineto/README.md)."""

import dataclasses
import gzip
import json
import math
from pathlib import Path

import numpy as np
import pytest
import yaml

from simfuse.calibrate.dense import fit_saturating, gemm_shape, read_dense_samples
from simfuse.calibrate.kineto_nccl import read_kineto_nccl
from simfuse.cli import main
from simfuse.errors import SpecError, TraceError
from simfuse.profile.load import load_profile, profile_from_dict
from simfuse.spec import load_topology, load_workload
from simfuse.system import System
from simfuse.workloads.dense import elementwise_work, gemm_work
from simfuse.workloads.run import simulate_workload

ROOT = Path(__file__).resolve().parents[1]
KINETO = ROOT / "tests" / "data" / "kineto"
ROCM = KINETO / "rocm_mi250_mlp_step.json"  # synthetic, ROCm layout (tests/data/kineto/_make_fixtures.py)
DDP_NCCL = [KINETO / f"ddp_nccl_2ranks_rank{r}.json" for r in (0, 1)]  # synthetic, 2-rank DDP layout
H200 = ROOT / "experiments" / "results" / "h200_traces"
H200_DENSE = H200 / "torch_profiler_dense_h200.json.gz"  # recorded with shapes (its README.md)
H200_NO_SHAPES = H200 / "torch_profiler_h200.json.gz"
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


def _events(path: Path) -> list[dict]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as fh:
        return json.load(fh)["traceEvents"]


def _kernel_durs_s(path: Path) -> dict[int, list[tuple[str, float]]]:
    """The raw trace's GPU kernels by External id: (name, dur in s)."""
    out: dict[int, list[tuple[str, float]]] = {}
    for e in _events(path):
        if e.get("cat") == "kernel" and isinstance(e.get("args", {}).get("External id"), int):
            out.setdefault(e["args"]["External id"], []).append((e["name"], e["dur"] * 1e-6))
    return out


#: what experiments/gpu_campaigns/dense_trace.py recorded: torch.mm with M in 16..16384 against N = K in {1024, 4096} in bf16
#: and fp32, one 8192^3 bf16; add/mul/relu of 1, 16, 256, 1024 MiB operands; embedding_bag with 1024 and 16384
#: bags; each 5 times inside the profiler
DENSE_M = (16, 64, 256, 1024, 4096, 16384)
DENSE_GEMMS = {dt: {(1, m, nk, nk) for m in DENSE_M for nk in (1024, 4096)} for dt in ("bf16", "fp32")}
DENSE_GEMMS["bf16"].add((1, 8192, 8192, 8192))
DENSE_MIB = (1, 16, 256, 1024)


def test_real_h200_trace_gives_every_recorded_gemm_elementwise_and_embedding_call():
    skipped: dict = {}
    samples = read_dense_samples(H200_DENSE, skipped)
    assert skipped == {}
    for dt, shapes in DENSE_GEMMS.items():
        gemm = [s for s in samples if s.family == "gemm" and s.dtype == dt]
        assert {s.op for s in gemm} == {"aten::mm"}
        got = [tuple(v for _, v in s.shape) for s in gemm]
        assert set(got) == shapes and all(got.count(g) == 5 for g in shapes)
        assert all(s.work == 2 * math.prod(g) for s, g in zip(gemm, got, strict=True))
        assert all(s.x == min(g[1], g[2]) for s, g in zip(gemm, got, strict=True))
    ew = [s for s in samples if s.family == "elementwise"]
    assert {(s.op, s.dtype) for s in ew} == {(op, dt) for op in ("aten::add", "aten::mul", "aten::clamp_min")
                                             for dt in ("bf16", "fp32")}
    # bytes: the tensor inputs plus one output (add, mul: 3 operands; relu = clamp_min(x, 0): 2)
    assert {(s.op, s.work) for s in ew} == {(op, k * mib * 2**20) for mib in DENSE_MIB
                                            for op, k in (("aten::add", 3), ("aten::mul", 3), ("aten::clamp_min", 2))}
    assert len(ew) == 2 * 3 * len(DENSE_MIB) * 5
    assert len([s for s in samples if s.family == "embedding_bag" and s.dtype == "fp32"]) == 2 * 5
    # each call's time is the sum of its own GEMM kernels in the raw trace (split-K: main kernel + reduction)
    kern = _kernel_durs_s(H200_DENSE)
    split_k = [s for s in samples if any("splitKreduce" in k for k in s.kernels)]
    assert split_k and all(len(s.kernels) == 2 for s in split_k)
    for s in samples:
        cands = [v for v in kern.values() if sorted(k for k, _ in v) == sorted(s.kernels)
                 and sum(d for _, d in v) == pytest.approx(s.time_s, rel=1e-12)]
        assert cands, s
    big = [s for s in samples if dict(s.shape).get("k") == 8192]
    assert len(big) == 5 and all(k.startswith("nvjet_sm90") for s in big for k in s.kernels)


def test_rocm_trace_gives_tensile_gemm_and_elementwise_samples():
    """The ROCm layout (Tensile Cijk_* GEMM kernels, kernels under pid = device, hip launches) of the synthetic
    MLP step: the two GEMMs (addmm bias[256] + [8,64]x[64,256]; mm [256,8]x[8,64]) and the element-wise ops;
    reductions and the multi-tensor optimizer kernel are no family."""
    samples = read_dense_samples(ROCM)
    gemm = [s for s in samples if s.family == "gemm"]
    assert {s.op for s in gemm} == {"aten::addmm", "aten::mm"}
    assert all(s.dtype == "fp32" and s.kernels[0].startswith("Cijk_") for s in gemm)
    addmm = next(s for s in gemm if s.op == "aten::addmm")
    mm = next(s for s in gemm if s.op == "aten::mm")
    assert dict(addmm.shape) == {"batch": 1, "m": 8, "n": 256, "k": 64}
    assert dict(mm.shape) == {"batch": 1, "m": 256, "n": 64, "k": 8}
    assert addmm.work == mm.work == 2 * 8 * 256 * 64
    kern = _kernel_durs_s(ROCM)
    for s in gemm:
        assert [s.time_s] == [d for v in kern.values() for k, d in v if k == s.kernels[0]]
    ew = {s.op for s in samples if s.family == "elementwise"}
    assert {"aten::clamp_min", "aten::threshold_backward", "aten::add_"} <= ew
    assert "aten::sum" not in ew and "aten::_foreach_add_" not in ew


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
    out = _calibrate(tmp_path, ROCM)
    data = yaml.safe_load(out.read_text())
    fits = {(f["family"], f["dtype"]): f for f in data["dense"]["fits"]}
    g = fits[("gemm", "fp32")]
    # the fixture's addmm (min(M, N) = 8) in 14.4 us and mm (min(M, N) = 64) in 11.2 us, both 262,144 FLOP: two
    # shapes are too few for the saturation term, so a constant rate (their geometric mean)
    assert g["m_half"] == 0.0 and (g["m_min"], g["m_max"]) == (8, 64)
    assert g["peak_flops_per_s"] == pytest.approx(262144 / math.sqrt(14.4e-6 * 11.2e-6), rel=1e-4)
    assert g["fit"]["points"] == 2 and g["fit"]["rel_residual_max"] < 0.2
    assert "constant rate" in g["note"]
    assert ("elementwise", "fp32") in fits
    prof = load_profile(out)
    assert set(prof.dense) == {("gemm", "fp32"), ("elementwise", "fp32")}
    assert "dense gemm/fp32" in capsys.readouterr().out


#: NVIDIA H200 data sheet (SXM): 989 TFLOP/s dense BF16 (1,979 with sparsity), 67 TFLOP/s FP32, 4.8 TB/s HBM3e
H200_PEAK = {("gemm", "bf16"): 989e12, ("gemm", "fp32"): 67e12}
H200_HBM_BYTES_PER_S = 4.8e12


def test_calibrate_on_the_real_h200_trace_fits_the_saturation_below_the_data_sheet(tmp_path):
    """Every traced shape is fitted, over the traced range, and no fitted peak exceeds what the data sheet allows
    (the selected model per dtype: the saturating curve, or the per-call/byte/FLOP terms)."""
    data = yaml.safe_load(_calibrate(tmp_path, H200_DENSE).read_text())
    fits = {(f["family"], f["dtype"]): f for f in data["dense"]["fits"]}
    for dt, shapes in DENSE_GEMMS.items():
        g = fits[("gemm", dt)]
        assert g["fit"]["points"] == len(shapes)
        if g.get("model") == "terms":  # per-call + per-byte + per-FLOP (plain, tile-padded or wave) terms
            assert (g["m_min"], g["m_max"]) == (min(m for _, m, _, _ in shapes), max(m for _, m, _, _ in shapes))
            assert min(g["s_per_call"], g["s_per_byte"], g["s_per_flop"]) >= 0
            assert g["s_per_flop"] > 0 and 1.0 / g["s_per_flop"] <= H200_PEAK[("gemm", dt)]
        else:  # the saturating FLOP-rate curve
            assert (g["m_min"], g["m_max"]) == (min(min(m, n) for _, m, n, _ in shapes),
                                                max(min(m, n) for _, m, n, _ in shapes))
            assert g["m_half"] > 0 and "note" not in g
            assert 0 < g["peak_flops_per_s"] <= H200_PEAK[("gemm", dt)]
    for dt in ("bf16", "fp32"):
        e = fits[("elementwise", dt)]
        assert e["fit"]["points"] == 2 * len(DENSE_MIB)  # (2 or 3 operands) x 4 sizes: 8 distinct byte counts
        assert e["bytes_half"] > 0 and 0 < e["peak_bytes_per_s"] <= H200_HBM_BYTES_PER_S
    assert data["dense"]["skipped"] == {}


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
    ROCm toy trace (fp32 GEMMs at ~20 GFLOP/s, far below the H200 roofline), its GEMM kernels get slower by the
    ratio of the rates and the iteration time grows; the same profile without the dense section changes
    nothing."""
    with_dense = _calibrate(tmp_path, ROCM)
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
    assert t_dense > 100 * t_plain  # the toy trace is far slower than an H200's fp32 roofline
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
def _allreduce_times_by_size(path: Path) -> dict[int, list[float]]:
    """Oracle from the raw trace: each all-reduce kernel's dur under the message size of the record_param_comms
    op with its External id (max(In, Out msg nelems) x 4 bytes of Float)."""
    ev = _events(path)
    comms = {e["args"]["External id"]: e["args"] for e in ev if e["name"] == "record_param_comms"}
    out: dict[int, list[float]] = {}
    for e in ev:
        if e.get("cat") == "kernel" and e["name"].startswith("ncclKernel_AllReduce"):
            a = comms[e["args"]["External id"]]
            assert a["dtype"] == "Float" and a["Group size"] == 2
            out.setdefault(4 * max(a["In msg nelems"], a["Out msg nelems"]), []).append(e["dur"] * 1e-6)
    return out


@pytest.mark.parametrize("trace", DDP_NCCL, ids=["rank0", "rank1"])
def test_kineto_nccl_rows_from_a_2_rank_ddp_trace(trace):
    """Kernels with the collective args on themselves and kernels with them only on record_param_comms (linked by
    External id) give one row per size at the median time; ``wait`` ops (0 elements) and broadcasts are not
    all-reduce rows."""
    log = read_kineto_nccl(trace)
    assert log.collective == "all_reduce" and log.ranks == 2 and log.nodes == 1
    oracle = _allreduce_times_by_size(trace)
    assert [r.size_bytes for r in log.rows] == sorted(oracle) and len(log.rows) == 5
    for r in log.rows:
        assert len(oracle[r.size_bytes]) == 3
        assert r.time_s == pytest.approx(float(np.median(oracle[r.size_bytes])), rel=1e-12)
        assert r.busbw_gbyte_per_s == pytest.approx(r.algbw_gbyte_per_s * 2 * (2 - 1) / 2)
        assert r.algbw_gbyte_per_s == pytest.approx(r.size_bytes / r.time_s / 1e9)
    bc = read_kineto_nccl(trace, "broadcast")
    assert bc.collective == "broadcast" and len(bc.rows) == 2
    assert all(r.busbw_gbyte_per_s == r.algbw_gbyte_per_s for r in bc.rows)  # bus factor 1
    assert any("nodes" in n for n in log.notes)


def test_both_ranks_of_the_ddp_trace_give_the_same_sizes():
    a, b = (read_kineto_nccl(t) for t in DDP_NCCL)
    assert [r.size_bytes for r in a.rows] == [r.size_bytes for r in b.rows]


def test_fit_fabric_takes_a_kineto_trace(tmp_path, capsys):
    """The DDP trace has 5 all-reduce sizes: fit-fabric reads them and refuses the fit with a reason."""
    rc = main(["fit-fabric", str(DDP_NCCL[0]), "--topology", str(ROOT / "topologies" / "h100_nvl8_ib_ndr.yaml")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "distinct message sizes" in err and "5" in err


def test_fit_fabric_on_synthetic_kineto_rows_matches_the_nccl_tests_path(tmp_path):
    """Rows from a Kineto trace and the same rows as an nccl-tests log give one NcclTestLog shape."""
    log = read_kineto_nccl(HANDMADE, "all_reduce")
    row = log.rows[0]
    assert dataclasses.asdict(row).keys() >= {"size_bytes", "time_s", "algbw_gbyte_per_s", "busbw_gbyte_per_s"}
    assert row.size_bytes == 16777216 * 4 and row.time_s == pytest.approx(351e-6)


def test_negative_input_dims_are_refused_with_the_key(tmp_path, capsys):
    """A negative tensor extent in Input Dims made a NaN fit (a numpy warning, then an error about the profile's
    peak_flops_per_s naming the output file); now the trace's key is named and nothing is written."""
    d = json.loads(HANDMADE.read_text())
    d["traceEvents"][0]["args"]["Input Dims"] = [[-4096, 4096], [4096, 4096]]
    bad = tmp_path / "neg.json"
    bad.write_text(json.dumps(d))
    with pytest.raises(SpecError, match=r"neg\.json: key traceEvents\[0\]\.args\.Input Dims: negative tensor extent"):
        read_dense_samples(bad)
    out = tmp_path / "p.yaml"
    rc = main(["calibrate", str(bad), "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "Input Dims" in err and "Traceback" not in err and "RuntimeWarning" not in err
    assert not out.exists()


@pytest.mark.parametrize("key, value", [("In msg nelems", -4), ("In msg nelems", "many"), ("Group size", 0),
                                        ("Out msg nelems", 1.5)])
def test_a_corrupt_nccl_count_is_refused_with_its_key(tmp_path, key, value):
    """A record_param_comms count that is negative, not a number, fractional or a group of no rank was skipped
    silently (the trace then had "no message sizes"): it is a corrupt trace, named with its key."""
    d = json.loads(DDP_NCCL[0].read_text())
    for e in d["traceEvents"]:  # on the ops and on the kernels that carry the args themselves
        if e.get("args", {}).get("Collective name") == "allreduce":
            e["args"][key] = value
    p = tmp_path / "t.json"
    p.write_text(json.dumps(d))
    with pytest.raises(TraceError, match=f"args.{key}"):
        read_kineto_nccl(p)
