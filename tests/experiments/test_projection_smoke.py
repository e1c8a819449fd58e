"""experiments/scaling/dlrm_projection.py on its tiny configuration: every output, bands around the point, and the
headline table made of the CSV it wrote."""

import subprocess
import sys

import pandas as pd


def test_projection_tiny(root, tmp_path):
    r = subprocess.run([sys.executable, "experiments/scaling/dlrm_projection.py", "--tiny", "--quiet", "--workers", "1",
                        "--out", str(tmp_path)], capture_output=True, text=True, cwd=root, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    for f in ("projection.csv", "projection.png", "sensitivity.csv", "tornado.png", "headline.md"):
        assert (tmp_path / f).stat().st_size > 0, f
    t = pd.read_csv(tmp_path / "projection.csv")
    assert set(t["scaling"]) == {"strong", "weak"} and set(t["nodes"]) == {1, 2}
    assert (t["speedup_p10"] <= t["speedup_p90"]).all()
    assert (t["speedup"] - t["baseline_ms"] / t["fused_ms"]).abs().max() < 1e-9
    s = pd.read_csv(tmp_path / "sensitivity.csv")
    assert (s["method"] == "oat").all() and set(s["nodes"]) == {2}
    sys.path.insert(0, str(root / "experiments" / "scaling"))
    from headline import headline_table

    assert (tmp_path / "headline.md").read_text() == headline_table(t)


def test_projection_series_side_by_side_equal_one_after_the_other(root, tmp_path):
    """With two workers the tiny configuration's two series run side by side, one per worker process; the table
    is the one a single worker writes."""
    outs = []
    for w in ("1", "2"):
        out = tmp_path / f"w{w}"
        r = subprocess.run([sys.executable, "experiments/scaling/dlrm_projection.py", "--tiny", "--oat-nodes=",
                            "--workers", w, "--out", str(out)], capture_output=True, text=True, cwd=root, timeout=600)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "H100 strong: done" in r.stdout and "H100 weak: done" in r.stdout
        outs.append(pd.read_csv(out / "projection.csv"))
    pd.testing.assert_frame_equal(outs[0], outs[1])


def test_bench_uncertainty_tiny(root, tmp_path):
    out = tmp_path / "bench.csv"
    r = subprocess.run([sys.executable, "experiments/bench/bench_uncertainty.py", "--model", "models/dlrm_synthetic.yaml",
                        "--nodes", "2", "--draws", "3", "--global-batch", "4096", "--topologies",
                        "h100_nvl8_ib_ndr", "--sensitivity", "rank", "--workers", "1", "--out", str(out)],
                       capture_output=True, text=True, cwd=root, timeout=600)
    assert r.returncode == 0, r.stderr[-2000:]
    b = pd.read_csv(out)
    assert len(b) == 1 and b["interval_runs"].iloc[0] == 3 and b["wall_s"].iloc[0] > 0
    assert b["guard_estimate_s"].iloc[0] >= 0 and b["speedup_p10"].iloc[0] <= b["speedup_p90"].iloc[0]


def test_projection_bad_arguments_exit_2_without_traceback(root, tmp_path):
    base = ["experiments/scaling/dlrm_projection.py", "--model", "models/dlrm_synthetic.yaml", "--topologies",
            "h100_nvl8_ib_ndr", "--nodes", "1", "--oat-nodes=", "--global-batch", "4096", "--workers", "1", "--quiet"]
    cases = [(["--draws", "-1"], "--draws"), (["--oat-nodes", "x"], "--oat-nodes"), (["--nodes", "0"], "--nodes"),
             (["--scaling", "bogus"], "--scaling"), (["--workers", "0"], "--workers"),
             (["--model", str(tmp_path / "none.yaml")], "none.yaml"), (["--topologies", "nope"], "nope.yaml"),
             (["--global-batch", "-5"], "--global-batch")]
    for extra, needle in cases:
        out = tmp_path / "out"
        r = subprocess.run([sys.executable, *base, *extra, "--out", str(out)], capture_output=True, text=True,
                           cwd=root, timeout=120)
        assert r.returncode == 2 and needle in r.stderr, (extra, r.stderr[-2000:])
        assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert not out.exists(), extra
    r = subprocess.run([sys.executable, *base, "--out", "/proc/simfuse_projection"], capture_output=True, text=True,
                       cwd=root, timeout=120)
    assert r.returncode == 2 and "--out" in r.stderr and "Traceback" not in r.stderr
