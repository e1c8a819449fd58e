"""Every experiment script runs on a tiny configuration."""

import json
import subprocess
import sys

import pandas as pd


def _run(root, *args):
    r = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=root, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def test_bench_engine_tiny(root, tmp_path):
    out = tmp_path / "bench.csv"
    _run(root, "experiments/bench_engine.py", "--nodes", "1,2", "--ops", "all_to_all:direct", "--out", str(out))
    df = pd.read_csv(out)
    assert set(df["nodes"]) == {1, 2} and (df["events"] > 0).all()


def test_bench_dlrm_tiny(root):
    line = _run(root, "experiments/bench_dlrm.py", "--one", "1", "--model", "models/dlrm_synthetic.yaml")
    row = json.loads(line.strip().splitlines()[-1])
    assert row["nodes"] == 1 and row["wall_s"] > 0 and row["speedup"] > 0


def test_dlrm_scaling_tiny(root, tmp_path):
    _run(root, "experiments/dlrm_scaling.py", "--tiny", "--out", str(tmp_path), "--workers", "1")
    df = pd.read_csv(tmp_path / "dlrm_scaling.csv")
    assert set(df["nodes"]) == {1, 2} and set(df["mode"]) == {"baseline", "fused"}
    assert (tmp_path / "speedup_vs_nodes.png").stat().st_size > 0
