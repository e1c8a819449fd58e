"""experiments/validation/network_validation.py on its smoke subset: the leave-source-out table, the fitted ranges and the
summary are written, every held-out source is predicted with terms fitted without it, and the ranges hold the
nominal fit."""

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[2]


def test_network_validation_smoke(root, tmp_path):
    r = subprocess.run([sys.executable, "experiments/validation/network_validation.py", "--smoke", "--out", str(tmp_path)],
                       capture_output=True, text=True, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    table = pd.read_csv(tmp_path / "leave_source_out.csv")
    folds = pd.read_csv(tmp_path / "fits_per_fold.csv")
    assert set(table["held_out_source"]) == set(folds["held_out_source"]) and len(folds) == 2
    # each held-out source is predicted with the terms fitted on the other source only
    for _, f in folds.iterrows():
        rows = table[table["held_out_source"] == f["held_out_source"]]
        assert len(rows) and (rows["scale_out.efficiency"] == f["scale_out.efficiency"]).all()
    err = 100 * (table["simulated_s"] / table["measured_s"] - 1)
    assert (abs(err - table["pct_error"]) < 1e-3).all()  # the CSV keeps 6 significant digits
    ranges = pd.read_csv(tmp_path / "fitted_ranges.csv")
    assert set(ranges["parameter"]) == {"scale_out.efficiency", "scale_out.latency_us", "collectives.net_overhead_us"}
    assert ((ranges["low"] <= ranges["nominal"]) & (ranges["nominal"] <= ranges["high"])).all()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["smoke"] and summary["runs_simulated"] == 2 and "target_met" in summary


def _nv():
    import importlib.util

    path = ROOT / "experiments" / "validation" / "network_validation.py"
    spec = importlib.util.spec_from_file_location("network_validation_under_test", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_fit_keeps_the_nominal_value_of_a_term_the_training_points_do_not_move():
    nv = _nv()
    rows = []
    # one run; its simulated time depends on the efficiency only (best at 0.9), not on the overhead
    for eff in (0.8, 0.9, 1.0):
        for ov in (0.0, 1e-6, 2e-6):
            rows.append(("r", 1 << 20, eff, 3e-6, ov, 1.0 + abs(eff - 0.9), "ring"))
    sim = pd.DataFrame(rows, columns=["run_id", "size_bytes", "scale_out.efficiency", "scale_out.latency_s",
                                      "collectives.net_overhead_s", "simulated_s", "algorithm"])
    meas = {("r", 1 << 20): 1.0}
    nominal = {"scale_out.efficiency": 0.8, "scale_out.latency_s": 3e-6, "collectives.net_overhead_s": 1e-6}
    got = nv.fit(sim, meas, ["r"], {"r": "s"}, None, nominal)
    # the efficiency is pinned by the data; the flat overhead keeps its nominal, not the grid's first value
    assert got == {"scale_out.efficiency": 0.9, "scale_out.latency_s": 3e-6, "collectives.net_overhead_s": 1e-6}
    assert nv.fit(sim, meas, ["r"], {"r": "s"}, None)["collectives.net_overhead_s"] == 0.0


def test_runs_without_a_nic_rate_are_tested_not_trained_on():
    from simfuse.calibrate.corpus import load_corpus

    nv = _nv()
    corpus = load_corpus(ROOT / "data" / "network_corpus")
    untrained = {r.run_id for r in corpus.runs if not nv.trains(r)}
    assert {"nccl1531_h800_a2a_8x8", "xxrjun_c00_2x8_all_to_all"} <= untrained
    assert all(r.nic_gbps is None for r in corpus.runs if r.run_id in untrained)
    assert nv.trains(corpus.run("xxrjun_c01_10x8_all_to_all"))
