"""Issue 12, fifth pass: resident programs per compiled embedding configuration in the cost model, the random
row-access terms, regions that absorb off-grid shapes near an axis' extreme, and the noise of fresh-allocation
repeats in held-out reports.  Expectations are worked out by hand (CUDA occupancy rules, the term definitions)."""

import math

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from simfuse.calibrate import wavefit as wf
from simfuse.calibrate.validate import heldout_summary, repeat_spreads
from simfuse.costs.base import KernelWork
from simfuse.costs.calibrated import CalibratedCostModel, WaveFit, features, layout_key
from simfuse.errors import SpecError
from simfuse.profile.load import profile_from_dict

from ..campaign_rows import embedding_row


def test_layout_key_is_what_the_kernel_compiles_on():
    # BLOCK_D = next_pow2(dim), SUB = min(bags, 16) rounded up to a power of two, warps
    assert layout_key(128, 4, 8) == "128x4x8"
    assert layout_key(1208, 12, 4) == "2048x16x4"
    assert layout_key(24, 64, 2) == "32x16x2"
    assert layout_key(8, 1, 16) == "8x1x16"


def _emb_fit(**kw):
    terms = {"per_program": ("fixed", 1e-6), "per_step@fixed": ("fixed", 5e-7),
             "per_dram_byte@dev16": ("dev16", 3e-11)}
    return WaveFit("embedding_all_to_all", "compute", "fp32", 1056, 2e-6, terms,
                   max_terms=("per_step@fixed", "per_dram_byte@dev16"), max_order=2.0, **kw)


def test_slots_follow_the_launch_configuration_not_only_the_dim():
    # fp32 dim 1024: 8 bags x 8 warps = 32 accumulators a thread, 128 registers -> 2 programs per SM (264); 4 bags
    # x 8 warps = 16 accumulators, 80 registers -> ceil(80 x 32 / 256) x 256 = 2,560 a warp, 25 warps, 3 programs
    w = _emb_fit(slots_by_dim={1024: 264}, slots_by_layout={"1024x8x8": 264, "1024x4x8": 396, "128x4x8": 1056})
    assert w.slots_for({"dim": 1024}) == 264  # default configuration: 8 bags, 8 warps
    assert w.slots_for({"dim": 1024, "bags_per_wg": 4}) == 396
    assert w.slots_for({"dim": 1024}, {"per_bag": 4.0}) == 396  # bags per program from the work terms
    # dim 768 compiles BLOCK_D 1,024: the same kernel
    assert w.slots_for({"dim": 768, "bags_per_wg": 4}) == 396
    # an unmeasured width: the nearest measured one of the same bags and warps (256 is nearer 128 than 1,024)
    assert w.slots_for({"dim": 200, "bags_per_wg": 4}) == 1056
    # no configuration of these bags and warps measured: the default configuration's slots by dim
    assert w.slots_for({"dim": 1024, "bags_per_wg": 16, "num_warps": 4}) == 264
    assert _emb_fit().slots_for({"dim": 1024, "bags_per_wg": 4}) == 1056  # nothing measured: the model's slots


def test_cost_model_prices_a_work_with_its_own_configurations_slots():
    w = _emb_fit(slots_by_dim={1024: 264}, slots_by_layout={"1024x8x8": 264, "1024x4x8": 396})
    cm = CalibratedCostModel({}, fallback=None, wave_fits={(w.kernel, w.variant, w.dtype): w}, compute_units=132)
    # 4 bags of 16 lookups per program (the simulator's DLRM default bags_per_wg)
    work = KernelWork("embedding_bag", 4096, 4 * 16 * 1024, 4 * 16 * (4096 + 8) + 4 * 4096, "fp32",
                      shape=(("bags", 16384), ("dim", 1024), ("pooling", 16)))
    assert cm.slots(work) == 396
    feats = cm.wave_features(work)
    assert cm.workgroup_time_s(work, 396) == pytest.approx(w.program_time_s(feats, 396, 396))


def test_slots_by_layout_round_trips_and_bad_entries_are_refused():
    w = _emb_fit(slots_by_layout={"1024x4x8": 396})
    assert WaveFit.from_dict(w.to_dict()).slots_by_layout == {"1024x4x8": 396}
    assert "slots_by_layout" not in _emb_fit().to_dict()  # older profiles keep their layout
    for bad in ({"1024x4": 396}, {"1024x4x8": 0}, {"ax4x8": 10}, ["1024x4x8", 396], {"1024x4x8": 2.7},
                {"1024x4x8": "many"}):
        d = {"simfuse_calibration": 1, "wave_kernels": [dict(w.to_dict(), slots_by_layout=bad)]}
        with pytest.raises(SpecError, match="wave_kernels") as exc:
            profile_from_dict(d, "<test>")
        assert "slots_by_layout" in exc.value.field or "slots_by_layout" in str(exc.value)
    for bad in ([1024, 264], {1024: 0.5}):
        d = {"simfuse_calibration": 1, "wave_kernels": [dict(w.to_dict(), slots_by_dim=bad)]}
        with pytest.raises(SpecError, match="slots_by_dim"):
            profile_from_dict(d, "<test>")


def test_campaign_slots_per_layout_are_the_compiled_kernels():
    rows = []
    for bags_per_wg, regs in ((8, 128), (4, 80)):
        r = embedding_row(1024, 16, 16384, 16384 // bags_per_wg, 1.0, 1.0, 1e-4)
        rows.append(dict(r, bags_per_wg=bags_per_wg, n_regs=regs))
    pts = wf.campaign_points(rows)
    assert wf.slots_by_layout(pts) == {"1024x4x8": 396, "1024x8x8": 264}
    # 64 warps / 2 per program = 32, capped at 32 blocks per SM; 4 warps at 255 registers: 8,192 a warp -> 2
    assert wf.occupancy_slots(32, 0, 2) == 32 * 132
    assert wf.occupancy_slots(255, 0, 4) == 2 * 132
    # shared memory: 228 KiB per SM, 1 KiB reserved per block
    assert wf.occupancy_slots(32, 73728, 4) == 3 * 132


def test_random_access_terms():
    # fp16 dim 24: 8 bags x 4 lookups = 32 rows of 48 B; a 1 Gi-row table (no L2 hits to speak of) vs one that fits
    f = features("embedding_all_to_all", 8 * 4 * 24, 0.0, {"dim": 24, "pooling": 4, "rows": 2**30}, "fp16")
    h = f["l2_hit"]
    assert f["per_row_hbm"] == pytest.approx(32 * (1 - h))
    assert f["per_raw_byte"] == pytest.approx(32 * 48 * (1 - h) + 32 * 8 + 8 * 48)
    small = features("embedding_all_to_all", 8 * 4 * 24, 0.0, {"dim": 24, "pooling": 4, "rows": 1024}, "fp16")
    assert small["l2_hit"] == 1.0 and small["per_row_hbm"] == 0.0
    assert small["per_raw_byte"] == pytest.approx(32 * 8 + 8 * 48)  # indices and the pooled rows still move


def _pts(axis_values):
    return [wf.Point("gemm_all_to_all", "compute", "bf16", 1, 132, {}, {"m": v, "n": 1024.0, "k": 1024.0}, 1.0)
            for v in axis_values]


def test_regions_take_the_points_within_2x_of_an_extreme():
    pts = _pts([512, 2048, 8192, 16384, 700, 12000, 300])  # a grid and three off-grid shapes
    regs = wf.regions(pts)
    assert sorted(pts[i].axes["m"] for i in regs["m=300 (lowest)"]) == [300, 512]
    assert sorted(pts[i].axes["m"] for i in regs["m=16384 (highest)"]) == [12000, 16384]
    # on a 4x grid a region is the extreme value alone
    regs = wf.regions(_pts([512, 2048, 8192]))
    assert [len(v) for v in regs.values()] == [1, 1]


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(1.0, 1e5), min_size=3, max_size=30))
def test_regions_leave_the_axis_spanned(values):
    pts = _pts(values)
    vals = {p.axes["m"] for p in pts}
    for name, idx in wf.regions(pts).items():
        inside = {pts[i].axes["m"] for i in idx}
        assert idx and len(vals - inside) >= 2, name
        lo, hi = min(vals), max(vals)
        span = wf.REGION_SPAN if hi >= 8 * lo else 1.0
        assert all(v <= lo * span for v in inside) if "lowest" in name else all(v >= hi / span for v in inside)


def test_heldout_reports_carry_the_repeat_noise():
    rows = [dict(embedding_row(64, 4, 4096, 512, 1.0, 1.0, t), alloc=a) for a, t in ((0, 1.0e-5), (1, 1.2e-5))]
    rows.append(embedding_row(128, 4, 4096, 512, 1.0, 1.0, 2e-5))
    sp = repeat_spreads(rows)
    assert sorted(sp.values()) == [(1, 0.0), (2, pytest.approx(20.0))]
    df = pd.DataFrame({"family": ["f", "f"], "kernel": ["k", "k"], "variant": ["c", "c"], "dtype": ["d", "d"],
                       "fitted_config": [True, True], "repeats": [2, 2], "repeat_spread_pct": [20.0, 4.0],
                       "pct_error": [-15.0, 1.0]})
    for c in ("dim", "pooling", "bags", "table_rows", "bags_per_wg", "m", "n", "k", "split_k", "num_warps", "grid",
              "slots", "n_spills", "rejected", "measured_s", "predicted_s"):
        df[c] = 0
    s = heldout_summary(df, "<test>")["families"]["f"]
    assert s["repeat_spread_median_pct"] == 12.0 and s["repeat_spread_max_pct"] == 20.0
    # beyond half the spread: 15 - 10 = 5, and 1 - 2 < 0 -> 0
    assert s["beyond_noise_max_abs_pct"] == 5.0 and s["beyond_noise_median_abs_pct"] == 2.5
    assert math.isclose(s["median_abs_pct"], 8.0)
