"""experiments/validation/network_validation.py on its smoke subset: the leave-source-out table, the fitted ranges and the
summary are written, every held-out source is predicted with terms fitted without it, and the ranges hold the
nominal fit."""

import json
import subprocess
import sys

import pandas as pd


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
