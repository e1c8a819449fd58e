"""Issue 12, third pass: embedding table size (L2 hits), v2 campaign columns, held-out campaigns.

Expectations are closed forms (the v1 table-size rule, the L2 hit fraction of a uniform random gather) or
invariants (no table size = the old behaviour; a model's own data predicted exactly)."""

import csv
import gzip
import io
import math

import numpy as np
import pytest

from simfuse.calibrate import wavefit as wf
from simfuse.calibrate.validate import campaign_validation
from simfuse.costs.base import KernelWork
from simfuse.costs.calibrated import (
    DRAM_ATOM_BYTES,
    L2_EFFECTIVE_BYTES,
    L2_LATENCY_RATIO,
    CalibratedCostModel,
    WaveFit,
    features,
    l2_hit_fraction,
)


def _emb_row(dim, pooling, bags, dtype="fp32", table_rows=None, alloc=None, median_s=1e-5, n_spills=0, bpp=8,
             warps=8):
    eb = 4 if dtype == "fp32" else 2
    r = dict(kernel="embedding_all_to_all", variant="compute", dtype=dtype, world=1, dim=dim, pooling=pooling,
             bags=bags, m=0, n=0, k=0, tokens=0, grid=bags // bpp, bags_per_wg=bpp, block_m=0, block_n=0, block_k=0,
             split_k=0, num_warps=warps, num_stages=0, flops_per_wg=bpp * pooling * dim,
             bytes_per_wg=bpp * (pooling * (dim * eb + 8) + dim * eb + 16), median_s=median_s, p10_s=median_s,
             p90_s=median_s, n_regs=32, n_spills=n_spills, shared_bytes=0, device="synthetic", date="2026-12-03")
    if table_rows is not None:
        r["table_rows"] = table_rows
    if alloc is not None:
        r["alloc"] = alloc
    return r


def test_v1_rows_get_the_v1_table_size_rule():
    # clip(512 MiB / (dim x element bytes), 1 Mi, 16 Mi) rows (experiments/gpu_campaigns/trace_campaign.py, Campaign.embedding)
    assert wf.table_rows(_emb_row(128, 4, 1024)) == 2**20  # 512 MiB / 512 B = 1 Mi
    assert wf.table_rows(_emb_row(32, 4, 1024)) == 4 * 2**20
    assert wf.table_rows(_emb_row(8, 4, 1024)) == 16 * 2**20
    assert wf.table_rows(_emb_row(1024, 4, 1024)) == 2**20  # clipped up: a 4 GiB table
    assert wf.table_rows(_emb_row(32, 4, 1024, dtype="bf16")) == 8 * 2**20
    assert wf.table_rows(_emb_row(16, 4, 1024, dtype="fp16")) == 16 * 2**20
    assert wf.table_rows(_emb_row(128, 4, 1024, table_rows=1024)) == 1024  # v2: the column wins
    assert wf.table_rows({"kernel": "gemm_all_to_all", "dim": 0}) == 0


def test_alloc_repeats_merge_and_table_sizes_do_not():
    rows = [_emb_row(128, 16, 16384, table_rows=2**20, alloc=a, median_s=t) for a, t in enumerate((1.0, 3.0, 2.0))]
    rows.append(_emb_row(128, 16, 16384, median_s=5.0))  # v1 row: derived 1 Mi rows, the same shape
    rows.append(_emb_row(128, 16, 16384, table_rows=1024, median_s=0.5))
    merged = wf.merge_repeats(rows)
    assert sorted((m["table_rows"], m["repeats"], m["median_s"]) for m in merged) == [(1024, 1, 0.5),
                                                                                     (2**20, 4, 2.5)]


def test_l2_hit_fraction_of_a_uniform_gather():
    assert l2_hit_fraction(0, 512) == 0.0  # unknown table size: far beyond the L2
    assert l2_hit_fraction(1024, 512) == 1.0  # 512 KiB table
    assert l2_hit_fraction(2**20, 512) == pytest.approx(L2_EFFECTIVE_BYTES / 2**29)
    assert l2_hit_fraction(2**20, 512, l2_bytes=2**28) == pytest.approx(0.5)


def test_table_size_features_and_old_behaviour_without_rows():
    bpp, p, d = 8, 16, 128
    shape = {"dim": d, "pooling": p}
    old = features("embedding_all_to_all", bpp * p * d, 0.0, shape, "fp32")
    assert old["per_hbm_byte"] == old["per_dram_byte"] == old["per_l2_byte"]  # h = 0
    assert old["per_step_l2"] == old["per_step"]
    rows = 2**20
    h = L2_EFFECTIVE_BYTES / (rows * d * 4)
    new = features("embedding_all_to_all", bpp * p * d, 0.0, dict(shape, rows=rows, num_warps=4), "fp32")
    gathered = bpp * p * math.ceil(d * 4 / DRAM_ATOM_BYTES) * DRAM_ATOM_BYTES
    assert new["l2_hit"] == pytest.approx(h)
    assert new["per_hbm_byte"] == pytest.approx(old["per_dram_byte"] - h * gathered)
    assert new["per_step_l2"] == pytest.approx(old["per_step"] * (L2_LATENCY_RATIO + (1 - L2_LATENCY_RATIO) * (1 - h)))
    assert new["per_warp_byte"] == pytest.approx(old["per_dram_byte"] / 4)


def test_simulator_works_carry_table_rows_and_small_tables_are_faster():
    from simfuse.collectives import Layout
    from simfuse.fused.ops import EmbeddingAllToAll

    op = EmbeddingAllToAll({"rows": 4096, "tables_per_gpu": 2, "global_batch": 1024}, Layout(1, 4))
    w = op.work("compute")
    assert dict(w.shape)["rows"] == 4096
    fit = WaveFit("embedding_all_to_all", "compute", "fp32", 1056, 2e-6,
                  {"per_program": ("fixed", 3e-7), "per_step_l2@fixed": ("fixed", 5e-7),
                   "per_hbm_byte@dev16": ("dev16", 2.7e-11)},
                  max_terms=("per_step_l2@fixed", "per_hbm_byte@dev16"), max_order=2.0)
    cm = CalibratedCostModel({}, fallback=None, wave_fits={("embedding_all_to_all", "compute", "fp32"): fit},
                             compute_units=132)
    big = KernelWork(w.name, w.num_workgroups, w.flops_per_wg, w.bytes_per_wg, w.dtype, w.variant,
                     tuple((k, v) for k, v in w.shape if k != "rows"))
    huge = KernelWork(w.name, w.num_workgroups, w.flops_per_wg, w.bytes_per_wg, w.dtype, w.variant,
                      tuple((k, 2**40 if k == "rows" else v) for k, v in w.shape))
    assert cm.workgroup_time_s(w, 1056) < cm.workgroup_time_s(big, 1056)
    assert cm.workgroup_time_s(huge, 1056) == pytest.approx(cm.workgroup_time_s(big, 1056), rel=1e-4)


def test_spilling_configurations_are_not_fitted():
    rows = [_emb_row(128, 4, 16384, median_s=1e-5), _emb_row(1024, 4, 16384, bpp=16, warps=2, n_spills=1482,
                                                             median_s=7e-4)]
    assert [p.axes["dim"] for p in wf.campaign_points(rows)] == [128]
    assert len(wf.campaign_points(rows, keep_spilling=True)) == 2


def _write(path, rows):
    buf = io.StringIO()
    cols = sorted({c for r in rows for c in r})
    w = csv.DictWriter(buf, fieldnames=cols)
    w.writeheader()
    w.writerows(rows)
    path.write_bytes(gzip.compress(buf.getvalue().encode()))


def _gemm_rows(ms, truth):
    rows = []
    for m in ms:
        for n in (512, 2048, 8192):
            for k in (512, 2048, 8192):
                grid = -(-m // 128) * (n // 256)
                fl = 2.0 * 128 * 256 * k
                by = float((128 + 256) * k * 2 + 128 * 256 * 2)
                t = truth.launch_time_s(grid, features("gemm_all_to_all", fl, by, {"k": k}))
                rows.append(dict(kernel="gemm_all_to_all", variant="compute", dtype="bf16", world=1, dim=0,
                                 pooling=0, bags=0, m=m, n=n, k=k, tokens=0, grid=grid, bags_per_wg=0, block_m=128,
                                 block_n=256, block_k=64, split_k=0, num_warps=8, num_stages=3, table_rows=0,
                                 alloc=0, flops_per_wg=fl, bytes_per_wg=by, median_s=t, p10_s=t, p90_s=t,
                                 n_regs=190, n_spills=0, shared_bytes=147456, device="synthetic",
                                 date="2026-12-03"))
    return rows


TRUE = WaveFit("gemm_all_to_all", "compute", "bf16", slots=132, launch_s=2.5e-6,
               terms={"per_program": ("fixed", 3e-6), "per_flop": ("cu", 1.4e-13), "per_byte": ("dev4", 2.6e-12)})


def test_heldout_campaign_is_predicted_by_the_training_fit(tmp_path):
    train, held = tmp_path / "train.csv.gz", tmp_path / "held.csv.gz"
    _write(train, _gemm_rows((512, 1024, 2048, 4096, 8192), TRUE))
    _write(held, _gemm_rows((768, 3072, 12288), TRUE))  # off the grid, one beyond it
    out = tmp_path / "cv"
    s = campaign_validation([train], out, heldout=held)
    h = s["heldout"]
    assert h["all"]["points"] == 27 and h["all"]["max_abs_pct"] < 1e-4  # the truth's own form: exact
    assert set(h["families"]) == {"gemm_all_to_all/compute/bf16"}
    assert len(h["worst"]) == 10
    assert (out / "heldout_validation.csv").is_file() and (out / "heldout_summary.json").is_file()
    # the held-out file never enters the fit: a slower held-out set is predicted as before, 2x off
    slow = _gemm_rows((768, 3072, 12288), TRUE)
    for r in slow:
        r["median_s"] *= 2.0
    _write(held, slow)
    h2 = campaign_validation([train], None, heldout=held)["heldout"]
    assert h2["all"]["median_abs_pct"] == pytest.approx(50.0, rel=1e-4)


def test_heldout_family_without_a_model_is_a_clear_error(tmp_path):
    from simfuse.cli.calibrate import main

    train, held = tmp_path / "train.csv.gz", tmp_path / "held.csv.gz"
    _write(train, _gemm_rows((512, 2048, 8192), TRUE))
    rows = _gemm_rows((768,), TRUE)
    for r in rows:
        r["dtype"] = "fp16"
    _write(held, rows)
    assert main(["validate", "--campaign", str(train), "--heldout-campaign", str(held)]) == 2


def test_softmax_fit_recovers_a_table_size_model():
    truth = WaveFit("embedding_all_to_all", "compute", "fp32", 1056, 2.2e-6,
                    {"per_program": ("fixed", 1e-6), "per_step_l2@fixed": ("fixed", 5e-7),
                     "per_hbm_byte@dev16": ("dev16", 2.7e-11), "per_l2_byte@dev16": ("dev16", 9e-12)},
                    max_terms=("per_step_l2@fixed", "per_hbm_byte@dev16", "per_l2_byte@dev16"), max_order=2.0)
    rows = []
    for dim in (16, 64, 256):
        for pooling in (1, 16, 64):
            for bags in (1024, 16384, 65536):
                for tr in (1024, 2**16, 2**18, 2**22):
                    r = _emb_row(dim, pooling, bags, table_rows=tr)
                    f = features("embedding_all_to_all", r["flops_per_wg"], r["bytes_per_wg"],
                                 {"dim": dim, "pooling": pooling, "rows": tr}, "fp32")
                    r["median_s"] = truth.launch_time_s(r["grid"], f)
                    rows.append(r)
    pts = wf.campaign_points(rows)
    spec = wf.Spec(tuple((t, k) for t, (k, _) in truth.terms.items()), frozenset(truth.max_terms), 2.0)
    coef = wf._fit(pts, spec)
    pred = wf._predict(pts, spec, coef)
    y = np.array([p.time_s for p in pts])
    assert np.max(np.abs(pred / y - 1)) < 1e-4
    for (t, (_, c)), got in zip(truth.terms.items(), coef[1:], strict=True):
        assert got == pytest.approx(c, rel=1e-3), t
