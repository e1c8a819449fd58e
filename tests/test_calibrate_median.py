"""Several traced launches per shape and rank (median launch, mean over ranks) and the held-out tables'
``traffic_bytes`` column (one bytes definition for traces and held-out points)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from simfuse.calibrate.build import build_profile, fit_kernel_group, median_launches, read_inputs
from simfuse.calibrate.kernel_trace import read_kernel_runs, write_kernel_trace
from simfuse.calibrate.validate import kernel_work, read_measurements, validation_table

LAUNCH0 = 1_700_000_000_000_000_000


def launch_rows(run_id: str, rank: int, makespan_ns: int, launch_ns: int, grid: int = 4, variant: str = "compute",
                shape: str = "n=1") -> list[dict]:
    """One launch of ``grid`` programs that all run at once for ``makespan_ns``."""
    start = launch_ns + 5_000
    return [{"run_id": run_id, "kernel": "gemv_all_reduce", "variant": variant, "backend": "emulated",
             "world_size": 2, "rank": rank, "dtype": "bf16", "shape": shape, "grid": grid, "num_warps": 4,
             "launch_ns": launch_ns, "kernel_end_ns": start + makespan_ns + 2_000, "program_id": p,
             "start_ns": start, "end_ns": start + makespan_ns, "smid": p, "flops_per_program": 0.0,
             "bytes_per_program": 1.0e6} for p in range(grid)]


def test_median_launch_per_shape_and_rank_then_mean_over_ranks(tmp_path):
    rows, launch = [], LAUNCH0
    # rank 0: a cold first launch (5x slower) and four warm ones; rank 1: slower (the last-arriving rank).
    for i, ms in enumerate([50_000, 10_000, 10_400, 9_800, 10_200]):
        rows += launch_rows(f"r-{i:04d}", 0, ms, launch)
        launch += 1_000_000
    for i, ms in enumerate([14_000, 14_200, 13_800]):
        rows += launch_rows(f"r-{5 + i:04d}", 1, ms, launch)
        launch += 1_000_000
    path = tmp_path / "t.csv"
    write_kernel_trace(path, rows)
    runs = read_kernel_runs(path)
    sel = median_launches(runs)
    assert sorted((r.rank, round(r.makespan_s * 1e9)) for r in sel) == [(0, 10_200), (1, 14_000)]
    prof = build_profile(read_inputs([path]))
    (pt,) = prof["points"]
    assert pt["measured_s"] == pytest.approx((10_200 + 14_000) / 2 * 1e-9)
    assert pt["runs"] == 8 and pt["traced_ranks"] == [0, 1]
    assert pt["measured_by_rank_s"] == pytest.approx([10_200e-9, 14_000e-9])
    (k,) = prof["kernels"]
    assert k["runs"] == 8


def test_single_launch_per_shape_is_unchanged(tmp_path):
    rows = launch_rows("a-0000", 0, 20_000, LAUNCH0) + launch_rows("a-0001", 0, 40_000, LAUNCH0 + 10**6, grid=8,
                                                                    shape="n=2")
    path = tmp_path / "t.csv"
    write_kernel_trace(path, rows)
    runs = read_kernel_runs(path)
    assert median_launches(runs) == sorted(runs, key=lambda r: r.group_key)
    fit = fit_kernel_group(runs, compute_units=132)
    assert fit["runs"] == 2 and fit["fit"]["points"] == 2


def _heldout(path, traffic: bool) -> None:
    cols = ["kernel", "variant", "backend", "world_size", "dtype", "shape", "grid", "num_warps", "median_s", "p10_s",
            "p90_s", "flops", "bytes", "device", "date"] + (["traffic_bytes"] if traffic else [])
    row = ["gemm_all_to_all", "compute", "emulated", "4", "bf16",
           "block_k=64;block_m=128;block_n=256;k=4096;m=768;n=4096", "96", "8", "4.5e-05", "4.4e-05", "4.6e-05",
           "25769803776", "46137344", "NVIDIA H200", "2026-12-02"] + (["308281344"] if traffic else [])
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(cols)
        w.writerow(row)


def test_heldout_traffic_bytes_feed_the_calibrated_model(tmp_path):
    with_t, without = tmp_path / "with.csv", tmp_path / "without.csv"
    _heldout(with_t, True)
    _heldout(without, False)
    (m,) = read_measurements(with_t)
    assert m.traffic_bytes == 308281344 and m.bytes == 46137344
    assert read_measurements(without)[0].traffic_bytes is None
    work = kernel_work(m.kernel, m.variant, m.dtype, m.shape, m.grid, m.flops, m.bytes, m.traffic_bytes)
    assert work.bytes_per_wg == pytest.approx(46137344 / 96)
    assert work.requested_bytes_per_wg == pytest.approx(308281344 / 96)
    topo = str(Path(__file__).resolve().parent.parent / "topologies" / "h200_nvl8_ib_ndr.yaml")
    a = validation_table(topo, with_t)
    b = validation_table(topo, without)
    ha, hb = a[a["set"] == "held_out"].iloc[0], b[b["set"] == "held_out"].iloc[0]
    assert ha["requested_bytes_per_wg"] == pytest.approx(308281344 / 96)
    assert hb["requested_bytes_per_wg"] == pytest.approx(46137344 / 96)
    # the GEMM fit has a byte term: requested bytes (the traces' definition) give the longer time
    assert ha["simulated_s"] > hb["simulated_s"]
    assert bool(ha["in_calibration_range"]) and not bool(hb["in_calibration_range"])
