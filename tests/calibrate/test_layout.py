"""The embedding kernel's tile layout (issue 12, fourth pass): work terms that follow how the kernel lays a
``[min(bags, 16), next_pow2(dim)]`` gather tile over its threads, and the refusal of configurations that would
spill registers.  Expectations are worked out by hand from the layout rule (see ``embedding_layout``'s docstring),
not read from the code's output."""

import math

import pytest

from simfuse.calibrate import wavefit as wf
from simfuse.costs.base import KernelWork
from simfuse.costs.calibrated import (
    CalibratedCostModel,
    UncalibratedConfig,
    WaveFit,
    embedding_layout,
    features,
)
from simfuse.errors import SpecError
from simfuse.profile.load import profile_from_dict


@pytest.mark.parametrize(
    ("dim", "eb", "bags", "warps", "vec", "loads", "useful"),
    [
        # fp32, 16 x 1024 tile over 256 threads of 4-wide (16 B) loads: 16 loads each, every lane useful
        (1024, 4, 16, 8, 4, 16, 1.0),
        # half the warps: twice the loads per thread
        (1024, 4, 16, 4, 4, 32, 1.0),
        # 16 x 16 tile = 256 elements on 256 threads: one element each (the tile caps the vector width)
        (16, 4, 16, 8, 1, 1, 1.0),
        # the same tile on 64 threads: 4-wide, one load each
        (16, 4, 16, 2, 4, 1, 1.0),
        # dim 456 = 8 x 57 pads to 512 columns: 8 x 512 over 128 threads x 4 = 8 loads, 456/512 of the lanes useful
        (456, 4, 8, 4, 4, 8, 456 / 512),
        # bf16 dim 24 (16 B = 8 elements, but 4 x 32 = 128 elements on 64 threads: 2 each), 24 of 32 columns
        (24, 2, 4, 2, 2, 1, 0.75),
        # one bag of dim 8 on 512 threads: one element per thread, 8 of 512 lanes do useful work (replicated)
        (8, 4, 1, 16, 1, 1, 8 / 512),
        # dim 12 fp32: the row offset idx x 12 is only a multiple of 4 elements -> 4-wide loads still (16 B)
        (12, 4, 16, 1, 4, 2, 12 / 16),
        # dim 6 bf16: multiple of 2 elements only -> 2-wide loads (4 B), 16 x 8 tile on 32 threads: 2 loads each
        (6, 2, 16, 1, 2, 2, 6 / 8),
    ],
)
def test_layout_of_the_gather_tile(dim, eb, bags, warps, vec, loads, useful):
    lay = embedding_layout(dim, eb, bags, warps)
    assert lay["block_d"] == 2 ** math.ceil(math.log2(dim))
    assert lay["sub"] == min(bags, 16)
    assert lay["vec"] == vec
    assert lay["loads_per_thread"] == loads
    assert lay["useful_lane_fraction"] == pytest.approx(useful)
    assert lay["acc_per_thread"] == pytest.approx(min(bags, 16) * lay["block_d"] / (32 * warps))
    # the loads cover the tile (padded columns included) at least once
    assert lay["loads_per_thread"] * 32 * warps * lay["vec"] >= lay["sub"] * lay["block_d"]


def test_layout_work_terms_count_loads_per_thread():
    # fp32 dim 1024, 8 bags x pooling 16 at 8 warps: 8 dependent steps of 2 lookups, each tile 8 x 1024 over 256
    # threads x 4 = 8 loads per thread: 8 x 2 x 8 = 128 loads per thread, 128 x 8 = 1024 warp loads per program
    f = features("embedding_all_to_all", 8.0 * 16 * 1024, 0.0, {"dim": 1024, "pooling": 16, "num_warps": 8}, "fp32")
    assert f["per_warp_ld"] == 128.0 and f["per_sm_ld"] == 1024.0
    assert f["acc_per_thread"] == pytest.approx(8 * 1024 / 256)
    # without num_warps in the shape: the kernel default of the campaigns (8)
    g = features("embedding_all_to_all", 8.0 * 16 * 1024, 0.0, {"dim": 1024, "pooling": 16}, "fp32")
    assert g["per_warp_ld"] == f["per_warp_ld"]


def _emb_fit(limit):
    return WaveFit("embedding_all_to_all", "compute", "fp32", 1056, 2e-6,
                   {"per_program": ("fixed", 1e-6), "per_dram_byte": ("dev16", 3e-11)}, max_acc_per_thread=limit)


def _work(dim, bags, warps):
    return KernelWork("embedding_bag", 1024, bags * 4 * dim, bags * 4 * dim * 4.0, "fp32", "compute",
                      (("bags", 1024 * bags), ("dim", dim), ("pooling", 4), ("num_warps", warps)))


def test_configurations_that_would_spill_are_refused_with_the_reason():
    cm = CalibratedCostModel({}, fallback=None, wave_fits={("embedding_all_to_all", "compute", "fp32"): _emb_fit(64)},
                             compute_units=132)
    # 8 bags x 1024 columns / 256 threads = 32 accumulator elements: priced
    assert cm.workgroup_time_s(_work(1024, 8, 8), 500) > 0
    # 16 x 2048 / 256 = 128 > 64: refused, naming the quantity, the limit and what to change
    with pytest.raises(UncalibratedConfig, match=r"128 fp32 accumulator elements per thread.*64.*spill"):
        cm.workgroup_time_s(_work(2048, 16, 8), 500)
    # the same tile at 16 warps is back within the limit
    assert cm.workgroup_time_s(_work(2048, 16, 16), 500) > 0
    # a profile without the limit (before this pass) prices everything, as it did
    old = CalibratedCostModel({}, fallback=None,
                              wave_fits={("embedding_all_to_all", "compute", "fp32"): _emb_fit(0.0)}, compute_units=132)
    assert old.workgroup_time_s(_work(2048, 16, 8), 500) > 0


def test_limit_round_trips_and_bad_values_name_the_entry():
    w = _emb_fit(64)
    assert WaveFit.from_dict(w.to_dict()).max_acc_per_thread == 64
    assert "max_acc_per_thread" not in _emb_fit(0.0).to_dict()  # old layout kept when there is no limit
    doc = {"simfuse_calibration": 1, "device": {"compute_units": 132}, "kernels": [],
           "wave_kernels": [dict(w.to_dict(), max_acc_per_thread=-1)]}
    with pytest.raises(SpecError, match=r"wave_kernels\[0\]"):
        profile_from_dict(doc, "p.yaml")


def test_fit_records_the_largest_fitted_tile(monkeypatch):
    monkeypatch.setitem(wf.MAX_FORMS, "embedding_all_to_all",
                        ({"per_program": ("fixed",)}, {"latency": (("per_step@fixed", "fixed"),),
                                                       "hbm": (("per_dram_byte@dev16", "dev16"),)}, (2.0,)))
    truth = _emb_fit(0.0)
    rows = []
    for dim in (64, 256, 1024):
        for pooling in (1, 8, 64):
            for bags in (1024, 16384, 65536):
                for warps in (4, 8):
                    grid = bags // 8
                    fl, by = 8.0 * pooling * dim, 8.0 * (pooling * (dim * 4 + 8) + dim * 4)
                    t = truth.launch_time_s(grid, features("embedding_all_to_all", fl, by,
                                                           {"dim": dim, "pooling": pooling, "num_warps": warps}))
                    rows.append(dict(kernel="embedding_all_to_all", variant="compute", dtype="fp32", dim=dim,
                                     pooling=pooling, bags=bags, grid=grid, bags_per_wg=8, num_warps=warps,
                                     flops_per_wg=fl, bytes_per_wg=by, median_s=t, n_regs=32, n_spills=0,
                                     shared_bytes=0))
    (fit,) = wf.fit_campaign(rows)
    assert fit.max_acc_per_thread == 8 * 1024 / (32 * 4)  # 8 bags of 1024 columns over 4 warps


def _row(dim, bags_per_wg, warps, spills, t=1e-5):
    return dict(kernel="embedding_all_to_all", variant="compute", dtype="fp32", dim=dim, pooling=8, bags=16384,
                grid=16384 // bags_per_wg, bags_per_wg=bags_per_wg, num_warps=warps,
                flops_per_wg=8.0 * bags_per_wg * dim, bytes_per_wg=0.0, median_s=t, n_regs=64, n_spills=spills,
                shared_bytes=0)


def test_the_limit_stops_below_the_smallest_tile_that_spilled():
    # tiles per thread (min(bags, 16) x next_pow2(dim) / (32 x warps)): 8 x 256 / 256 = 8; 8 x 1024 / 256 = 32;
    # 16 x 2048 / 512 = 64 (spilled 400 registers); 8 x 1024 / 64 = 128 (compiled clean, at 2 warps)
    rows = [_row(256, 8, 8, 0), _row(1024, 8, 8, 0), _row(2048, 16, 16, 400), _row(1024, 8, 2, 0)]
    assert wf.acc_limits(rows) == {("embedding_all_to_all", "compute", "fp32"): 32.0}
    # without the spilling configuration: the largest fitted tile
    assert wf.acc_limits([r for r in rows if not r["n_spills"]]) == {("embedding_all_to_all", "compute", "fp32"): 128.0}
    # a few spilled registers (<= MAX_FIT_SPILLS, fitted) do not count as spilling
    assert wf.acc_limits([_row(1024, 8, 8, 0), _row(2048, 16, 16, wf.MAX_FIT_SPILLS)]) == \
        {("embedding_all_to_all", "compute", "fp32"): 64.0}
