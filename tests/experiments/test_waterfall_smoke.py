"""experiments/scaling/paper_waterfall.py on its tiny configuration: one change per step, the chain ends exactly on the
realistic model run directly, the deltas add up, and the HugeCTR-faithful rows have both modes."""

import subprocess
import sys

import pandas as pd
import pytest


def test_waterfall_tiny(root, tmp_path):
    r = subprocess.run([sys.executable, "experiments/scaling/paper_waterfall.py", "--tiny", "--workers", "1", "--out",
                        str(tmp_path)], capture_output=True, text=True, cwd=root, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    w = pd.read_csv(tmp_path / "waterfall.csv")
    assert list(w["step"]) == list(range(len(w)))
    last, check = w.iloc[-2], w.iloc[-1]
    assert check["label"] == "realistic (check)"
    assert check["speedup"] == pytest.approx(last["speedup"], rel=1e-12)
    assert w["delta_speedup"].iloc[1:-1].sum() == pytest.approx(last["speedup"] - w["speedup"].iloc[0])
    assert (w["speedup"] - w["baseline_ms"] / w["fused_ms"]).abs().max() < 1e-9
    assert (tmp_path / "waterfall.png").stat().st_size > 0
    t = pd.read_csv(tmp_path / "transport_whatif.csv")
    assert set(t["baseline_transport"]) == {"NCCL proxy (shipped)", "GPU-initiated bulk"}
    # cheaper posts can only shorten the bulk baseline (both modes keep their other collectives on the same transport)
    proxy, gpu = (t[t["baseline_transport"] == k].iloc[0] for k in ("NCCL proxy (shipped)", "GPU-initiated bulk"))
    assert gpu["baseline_ms"] <= proxy["baseline_ms"] + 1e-9 and gpu["net_overhead_us"] < proxy["net_overhead_us"]
    h = pd.read_csv(tmp_path / "hugectr_fused.csv")
    assert len(h) >= 1 and (h["speedup"] > 0).all()


@pytest.mark.parametrize("args, needle", [(["--nodes", "0"], "--nodes"), (["--workers", "0"], "--workers"),
                                          (["--topology", "nope"], "nope.yaml"),
                                          (["--hugectr-topology", "nope"], "nope.yaml")])
def test_waterfall_bad_arguments_exit_2_without_traceback(root, tmp_path, args, needle):
    out = tmp_path / "out"
    r = subprocess.run([sys.executable, "experiments/scaling/paper_waterfall.py", *args, "--out", str(out)],
                       capture_output=True, text=True, cwd=root, timeout=120)
    assert r.returncode == 2 and needle in r.stderr, r.stderr[-2000:]
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not out.exists()
