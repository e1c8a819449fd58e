"""Issue 12, sixth pass: the GEMV split-k reduction term and soft-max forms, and per-layout latency factors of the
embedding wave model (fit, cross-validation, prediction, profile round trip)."""

import math

import numpy as np
import pytest

from simfuse.calibrate import wavefit as wf
from simfuse.costs.calibrated import WaveFit, features, layout_factor, layout_key, layout_key_of

from ..campaign_rows import embedding_row


def _gemv_row(n, k, split_k, variant="compute", world=1, time_s=1e-5):
    grid = math.ceil(n / 128) * split_k
    kpw = math.ceil(math.ceil(k / split_k) / 128) * 128  # the kernel's k_per: the slice rounded up to BLOCK_K
    return dict(kernel="gemv_all_reduce", variant=variant, dtype="bf16", world=world, dim=0, pooling=0, bags=0, m=0,
                n=n, k=k, tokens=1, grid=grid, bags_per_wg=0, block_m=0, block_n=128, block_k=128, split_k=split_k,
                num_warps=4, num_stages=3, flops_per_wg=2.0 * 128 * kpw, bytes_per_wg=2.0 * (128 * kpw + kpw),
                median_s=time_s, p10_s=time_s, p90_s=time_s, n_regs=90, n_spills=0, shared_bytes=73728,
                device="synthetic", date="2026-12-04")


def test_gemv_reduce_slots_are_split_k_times_the_ranks_of_a_fused_launch():
    # the bundled kernel's last-arriving program sums world * SPLIT_K fp32 partial slots (compute: world 1)
    (c,) = wf.campaign_points([_gemv_row(4096, 4096, 4)])
    (f,) = wf.campaign_points([_gemv_row(4096, 4096, 4, variant="fused", world=8)])
    (one,) = wf.campaign_points([_gemv_row(4096, 4096, 1)])
    assert (c.feats["per_slot"], f.feats["per_slot"], one.feats["per_slot"]) == (4.0, 32.0, 1.0)
    # the simulator's GEMV works name no split: one slot, and the k-step term is the slice's K
    sim = features("gemv_all_reduce", 2.0 * 32 * 1024, 1.0, {"n": 8192, "k": 1024, "tokens": 1, "rows_per_wg": 32})
    assert sim["per_slot"] == 1.0 and sim["per_k"] == pytest.approx(1024)


def test_gemv_candidates_include_the_latency_bandwidth_soft_max():
    cands = wf._candidates("gemv_all_reduce")
    soft = [c for c in cands if not c.linear]
    assert soft and all({"per_k@fixed"} < set(c.max_terms) for c in soft)
    assert {dict(c.terms)["per_byte@dev16"] for c in soft if "per_byte@dev16" in dict(c.terms)} == {"dev16"}
    assert any("per_slot" in dict(c.terms) for c in cands if c.linear)


GEMV_TRUE = WaveFit("gemv_all_reduce", "compute", "bf16", slots=396, launch_s=4.0e-6,
                    terms={"per_program": ("fixed", 7e-7), "per_slot": ("fixed", 2e-7),
                           "per_k@fixed": ("fixed", 4e-9), "per_byte@dev16": ("dev16", 3e-11)},
                    max_terms=("per_k@fixed", "per_byte@dev16"), max_order=2.0)


def test_a_gemv_soft_max_truth_is_recovered_below_and_above_a_wave():
    rows = []
    for n in (256, 1024, 4096, 16384, 32768):
        for k in (256, 1024, 4096, 16384):
            for sk in (1, 4, 8):
                r = _gemv_row(n, k, sk)
                (p,) = wf.campaign_points([r])
                r["median_s"] = r["p10_s"] = r["p90_s"] = GEMV_TRUE.launch_time_s(p.grid, p.feats, p.slots)
                rows.append(r)
    pts = wf.campaign_points(rows)
    assert {p.slots for p in pts} == {396}
    y = np.array([p.time_s for p in pts])
    true = wf.Spec(tuple((t, k) for t, (k, _) in GEMV_TRUE.terms.items()), frozenset(GEMV_TRUE.max_terms), 2.0)
    assert true in wf._candidates("gemv_all_reduce")
    coef = wf._fit(pts, true)
    assert coef == pytest.approx([GEMV_TRUE.launch_s] + [c for _, c in GEMV_TRUE.terms.values()], rel=1e-3)
    # chosen by cross-validation among the soft-max forms: the truth or a near-equivalent HBM-sharing rule
    soft = [c for c in wf._candidates("gemv_all_reduce") if not c.linear and "per_slot" in dict(c.terms)]
    spec = wf.select_spec(pts, wf.inner_regions(pts), soft)
    assert np.max(np.abs(wf._predict(pts, spec, wf._fit(pts, spec)) / y - 1.0)) < 0.02
    # the chain sets a 2-program launch, the bandwidth a 2,048-program one: one model prices both
    lone = [p for p in pts if p.grid == 2 and p.axes["k"] == 16384][0]
    full = [p for p in pts if p.grid == 2048][0]
    assert lone.time_s > 0.9 * 4e-9 * lone.feats["per_k"]
    assert full.time_s > full.grid * full.feats["per_byte"] * 3e-11 / 132


# ----------------------------------------------------------------------------------------------- layout factors
EMB_TRUE = WaveFit("embedding_all_to_all", "compute", "fp32", slots=1056, launch_s=3e-6,
                   terms={"per_program": ("fixed", 7e-7), "per_step@fixed": ("fixed", 4e-7),
                          "per_dram_byte@dev16": ("dev16", 3e-11)},
                   max_terms=("per_step@fixed", "per_dram_byte@dev16"), max_order=4.0)
#: the truth's chain per step: 8 bags x 4 warps twice, 4 bags x 8 warps 0.8x the fitted coefficient
TRUE_FACTORS = {layout_key(d, 8, 4): 2.0 for d in (32, 128)} | {layout_key(d, 4, 8): 0.8 for d in (32, 128)}


def _emb_rows(truth):
    rows = []
    for dim in (32, 128):
        for pooling in (4, 32, 128, 512):
            for bags in (512, 2048, 16384, 65536):
                for bpp, nw in ((8, 4), (4, 8), (8, 8)):
                    grid = -(-bags // bpp)
                    fl = float(bpp * pooling * dim)
                    by = float(bpp * (pooling * (dim * 4 + 8) + dim * 4))
                    r = embedding_row(dim, pooling, bags, grid, fl, by, 1.0)
                    r.update(bags_per_wg=bpp, num_warps=nw, n_regs=32)
                    (p,) = wf.campaign_points([r])
                    t = truth.launch_time_s(grid, p.feats, p.slots)
                    r["median_s"] = r["p10_s"] = r["p90_s"] = t
                    rows.append(r)
    return rows


def _truth():
    from dataclasses import replace

    return replace(EMB_TRUE, latency_by_layout=dict(TRUE_FACTORS))


def test_layout_keys_from_work_terms_and_the_nearest_width_rule():
    f = features("embedding_all_to_all", 8 * 16 * 100.0, 0.0, {"dim": 100, "pooling": 16, "num_warps": 4}, "fp32")
    assert layout_key_of(f) == layout_key(100, 8, 4) == "128x8x4"
    fac = {"128x8x4": 2.0, "512x8x4": 3.0}
    assert layout_factor(fac, "128x8x4") == 2.0
    assert layout_factor(fac, "256x8x4") == 3.0  # a tie in log width: the wider
    assert layout_factor(fac, "64x8x4") == 2.0
    assert layout_factor(fac, "128x4x8") == 1.0  # no layout of these bags and warps


def test_latency_factors_scale_only_the_chain():
    truth = _truth()
    f = features("embedding_all_to_all", 8.0 * 512 * 32, 0.0, {"dim": 32, "pooling": 512, "num_warps": 4}, "fp32")
    lone = truth.launch_time_s(64, f, 1056) - truth.launch_s  # 64 programs: the chain sets the time
    plain = EMB_TRUE.launch_time_s(64, f, 1056) - EMB_TRUE.launch_s
    assert lone / plain == pytest.approx(2.0, rel=0.02)
    f1 = features("embedding_all_to_all", 8.0 * 512 * 32, 0.0, {"dim": 32, "pooling": 512, "num_warps": 16}, "fp32")
    assert truth.launch_time_s(64, f1, 1056) == EMB_TRUE.launch_time_s(64, f1, 1056)  # a layout without a factor


def test_layout_factors_are_recovered_and_chosen_by_cross_validation():
    pts = wf.campaign_points(_emb_rows(_truth()))
    spec = wf.Spec(tuple((t, k) for t, (k, _) in EMB_TRUE.terms.items()), frozenset(EMB_TRUE.max_terms), 4.0)
    y = np.array([p.time_s for p in pts])
    c0 = wf._fit(pts, spec)
    plain = np.abs(wf._predict(pts, spec, c0) / y - 1.0)
    coef, fac = wf.fit_layout_factors(pts, spec)
    got = np.abs(wf._predict(wf.with_layout_factors(pts, fac), spec, coef) / y - 1.0)
    assert plain.max() > 0.3  # one chain coefficient cannot price both layouts
    assert got.max() < 0.05 and np.median(got) < 0.01
    # factors are relative to the fitted chain coefficient: their ratios are the truth's
    assert fac[layout_key(128, 8, 4)] / fac[layout_key(128, 4, 8)] == pytest.approx(2.0 / 0.8, rel=0.1)
    assert fac[layout_key(32, 8, 8)] == pytest.approx(coef[2] and 4e-7 / coef[2], rel=0.1)
    cv = wf.cross_validate(pts, [spec], layouts=True)
    assert cv["layout"]["median_abs"] < 0.5 * cv["median_abs"]


def test_fit_group_keeps_the_factors_it_cross_validates_and_a_profile_round_trips_them(monkeypatch):
    small = ({"per_program": ("fixed",)},
             {"latency": (("per_step@fixed", "fixed"),), "hbm": (("per_dram_byte@dev16", "dev16"),)}, (4.0,))
    monkeypatch.setitem(wf.MAX_FORMS, "embedding_all_to_all", small)
    (fit,) = wf.fit_campaign(_emb_rows(_truth()))
    assert fit.latency_by_layout and "without_layout_factors" in fit.cv
    assert fit.cv["median_abs"] < fit.cv["without_layout_factors"]["median_abs"]
    back = WaveFit.from_dict(fit.to_dict())
    assert back.latency_by_layout == pytest.approx(fit.latency_by_layout)
    f = features("embedding_all_to_all", 8.0 * 128 * 128, 0.0, {"dim": 128, "pooling": 128, "num_warps": 4}, "fp32")
    assert back.launch_time_s(64, f, 1056) == pytest.approx(fit.launch_time_s(64, f, 1056), rel=1e-5)
    # data without a layout effect: no factors kept (the plain model cross-validates as well)
    (flat,) = wf.fit_campaign(_emb_rows(EMB_TRUE))
    assert not flat.latency_by_layout and "with_layout_factors" in flat.cv


@pytest.mark.parametrize("bad", [{"128x8": 1.0}, {"128x8x4": 0.0}, {"128x8x4": math.inf}, {"ax8x4": 1.0}])
def test_bad_latency_factors_are_refused(bad):
    with pytest.raises(ValueError, match="latency_by_layout"):
        WaveFit("embedding_all_to_all", "compute", "fp32", 1056, 1e-6, {"per_program": ("fixed", 1e-6)},
                latency_by_layout=bad)


def test_a_profile_with_bad_latency_factors_names_the_field():
    from simfuse.errors import SpecError
    from simfuse.profile.load import profile_from_dict

    good = _truth()
    d = {"simfuse_calibration": 1, "wave_kernels": [good.to_dict()]}
    assert profile_from_dict(d, "<test>").wave_fits[("embedding_all_to_all", "compute", "fp32")].latency_by_layout \
        == pytest.approx(TRUE_FACTORS)
    for bad in ({"128x8x4": 0.0}, {"128x8x4": -1.0}, {"128x8x4": "slow"}, ["128x8x4", 2.0], {"128x8": 2.0}):
        d = {"simfuse_calibration": 1, "wave_kernels": [dict(good.to_dict(), latency_by_layout=bad)]}
        with pytest.raises(SpecError) as exc:
            profile_from_dict(d, "<test>")
        assert "latency_by_layout" in exc.value.field or "latency_by_layout" in str(exc.value)
