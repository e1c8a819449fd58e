"""Calibration fits: NNLS, alpha-beta (hypothesis), and recovery of known kernel parameters from synthetic
per-workgroup traces produced by the engine's own compute model."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.calibrate.build import build_profile, fit_kernel_group, read_inputs
from simfuse.calibrate.kernel_trace import format_shape, read_kernel_runs, write_kernel_trace
from simfuse.costs.analytic import RooflineCostModel
from simfuse.costs.base import KernelWork
from simfuse.costs.calibrated import CalibratedCostModel, KernelFit, occupancy_scales
from simfuse.engine.compute import simulate_kernel
from simfuse.profile.fit import alpha_beta_time_s, fit_alpha_beta, nnls_relative
from simfuse.spec import load_topology

TOPOLOGY = "topologies/h200_nvl8_ib_ndr.yaml"
CUS = 132

#: The "true" parameters the synthetic traces are generated from.
TRUE = {
    ("embedding_all_to_all", "compute"): KernelFit("embedding_all_to_all", "compute", "fp32", 1.5e-6, 12e9, None,
                                                  264, 6e-6),
    ("embedding_all_to_all", "fused"): KernelFit("embedding_all_to_all", "fused", "fp32", 2.2e-6, 10e9, None,
                                                232, 7e-6),
    ("gemm_all_to_all", "compute"): KernelFit("gemm_all_to_all", "compute", "fp32", 3e-6, 25e9, 2.5e12, 132,
                                             5e-6),
}

EMB_SHAPES = [  # (bags, dim, pooling): one program per 4 bags, fp32 rows
    (16384, 128, 32), (8192, 64, 32), (4096, 128, 8), (2048, 256, 16), (30000, 64, 4), (500, 128, 32),
]
GEMM_SHAPES = [(1024, 1024, 1024), (2048, 512, 4096), (512, 4096, 256), (4096, 4096, 512), (256, 256, 8192)]


def _cost_model() -> CalibratedCostModel:
    fits = {(f.kernel, f.variant, f.dtype): f for f in TRUE.values()}
    return CalibratedCostModel(fits, RooflineCostModel(load_topology(TOPOLOGY).device), compute_units=CUS)


def synthetic_rows(kernel: str, variant: str, grid: int, flops_per_wg: float, bytes_per_wg: float, shape: str,
                   run_id: str, cost_model, launch_ns: int, rank: int = 0, dtype: str = "fp32") -> list[dict]:
    """Per-program trace rows of one simulated launch (per-workgroup mode of the engine)."""
    work = KernelWork(kernel, grid, flops_per_wg, bytes_per_wg, dtype=dtype, variant=variant)
    res = simulate_kernel(work, cost_model, per_workgroup=True)
    rows = []
    for wg, start_s, end_s, slot in res.records:
        rows.append({
            "run_id": run_id, "kernel": kernel, "variant": variant, "backend": "emulated", "world_size": 8,
            "rank": rank, "dtype": dtype, "shape": shape, "grid": grid, "num_warps": 4, "launch_ns": launch_ns,
            # The end marker is a queued kernel: it starts one launch latency after the last program ends.
            "kernel_end_ns": launch_ns + round((res.time_s + cost_model.launch_latency_s(work)) * 1e9),
            "program_id": wg,
            "start_ns": launch_ns + round(start_s * 1e9), "end_ns": launch_ns + round(end_s * 1e9),
            "smid": slot % CUS, "flops_per_program": flops_per_wg, "bytes_per_program": bytes_per_wg,
        })
    return rows


def make_synthetic_traces(tmp_path, cost_model=None) -> list:
    cm = cost_model or _cost_model()
    paths = []
    launch = 1_700_000_000_000_000_000  # realistic %globaltimer magnitude: int64 precision matters
    for variant in ("compute", "fused"):
        rows = []
        for i, (bags, dim, pooling) in enumerate(EMB_SHAPES):
            grid = math.ceil(bags / 4)
            nbytes = 4 * (pooling * dim * 4 + dim * 4 + pooling * 8)
            shape = format_shape((("bags", bags), ("dim", dim), ("pooling", pooling)))
            rows += synthetic_rows("embedding_all_to_all", variant, grid, 0.0, nbytes, shape, f"emb-{variant}-{i}",
                                   cm, launch)
            launch += 10_000_000
        path = tmp_path / f"emb_{variant}.csv.gz"
        write_kernel_trace(path, rows)
        paths.append(path)
    rows = []
    for i, (m, n, k) in enumerate(GEMM_SHAPES):
        grid = math.ceil(m / 128) * math.ceil(n / 128)
        flops = 2.0 * 128 * 128 * k
        nbytes = 4.0 * (128 * k * 2 + 128 * 128)
        shape = format_shape((("k", k), ("m", m), ("n", n)))
        rows += synthetic_rows("gemm_all_to_all", "compute", grid, flops, nbytes, shape, f"gemm-{i}", cm, launch)
        launch += 10_000_000
    path = tmp_path / "gemm.csv"
    write_kernel_trace(path, rows)
    paths.append(path)
    return paths


def test_nnls_exact_and_nonnegative():
    rng = np.random.default_rng(1)
    x = np.column_stack([np.ones(20), rng.uniform(1e5, 1e7, 20), rng.uniform(1e6, 1e9, 20)])
    c_true = np.array([2e-6, 1 / 20e9, 1 / 3e12])
    c = nnls_relative(x, x @ c_true)
    assert np.allclose(c, c_true, rtol=1e-9)
    # A negative best-fit coefficient is clamped to 0 and the rest refitted.
    y = 1e-6 + 1e-13 * x[:, 1] - 1e-16 * x[:, 2]
    y = np.maximum(y, 1e-7)
    c = nnls_relative(x, y)
    assert (c >= 0).all()


@settings(max_examples=40, deadline=None)
@given(alpha_us=st.floats(0.5, 50.0), beta_gbps=st.floats(5.0, 900.0), ranks=st.integers(2, 64),
       coll=st.sampled_from(["all_reduce", "alltoall"]))
def test_alpha_beta_fit_recovers_random_parameters(alpha_us, beta_gbps, ranks, coll):
    sizes = np.array([2.0**k for k in range(3, 31, 2)])
    t = np.array([alpha_beta_time_s(coll, ranks, alpha_us * 1e-6, beta_gbps * 1e9, s) for s in sizes])
    # Measurement rounding as nccl-tests prints it (0.01 us).
    t = np.round(t * 1e8) / 1e8
    fit = fit_alpha_beta(coll, ranks, sizes, t)
    assert fit.alpha_s == pytest.approx(alpha_us * 1e-6, rel=0.02)
    assert fit.beta_bytes_per_s == pytest.approx(beta_gbps * 1e9, rel=0.02)
    assert fit.quality.points == sizes.size


def test_occupancy_scales_full_and_partial():
    assert occupancy_scales(264, 264, 132) == (1.0, 1.0)
    s_b, s_f = occupancy_scales(132, 264, 132)
    assert s_f == 0.5 and s_b == pytest.approx(0.5)
    s_b, s_f = occupancy_scales(10, 264, 132)
    assert s_f == 0.5 and s_b == pytest.approx(0.25)  # per-CU headroom limits the byte speed-up


def test_fit_recovers_known_parameters_from_simulated_traces(tmp_path):
    paths = make_synthetic_traces(tmp_path)
    inp = read_inputs(paths)
    profile = build_profile(inp)
    assert profile["device"]["compute_units"] == CUS
    got = {(k["kernel"], k["variant"]): k for k in profile["kernels"]}
    assert set(got) == set(TRUE)
    for key, true in TRUE.items():
        k = got[key]
        assert k["slots"] == true.slots
        assert k["launch_latency_s"] == pytest.approx(true.launch_latency_s, rel=0.02)
        assert k["overhead_s"] == pytest.approx(true.overhead_s, rel=0.02)
        assert k["bw_bytes_per_s"] == pytest.approx(true.bw_bytes_per_s, rel=0.02)
        if true.flops_per_s is None:
            assert k["flops_per_s"] is None  # the FLOP term is dropped when no program does FLOPs
        else:
            assert k["flops_per_s"] == pytest.approx(true.flops_per_s, rel=0.02)
        assert k["fit"]["rel_residual_rms"] < 0.01
        assert k["dispatch_gap_s"]["median_s"] == 0.0  # the engine refills a slot the instant it frees
        # The per-program duration fit (diagnostic) agrees: the engine's workgroups have no dispatch gaps.
        assert k["program_fit"]["overhead_s"] == pytest.approx(true.overhead_s, rel=0.02)
        assert k["program_fit"]["bw_bytes_per_s"] == pytest.approx(true.bw_bytes_per_s, rel=0.02)
    # Fused vs compute at the same shapes.
    ratios = [s["wg_time_ratio"] for s in profile["fused_slowdown"]]
    assert len(ratios) == len(EMB_SHAPES) and all(r > 1.0 for r in ratios)


def test_fit_uses_partial_wave_programs(tmp_path):
    """A single partial-wave launch alone still recovers the full-occupancy parameters via the scale rule."""
    cm = _cost_model()
    rows = []
    for i, grid in enumerate((100, 200, 50)):
        rows += synthetic_rows("embedding_all_to_all", "compute", grid, 0.0, 2e4 * (i + 1), "bags=1", f"r{i}", cm,
                               10**9 * (i + 1))
    rows += synthetic_rows("embedding_all_to_all", "compute", 1000, 0.0, 5e4, "bags=2", "full", cm, 10**10)
    path = tmp_path / "t.csv"
    write_kernel_trace(path, rows)
    fit = fit_kernel_group(read_kernel_runs(path), CUS)
    true = TRUE[("embedding_all_to_all", "compute")]
    assert fit["overhead_s"] == pytest.approx(true.overhead_s, rel=0.02)
    assert fit["bw_bytes_per_s"] == pytest.approx(true.bw_bytes_per_s, rel=0.02)


def test_fit_recovers_partial_wave_headroom(tmp_path, h200):
    """Launches smaller than one wave pin down the per-CU bandwidth headroom."""
    true = KernelFit("gemv_all_reduce", "compute", "bf16", 1e-6, 8e9, None, 264, 4e-6, bw_headroom=4.0)
    cm = CalibratedCostModel({("gemv_all_reduce", "compute", "bf16"): true}, RooflineCostModel(h200.device),
                             compute_units=CUS)
    rows = []
    for i, (grid, nbytes) in enumerate(((64, 2e5), (128, 1e5), (264, 3e5), (1000, 2e5), (40, 4e5))):
        rows += synthetic_rows("gemv_all_reduce", "compute", grid, 0.0, nbytes, "n=1", f"g{i}", cm,
                               10**9 * (i + 1), dtype="bf16")
    path = tmp_path / "g.csv"
    write_kernel_trace(path, rows)
    fit = fit_kernel_group(read_kernel_runs(path), CUS)
    assert fit["bw_headroom"] == 4.0
    assert fit["bw_bytes_per_s"] == pytest.approx(8e9, rel=0.02)
    assert fit["overhead_s"] == pytest.approx(1e-6, rel=0.02)


def test_makespan_fit_absorbs_dispatch_gaps(tmp_path, h200):
    """Real GPUs leave a slot idle between programs: the model (fitted to makespans) keeps kernel times right,
    the per-program fit (diagnostic) keeps the bare program durations."""
    o_s, bw, gap_ns, slots = 2e-6, 10e9, 1000, 264
    rows = []
    launch = 1_700_000_000_000_000_000
    cases = [(4, 6e4), (8, 3e4), (16, 1e5), (12, 5e4)]  # (waves, bytes per program)
    for i, (waves, nbytes) in enumerate(cases):
        dur_ns = round((o_s + nbytes / bw) * 1e9)
        start0 = launch + 2000
        for p in range(waves * slots):
            w, slot = divmod(p, slots)
            start = start0 + w * (dur_ns + gap_ns)
            rows.append({"run_id": f"r{i}", "kernel": "embedding_all_to_all", "variant": "compute",
                         "backend": "emulated", "world_size": 4, "rank": 0, "dtype": "fp32", "shape": f"case={i}",
                         "grid": waves * slots, "num_warps": 4, "launch_ns": launch,
                         "kernel_end_ns": start0 + waves * (dur_ns + gap_ns) - gap_ns + 2000, "program_id": p,
                         "start_ns": start, "end_ns": start + dur_ns, "smid": slot % CUS,
                         "flops_per_program": 0.0, "bytes_per_program": nbytes})
        launch += 10**8
    path = tmp_path / "gaps.csv"
    write_kernel_trace(path, rows)
    runs = read_kernel_runs(path)
    fit = fit_kernel_group(runs, CUS)
    assert fit["program_fit"]["overhead_s"] == pytest.approx(o_s, rel=0.02)
    assert fit["program_fit"]["bw_bytes_per_s"] == pytest.approx(bw, rel=0.02)
    assert fit["launch_latency_s"] == pytest.approx(2e-6)
    assert fit["dispatch_gap_s"]["median_s"] == pytest.approx(gap_ns * 1e-9)
    model = KernelFit("embedding_all_to_all", "compute", "fp32", fit["overhead_s"], fit["bw_bytes_per_s"],
                      fit["flops_per_s"], fit["slots"], fit["launch_latency_s"], fit["bw_headroom"])
    cm = CalibratedCostModel({("embedding_all_to_all", "compute", "fp32"): model},
                             RooflineCostModel(h200.device), compute_units=CUS)
    for run in runs:
        work = KernelWork("embedding_bag", run.grid, 0.0, run.bytes_per_program, "fp32", "compute")
        makespan = simulate_kernel(work, cm).time_s - cm.launch_latency_s(work)
        assert makespan == pytest.approx(run.makespan_s, rel=0.02)


@settings(max_examples=200, deadline=None)
@given(slots=st.integers(1, 4096), cus=st.integers(1, 256), n=st.integers(1, 4096),
       headroom=st.sampled_from([1.0, 1.5, 2.0, 4.0, 16.0]))
def test_occupancy_scales_properties(slots, cus, n, headroom):
    """Fewer resident workgroups never make one slower; full occupancy is the reference; more never faster."""
    s_b, s_f = occupancy_scales(n, slots, cus, headroom)
    assert 0 < s_b <= 1 and 0 < s_f <= 1
    s_b2, s_f2 = occupancy_scales(min(n + 1, slots), slots, cus, headroom)
    assert s_b2 >= s_b - 1e-12 and s_f2 >= s_f - 1e-12
    assert occupancy_scales(slots, slots, cus, headroom) == (1.0, 1.0)


def test_queued_launch_latency_ignores_host_bound_gaps():
    from simfuse.calibrate.build import queued_launch_latency_s

    # End-marker gaps of four launches on the H200: short kernels leave the host behind (tens of us).
    assert queued_launch_latency_s([100.16e-6, 21.76e-6, 11.81e-6, 1.70e-6]) == pytest.approx(1.70e-6)
    assert queued_launch_latency_s([63.3e-6, 2.59e-6, 2.94e-6, 2.37e-6]) == pytest.approx(2.59e-6)
    assert queued_launch_latency_s([0.0, 3e-6]) == 0.0


def test_nnls_tie_break_credits_work_not_overhead():
    """Same work per program in every row: overhead and FLOP term are indistinguishable -> FLOP term wins."""
    rng = np.random.default_rng(3)
    flops = np.full(8, 2.7e8)
    nbytes = rng.uniform(1e5, 3e6, 8)
    x = np.column_stack([np.ones(8), nbytes, flops])
    y = 35e-6 + nbytes / 3e11
    c = nnls_relative(x, y, drop_preference=(0, 2))
    assert c[0] == 0.0 and 1 / c[2] == pytest.approx(2.7e8 / 35e-6, rel=1e-6)
    assert 1 / c[1] == pytest.approx(3e11, rel=1e-6)
    c = nnls_relative(x, y)
    assert c[0] == pytest.approx(35e-6, rel=1e-6) and c[2] == 0.0
