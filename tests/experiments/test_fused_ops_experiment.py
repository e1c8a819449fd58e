"""experiments/fused_ops/fused_ops.py --tiny runs end to end and writes sane outputs."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_tiny_sweep(tmp_path):
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(ROOT / "experiments" / "fused_ops" / "fused_ops.py"), "--tiny", "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "paper avg" in proc.stdout and "embedding_all_to_all" in proc.stdout
    df = pd.read_csv(out / "fused_ops.csv")
    need = {"op", "nodes", "gpus_per_node", "gpus", "baseline_time_s", "fused_time_s", "speedup",
            "time_reduction", "baseline_compute_s", "baseline_exposed_comm_s", "fused_compute_s",
            "fused_exposed_comm_s", "baseline_algorithm", "comm_bytes_per_rank", "regime"}
    assert need <= set(df.columns)
    assert set(df["op"]) == {"embedding_all_to_all", "gemv_all_reduce", "gemm_all_to_all"}
    assert (df["gpus"] == df["nodes"] * df["gpus_per_node"]).all()
    assert np.allclose(df["speedup"], df["baseline_time_s"] / df["fused_time_s"])
    assert np.allclose(df["time_reduction"], 1 - df["fused_time_s"] / df["baseline_time_s"])
    assert np.allclose(df["baseline_time_s"], df["baseline_compute_s"] + df["baseline_exposed_comm_s"])
    assert (df[["baseline_time_s", "fused_time_s"]] > 0).all().all()
    assert set(df["regime"]) == {"intra", "inter"}
    for name in ("speedup_vs_size.png", "timeline.png"):
        data = (out / name).read_bytes()
        assert data[:4] == b"\x89PNG" and len(data) > 1000
    trace = json.loads((out / "timeline_trace.json").read_text())
    assert trace["traceEvents"]
    summ = pd.read_csv(out / "summary.csv")
    assert {"op", "regime", "avg_time_reduction", "max_time_reduction", "paper_avg"} <= set(summ.columns)


@pytest.mark.parametrize("args, needle", [(["--occupancy-loss", "-1"], "--occupancy-loss"),
                                          (["--topology", "/nonexistent.yaml"], "nonexistent.yaml"),
                                          (["--out", "/proc/simfuse_x"], "--out")])
def test_fused_ops_bad_arguments_exit_2_without_traceback(root, tmp_path, args, needle):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "experiments/fused_ops/fused_ops.py", "--tiny", "--out", str(out), *args],
                       capture_output=True, text=True, cwd=root, timeout=120)
    assert r.returncode == 2 and needle in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()
